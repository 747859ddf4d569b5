"""The Kafka-mode spool's local positions file: a new generation's numbering is saved before its first
hand-off, positions are taken lazily and never put the numbering back, and a restart finds them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tidelog.agent.config import FileGroup
from tidelog.agent.files import Source
from tidelog.agent.local_positions import SAVE_INTERVAL_S, LocalPositions
from tidelog.agent.state_file import StateFileError

GROUP = FileGroup(paths=("*.log",), topic="t")


def _source(log: Path) -> Source:
    source = Source(f"h:{log}", str(log), GROUP)
    assert source.open_path(0.0)
    return source


def _file(folder: Path) -> Any:
    return json.loads((folder / "positions.json").read_bytes())


def _numbering(folder: Path) -> list[tuple[int, list[tuple[int, int]]]]:
    return [(s["next_generation"], [(g["generation"], g["offset"]) for g in s["generations"]])
            for s in _file(folder)["sources"]]


def _read_all(source: Source, now: float) -> int:
    source.check(now)
    return len(source.read(1000, now, 0.5, 0.5))


def test_a_new_generation_is_saved_at_its_committed_offset_before_its_first_hand_off(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\nb\n")
    state = tmp_path / "state"
    local = LocalPositions(state, "agent")
    assert not local.exists()
    source = _source(log)
    assert _read_all(source, 0.0) == 2
    local.before_handoff([source], 0.0)
    assert _numbering(state) == [(1, [(0, 0)])]  # generation 0 listed, nothing of it committed yet
    saved = local.load()[source.source_id]
    assert saved.generations[0].ino == os.stat(log).st_ino
    os.remove(state / "positions.json")
    local.before_handoff([source], 0.1)  # the same numbering: no rewrite
    assert not local.exists()


def test_handed_states_are_saved_lazily_at_once_on_a_rotation_and_never_put_the_numbering_back(
    tmp_path: Path,
) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    state = tmp_path / "state"
    local = LocalPositions(state, "agent")
    source = _source(log)
    local.reset({}, 0.0)
    assert _file(state)["sources"] == []
    _read_all(source, 0.0)
    local.before_handoff([source], 0.0)
    old_state = json.dumps({"agent": "agent", "source": source.source_id, "path": str(log), "topic": "t",
                            "next_generation": 0, "generations": []})
    source.committed()
    first = _state_of(source, log)
    local.after_handoff([(source, first)], 0.1)  # the first hand-off of this shape: saved at once
    assert _numbering(state) == [(1, [(0, 2)])]
    with log.open("ab") as f:
        f.write(b"b\n")
    _read_all(source, 0.2)
    source.committed()
    local.after_handoff([(source, _state_of(source, log))], 0.2)  # same shape, within the interval
    assert _numbering(state) == [(1, [(0, 2)])]
    local.after_handoff([(source, old_state)], 0.3)  # a stale state (a failed commit's): ignored
    local.tick(0.1 + SAVE_INTERVAL_S / 2)
    assert _numbering(state) == [(1, [(0, 2)])]
    local.tick(0.1 + SAVE_INTERVAL_S)  # idle: the state taken is written once it has waited long enough
    assert _numbering(state) == [(1, [(0, 4)])]
    log.rename(tmp_path / "app.log.1")
    log.write_bytes(b"c\n")
    source.check(2.0)
    _read_all(source, 3.0)
    _read_all(source, 4.0)
    local.before_handoff([source], 4.0)  # generation 1 before its first line leaves
    assert _numbering(state) == [(2, [(0, 4), (1, 0)])]
    source.committed()
    local.after_handoff([(source, _state_of(source, log))], 4.1)  # generation 0 let go: saved at once
    assert _numbering(state) == [(2, [(1, 2)])]
    source.close()


def _state_of(source: Source, log: Path) -> str:
    return json.dumps({"agent": "agent", "source": source.source_id, "path": str(log), "topic": "t",
                       "next_generation": source.next_generation,
                       "generations": [g.to_json() for g in source.saved_state()]}, separators=(",", ":"))


def test_an_unreadable_file_is_reported_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "positions.json").write_text("{not json")
    with pytest.raises(StateFileError, match=r"positions\.json: unreadable"):
        LocalPositions(tmp_path, "agent").load()
