"""Straight to Kafka with the outage spool: a local copy of the positions, so that an agent restarted
while the cluster is out of reach reads its files on into the spool instead of waiting.

File: ``<agent.state.dir>/positions.json``, state_file.py's format (atomic rewrite: temporary file,
fsync, rename, fsync of the folder). Its ``spool`` field is 0 here: the spool's release is decided by
the committed transactions (kafka_spool.py), not by this file.

What it holds, per source: a position record (positions.py) that is **committed or spooled**, never
ahead: the state written in a transaction that committed, or handed to the spool in a fsynced batch
(both taken from ``Agent._written``), or the resumed state at start. It is rewritten lazily (states
taken wait at most ``SAVE_INTERVAL_S``, also when the agent goes idle; at once when a source's set of
generations changed; and at a clean stop), so its *progress* lags behind what is committed or
spooled. That is harmless: what is read again after a restart from it goes through the spool, and
the replay leaves out every line at or below the committed positions (kafka_spool.py, rule 1).

What may not lag is the *numbering* of generations (``next_generation``): a file whose lines are in
the topic or the spool as generation 3 must be generation 3 again after a restart, or its lines would
rank below (skipped as already committed: lost) or be shipped twice. So before a hand-off (a commit or
a spool batch) carries the first line of a generation the file does not know, the file is rewritten
at once with that source's generations listed at their committed offsets and its ``next_generation``
(:meth:`LocalPositions.before_handoff`); a restart finds those files again by inode and fingerprint.
A lazy rewrite never puts back a source's ``next_generation`` (a commit that failed leaves the older
state in ``_written``).

Invariant: for every source, the file's position is at or behind the newest of its committed position
and its spooled states (so every line above it that is in neither is still in a file), and its
``next_generation`` is above every generation with a line committed or spooled. Therefore a restart
resuming from the newest of (file, spool states), without the cluster, loses nothing the files still
hold, and replay filtered by the committed positions, read once the cluster answers, repeats nothing.

The file exists from the first start that reached the cluster on; without it (an agent of an older
version, or the file removed) a restart waits for the cluster as before, since only the positions
topic knows the numbering then.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from tidelog.agent import positions, state_file
from tidelog.agent.files import Source
from tidelog.agent.positions import SavedSource

log = logging.getLogger(__name__)

SAVE_INTERVAL_S = 1.0


def shape(source: Source) -> tuple[int, tuple[int, ...]]:
    """What a lazy rewrite must not wait for: the numbering and the generations the source holds."""
    return source.next_generation, tuple(gen.number for gen in source.generations)


class LocalPositions:
    """The positions file of the Kafka-mode spool (module docstring)."""

    def __init__(self, folder: Path, agent_id: str) -> None:
        self.folder = folder
        self.agent_id = agent_id
        self.records: dict[str, str] = {}  # source id -> position record (JSON), as in the file
        self._numbering: dict[str, int] = {}  # source id -> next_generation in the file
        self._shapes: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._saved_at = float("-inf")
        self._unsaved = False

    @property
    def path(self) -> Path:
        return self.folder / state_file.FILE_NAME

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, SavedSource]:
        """The file's positions (StateFileError when it is unreadable)."""
        return state_file.load(self.folder, self.agent_id)[0]

    def reset(self, records: Mapping[str, str], now: float) -> None:
        """Start from ``records`` (the resumed states) and write them."""
        self.records = dict(records)
        self._numbering = {sid: int(json.loads(record)["next_generation"]) for sid, record in records.items()}
        self._shapes.clear()
        self._unsaved = True
        self.save(now)

    def before_handoff(self, sources: Iterable[Source], now: float) -> None:
        """Rewrite the file now if a source is about to hand over lines of a generation it does not know.

        Raises OSError when the file cannot be written: the hand-off must then not happen."""
        fresh = [source for source in sources if source.next_generation > self._numbering.get(source.source_id, 0)]
        if not fresh:
            return
        for source in fresh:
            generations = [dataclasses.replace(gen.saved(), offset=gen.committed) for gen in source.generations]
            saved = SavedSource(source.source_id, source.path, source.group.topic, source.next_generation,
                                generations)
            self.records[source.source_id] = positions.encode(self.agent_id, saved).decode()
            self._numbering[source.source_id] = source.next_generation
        self._unsaved = True
        self.save(now)

    def after_handoff(self, handed: Iterable[tuple[Source, str]], now: float, force: bool = False) -> None:
        """Take the states just committed or spooled; rewrite the file when due. A failed rewrite is
        logged only (the file stays behind, which is allowed)."""
        changed = force
        for source, record in handed:
            if self.records.get(source.source_id) != record:
                numbering = int(json.loads(record)["next_generation"])
                if numbering < self._numbering.get(source.source_id, 0):
                    continue  # never put the numbering back (see the module docstring)
                self.records[source.source_id] = record
                self._numbering[source.source_id] = numbering
                self._unsaved = True
            current = shape(source)
            if self._shapes.get(source.source_id) != current:
                self._shapes[source.source_id] = current
                changed = True
        if self._unsaved and (changed or now - self._saved_at >= SAVE_INTERVAL_S):
            try:
                self.save(now)
            except OSError as exc:
                log.warning("%s: cannot rewrite (%s); a restart without the cluster reads more again", self.path,
                            exc)

    def tick(self, now: float) -> None:
        """Rewrite the file if it has waited ``SAVE_INTERVAL_S`` for states taken (an idle agent's too)."""
        if self._unsaved and now - self._saved_at >= SAVE_INTERVAL_S:
            self.after_handoff((), now)

    def save(self, now: float) -> None:
        if self._unsaved:
            state_file.save(self.folder, self.records.values())
            self._unsaved = False
        self._saved_at = now


__all__ = ["SAVE_INTERVAL_S", "LocalPositions", "shape"]
