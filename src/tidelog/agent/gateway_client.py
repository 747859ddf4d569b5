"""Gateway mode's HTTP side: a source's lines as write requests to ``tidelog gateway``, sent until answered.

One request per source and batch, ``POST <url>/v1/topics/<topic>/write`` with a JSON body::

    {"sourceId": "web-1:/var/log/app.log", "meta": {"host": "web-1", "file": "/var/log/app.log"},
     "chunks": [{"seqno": 8192, "records": [{"value": "GET / 200", "key": "web-1:/var/log/app.log",
                                             "headers": {"tidelog-generation": "0"}}]}, ...]}

**One chunk per line**, so the gateway's rule (a chunk is written iff its seqno is above the source's
last one) decides line by line: however a restarted agent groups lines into requests, a line already
written is skipped and no other is. A cut line also carries ``tidelog-original-size``.

**The seqno** of a line is :func:`seqno_of` ``(generation, end)`` = ``generation << 40 | end``, where
``end`` is the byte offset of the line's end in its file. It is the byte offset itself for a source's
first file; the generation in the high bits keeps it growing when the path gets a new file (after a
rename or a truncation the offsets start again from 0). Files up to 1 TiB, 2^23 generations.

**Values** are JSON strings, written by the gateway as UTF-8: a line that is not valid UTF-8 has its
bad bytes replaced by U+FFFD (counted in ``replaced_lines_total``). Direct mode keeps the bytes.

**Answers.** 200: every chunk ``written`` or ``duplicate`` (both mean the line is in the topic).
503, other 5xx, 421 and connection failures: the outcome is unknown or the gateway is busy, so the
same request is sent again (always safe: same seqnos) after ``Retry-After`` (0.5 s to 5 s) until an
answer or ``stop``. 413 with more than one chunk: sent again in two halves. 400, 401, 403, 404 and
413 for one line: :class:`GatewayRejected`, the agent stops (a configuration to fix, not an outage).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from tidelog.agent.config import GatewayTarget
from tidelog.agent.outage_spool import Pending

log = logging.getLogger(__name__)

OFFSET_BITS = 40
MAX_OFFSET = (1 << OFFSET_BITS) - 1
MAX_CHUNKS = 10_000  # the gateway's limit per request
HEADER_GENERATION = "tidelog-generation"
HEADER_ORIGINAL_SIZE = "tidelog-original-size"
_RETRIABLE = {421, 500, 502, 503, 504}


class GatewayRejected(Exception):
    """The gateway refused a request for a reason that retrying cannot fix; the message says what."""


def seqno_of(generation: int, end: int) -> int:
    if end > MAX_OFFSET:
        raise GatewayRejected(f"byte offset {end} is past 1 TiB: gateway mode numbers lines up to 2^40 per file")
    return generation << OFFSET_BITS | end


def split_seqno(seqno: int) -> tuple[int, int]:
    return seqno >> OFFSET_BITS, seqno & MAX_OFFSET


@dataclass
class Outcome:
    written: int = 0
    duplicates: int = 0


class GatewayClient:
    def __init__(self, target: GatewayTarget, host: str) -> None:
        self.target = target
        self.host = host
        headers = {"content-type": "application/json", "user-agent": "tidelog-agent"}
        if target.token:
            headers["authorization"] = f"Bearer {target.token}"
        self.http = httpx.Client(base_url=target.url, headers=headers,
                                 timeout=target.request_timeout_ms / 1000 + 5)
        self.replaced_lines = 0
        self.retry_after = 0.5  # what the last failure asked to wait
        self._out_of_reach = False

    # ---- bodies ------------------------------------------------------------------------------------

    def _chunk(self, source_id: str, line: Pending) -> dict[str, Any]:
        headers = {HEADER_GENERATION: str(line.generation)}
        if line.original_size:
            headers[HEADER_ORIGINAL_SIZE] = str(line.original_size)
        try:
            value = line.value.decode()
        except UnicodeDecodeError:
            value = line.value.decode(errors="replace")
            self.replaced_lines += 1
        return {"seqno": seqno_of(line.generation, line.end),
                "records": [{"value": value, "key": source_id, "headers": headers}]}

    def batches(self, lines: Sequence[Pending]) -> Iterator[Sequence[Pending]]:
        """``lines`` in runs that fit ``request.max.bytes`` (estimated) and the gateway's chunk limit."""
        start, size = 0, 0
        for index, line in enumerate(lines):
            cost = len(line.value) + 120
            if index > start and (size + cost > self.target.request_max_bytes or index - start >= MAX_CHUNKS):
                yield lines[start:index]
                start, size = index, 0
            size += cost
        if start < len(lines):
            yield lines[start:]

    def body(self, source_id: str, path: str, lines: Sequence[Pending]) -> bytes:
        return json.dumps({"sourceId": source_id, "meta": {"host": self.host, "file": path},
                           "chunks": [self._chunk(source_id, line) for line in lines]},
                          separators=(",", ":")).encode()

    # ---- sending -----------------------------------------------------------------------------------

    def write(self, topic: str, source_id: str, path: str, lines: Sequence[Pending],
              stop: threading.Event, *, patient: bool = True) -> Outcome | None:
        """Send ``lines`` until the gateway answers for every one of them; None if ``stop`` came first,
        or, unless ``patient``, at the first failure (the outcome of what was sent is then unknown)."""
        total = Outcome()
        for batch in self.batches(lines):
            outcome = self._write(topic, source_id, path, batch, stop, patient)
            if outcome is None:
                return None
            total.written += outcome.written
            total.duplicates += outcome.duplicates
        return total

    def _write(self, topic: str, source_id: str, path: str, lines: Sequence[Pending],
               stop: threading.Event, patient: bool) -> Outcome | None:
        url = f"/v1/topics/{quote(topic, safe='')}/write"
        body = self.body(source_id, path, lines)
        while True:  # tried once even when stopping: a clean stop sends what it has read if it can
            try:
                answer = self.http.post(url, content=body)
            except httpx.HTTPError as exc:
                if not self._unreachable(f"{type(exc).__name__}: {exc}", 0.5, stop, patient):
                    return None
                continue
            if answer.status_code == 200:
                self._reachable()
                return _outcome(answer)
            if answer.status_code in _RETRIABLE:
                if not self._unreachable(_message(answer), _retry_after(answer), stop, patient):
                    return None
                continue
            if answer.status_code == 413 and len(lines) > 1:
                half = len(lines) // 2
                first = self._write(topic, source_id, path, lines[:half], stop, patient)
                rest = self._write(topic, source_id, path, lines[half:], stop, patient) if first else None
                if first is None or rest is None:
                    return None
                return Outcome(first.written + rest.written, first.duplicates + rest.duplicates)
            raise GatewayRejected(f"the gateway refused a write to {topic} (HTTP {answer.status_code}): "
                                  f"{_message(answer)}")

    def _unreachable(self, why: str, wait: float, stop: threading.Event, patient: bool) -> bool:
        """Log the outage once, wait before the next try; False to give up (``stop`` set, or impatient)."""
        if not self._out_of_reach:
            log.warning("the gateway %s is out of reach (%s); %s", self.target.url, why,
                        "retrying the same lines, the files wait" if patient else "lines go to the spool")
            self._out_of_reach = True
        self.retry_after = wait
        return patient and not stop.wait(wait)

    def _reachable(self) -> None:
        if self._out_of_reach:
            log.warning("the gateway %s answers again", self.target.url)
            self._out_of_reach = False

    @property
    def out_of_reach(self) -> bool:
        return self._out_of_reach

    def close(self) -> None:
        self.http.close()


def _outcome(answer: httpx.Response) -> Outcome:
    outcome = Outcome()
    for chunk in answer.json().get("chunks", []):
        if chunk.get("status") == "written":
            outcome.written += 1
        else:
            outcome.duplicates += 1
    return outcome


def _message(answer: httpx.Response) -> str:
    try:
        error = answer.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]


def _retry_after(answer: httpx.Response) -> float:
    try:
        return min(5.0, max(0.5, float(answer.headers.get("retry-after", "0.5"))))
    except ValueError:
        return 0.5
