"""Client frameworks that survive outages, built on confluent-kafka; they reach a cluster only
through the Kafka protocol, so they work against tidelog and Apache Kafka alike.

* :class:`LogProducer` (producer.py): at-least-once sending with a disk spool in tidelog's segment
  format while the cluster is out of reach, replayed in order when it is back.
* :class:`LogConsumer` (consumer.py): one reader thread, a bounded hand-off queue, a pool of workers,
  pause/resume on back-pressure, commits of the contiguous done prefix only, at-least-once or
  exactly-once (transactions), dead-letter topic after retries.
"""

from tidelog.clients.consumer import (
    ConsumedRecord,
    ConsumerMetrics,
    HandlerError,
    LogConsumer,
    OutputRecord,
    TransactionalHandler,
)
from tidelog.clients.errors import ClientError, ClosedError, QueueFullError, SpoolFullError, SpoolLockedError
from tidelog.clients.producer import FailedRecord, LogProducer, Mode, ProducerMetrics
from tidelog.clients.spool import Spool, SpooledRecord

__all__ = [
    "ClientError",
    "ClosedError",
    "ConsumedRecord",
    "ConsumerMetrics",
    "FailedRecord",
    "HandlerError",
    "LogConsumer",
    "LogProducer",
    "Mode",
    "OutputRecord",
    "ProducerMetrics",
    "QueueFullError",
    "Spool",
    "SpoolFullError",
    "SpoolLockedError",
    "SpooledRecord",
    "TransactionalHandler",
]
