"""Counting every record: what a topic holds against what was sent, per key.

Records carry ``<key>`` as key and ``<seq>`` (decimal) as value, ``seq`` counting 0, 1, 2... per key
in send order. :func:`check_at_least_once` reads a list of (key, seq) in topic order (per
partition; a key lives in one partition) and asserts, per key, that every expected seq is there
and that first appearances come in send order. Duplicates are allowed (at least once); a
duplicate may trail newer records (a resend), but no record may appear before an older one's
first copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def first_seen_order(pairs: Iterable[tuple[bytes, int]]) -> dict[bytes, list[int]]:
    firsts: dict[bytes, list[int]] = {}
    seen: set[tuple[bytes, int]] = set()
    for key, seq in pairs:
        if (key, seq) not in seen:
            seen.add((key, seq))
            firsts.setdefault(key, []).append(seq)
    return firsts


def check_at_least_once(pairs: Iterable[tuple[bytes, int]], expected: Mapping[bytes, int]) -> dict[str, int]:
    """``expected[key]`` is the number of records sent with that key (seqs 0..n-1). Returns counts."""
    pairs = list(pairs)
    firsts = first_seen_order(pairs)
    for key, count in expected.items():
        got = firsts.get(key, [])
        missing = sorted(set(range(count)) - set(got))
        assert not missing, f"key {key!r}: {len(missing)} of {count} records missing, first {missing[:10]}"
        assert got == sorted(got), f"key {key!r}: first appearances out of order near {_disorder(got)}"
    unique = sum(len(v) for v in firsts.values())
    return {"records": len(pairs), "unique": unique, "duplicates": len(pairs) - unique}


def check_exactly_once(pairs: Iterable[tuple[bytes, int]], expected: Mapping[bytes, int]) -> None:
    pairs = list(pairs)
    counts = check_at_least_once(pairs, expected)
    assert counts["duplicates"] == 0, f"{counts['duplicates']} duplicates"
    per_key: dict[bytes, list[int]] = {}
    for key, seq in pairs:
        per_key.setdefault(key, []).append(seq)
    for key, seqs in per_key.items():
        assert seqs == list(range(expected.get(key, 0))), f"key {key!r}: not exactly 0..n-1 in order"


def _disorder(seqs: list[int]) -> list[int]:
    for i in range(1, len(seqs)):
        if seqs[i] < seqs[i - 1]:
            return seqs[max(0, i - 3) : i + 3]
    return []
