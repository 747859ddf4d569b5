"""Self-healing rules, pure: which brokers to empty and when an added broker should get load.

- A broker that some partition lists as a replica but that is not registered (its lease or session
  expired) is *missing*; missing for longer than ``grace_ms`` it is *dead* and excluded, so the plan
  re-creates its replicas on live brokers. A broker back before the grace period is forgiven.
- A broker reporting an offline log dir (DescribeLogDirs error KAFKA_STORAGE_ERROR) is excluded: its
  replicas are moved off (drained) while it is still up.
- Drained brokers (``tidelog governor drain``) are excluded until undrained.
- A registered broker holding no replica while others hold some is *added*: a balancing plan moves
  load onto it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def missing_since(previous: Mapping[int, int], registered: Iterable[int], referenced: Iterable[int],
                  now_ms: int) -> dict[int, int]:
    """Broker id -> first time it was seen missing; brokers seen again drop out."""
    live = set(registered)
    return {b: previous.get(b, now_ms) for b in set(referenced) if b not in live}


def exclusions(missing: Mapping[int, int], offline_dirs: Iterable[int], drained: Iterable[int], now_ms: int,
               grace_ms: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for b in drained:
        out[b] = "draining"
    for b in offline_dirs:
        out.setdefault(b, "offline log dir")
    for b, since in missing.items():
        if now_ms - since >= grace_ms:
            out.setdefault(b, f"dead for {(now_ms - since) // 1000} s")
    return out


def added_brokers(replica_counts: Mapping[int, int], excluded: Iterable[int]) -> list[int]:
    """Registered brokers (not excluded) with no replica while the cluster holds replicas."""
    skip = set(excluded)
    if not any(replica_counts.values()):
        return []
    return sorted(b for b, n in replica_counts.items() if n == 0 and b not in skip)
