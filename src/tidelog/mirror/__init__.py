"""``tidelog mirror``: copy topics from one cluster to another, partition for partition, exactly once.

A *link* copies the topics its patterns select from a source cluster to a destination cluster. It
speaks only the Kafka protocol to both (confluent-kafka), so either side may be tidelog or Apache
Kafka. Design (docs/mirror.md says more):

- **1:1.** Source partition n of topic T goes to partition n of the renamed topic, in source order,
  with keys, headers and CreateTime timestamps kept; the source is read read_committed, so aborted
  data and control records are never copied. Each copy gets one more header, ``tidelog.mirror.offset``
  (its source offset).
- **Exactly once: Kafka transactions on the destination, with the position kept there.** Each
  destination transaction holds copies and, in the link topic, a checkpoint per partition saying
  which source offset comes next (position.py). The checkpoint is committed with the copies or not at
  all, so after any crash the destination alone says where to resume, with no gap and no second copy.
  Chosen over reading the position back from the copies' headers at the destination's tail: a
  tail read must skip control batches and other writers' records and cannot tell an open
  transaction's copies from committed ones without waiting for it, whereas the checkpoint is read
  after ``init_transactions()`` has settled every earlier transaction. The header is kept for exact
  offset translation and for audits.
- **Shards.** A link has a fixed number of shards; a source partition belongs to shard
  crc32(topic|partition) mod shards. A shard is one transactional.id, one partition of the link
  topic (which holds its checkpoints), and the unit of work that mirror processes split through a
  consumer group on the destination (the link group, over the link topic). Taking a shard starts
  with ``init_transactions()``, which fences the previous owner (shard.py).
- **Bounded memory.** One byte budget per process, shared by every partition, fair between them
  (budget.py): no per-partition buffers. What does grow with the partitions is librdkafka's state,
  about 1.7 KiB a partition in each client (the source consumer, one producer per shard owned), hence
  few shards by default (4); memory.py keeps glibc's arenas from holding freed memory per thread.

- **Offsets preserved** (``offsets = "preserve"``, tidelog destinations only; preserve.py): whole
  batches, control batches included, are written at their source offsets with tidelog's MirrorProduce
  request; the position is the destination's log end offset, and the destination acknowledges
  without writing any batch below it, so a restart or retry never writes twice. No transactions,
  checkpoints or link group in that mode.

Modules: config.py (TOML), position.py (checkpoints, shards, translation: pure), budget.py (pure),
topics.py (destination topics follow the source), memory.py (the C heap), shard.py (a shard's producer and positions),
copier.py (the loop), metrics.py, app.py (process + HTTP), status.py, translate.py; preserve.py and
batches.py (pure) for offsets = "preserve".
"""

from tidelog.mirror.config import MirrorConfig, TopicRule, load_config, parse_config
from tidelog.mirror.copier import Mirror
from tidelog.mirror.topics import LinkError

__all__ = ["LinkError", "Mirror", "MirrorConfig", "TopicRule", "load_config", "parse_config"]
