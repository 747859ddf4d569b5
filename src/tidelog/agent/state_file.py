"""Gateway mode's positions: a local file, ``<agent.state.dir>/positions.json``, saved lazily.

Format (JSON, one object)::

    {"v": 1, "spool": 1200, "sources": [<a position record, as in positions.py>, ...]}

``spool`` is the outage spool's offset (outage_spool.py) below which every line was acknowledged by
the gateway and every state record is in this file: at start the spool is released up to it.

It holds, per source, a position whose lines the gateway has all acknowledged (written or duplicate):
never ahead of what is in the topic, possibly behind it, because it is rewritten only every
``gateway.positions.save.interval.ms`` and at a clean stop. A restart resumes from it and sends again
what came after; the gateway skips those lines by their seqnos. Writes are atomic (a temporary file,
fsync, rename, fsync of the folder), so a crash leaves the old file or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from tidelog.agent import positions
from tidelog.agent.positions import SavedSource

FILE_NAME = "positions.json"


class StateFileError(Exception):
    """The positions file is unreadable; the message names it."""


def save(folder: Path, records: Iterable[str], spool: int = 0) -> None:
    """Replace the file with ``records`` (position records as positions.encode returns them, decoded)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAME
    temporary = folder / (FILE_NAME + ".tmp")
    data = (f'{{"v":1,"spool":{spool},"sources":[' + ",".join(records) + "]}").encode()
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def load(folder: Path, agent_id: str) -> tuple[dict[str, SavedSource], int]:
    """The saved position of every source of ``agent_id``, and the spool offset the file covers."""
    path = folder / FILE_NAME
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}, 0
    except (OSError, ValueError) as exc:
        raise StateFileError(f"{path}: unreadable ({exc}); move it away to start from the files' beginnings"
                             ) from None
    found: dict[str, SavedSource] = {}
    try:
        for item in data["sources"]:
            owner, source = positions.from_json(item)
            if owner == agent_id:
                found[source.source_id] = source
        spool = int(data.get("spool", 0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StateFileError(f"{path}: not a positions file ({exc!r})") from None
    return found, spool
