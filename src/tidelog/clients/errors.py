"""Errors of the client frameworks.

::

    ClientError                       base of everything raised by tidelog.clients
     ├── QueueFullError               send() waited max.block.ms for room in the memory queue (also a BufferError)
     ├── SpoolFullError               the spool is at spool.max.bytes and the policy is "fail"
     ├── SpoolLockedError             another LogProducer holds the spool folder
     ├── ClosedError                  the producer or consumer was closed
     └── SaslAuthenticationError      (security.py) a broker refused tidelog's own connection's credentials
"""

from __future__ import annotations


class ClientError(Exception):
    """Base class of the client frameworks' errors."""


class QueueFullError(ClientError, BufferError):
    """The memory queue stayed full for ``max.block.ms``: the record was not taken."""


class SpoolFullError(ClientError):
    """The spool holds ``spool.max.bytes`` and ``spool.full.policy`` is ``fail``: the record was not taken."""


class SpoolLockedError(ClientError):
    """Another LogProducer (in this process or another) has the spool folder open."""


class ClosedError(ClientError):
    """The producer or consumer was closed."""
