"""Scenarios: the same request sequence, sent to Apache Kafka and to tidelog, recorded and compared.

A scenario is a function ``scenario_NAME(b: Broker) -> None`` whose docstring says what it checks.
It talks to the broker only through ``b`` and records each observation under a label: ``b.call``
sends a request and records the response (or ``Closed``, ...), ``b.note`` records a value the
scenario computed. ``b.quiet`` sends without recording (polling until a topic is ready: Kafka
creates topics asynchronously, tidelog at once, and how many polls it takes is not behaviour).

``compare(scenario, kafka, tidelog, allowlist)`` runs the scenario once against each broker with the
same topic names, normalises both transcripts, diffs them, and classifies each difference as
allowed, known bug, or unexplained. An exception inside a scenario is recorded as its last step,
so a broker that breaks a scenario shows up as a difference, not as a crash of the harness.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat_harness.allowlist import AllowList, Entry
from compat_harness.entities import to_plain
from compat_harness.normalise import Difference, Normaliser, diff
from compat_harness.wire import Closed, RawAnswer, Unanswered, Undecodable, Wire

ScenarioFn = Callable[["Broker"], None]


@dataclass(frozen=True)
class Endpoint:
    name: str  # "kafka" or "tidelog"
    host: str
    port: int


class Broker:
    """One broker as a scenario sees it: a default connection, names, and the transcript."""

    def __init__(self, endpoint: Endpoint, prefix: str) -> None:
        self.endpoint = endpoint
        self.name = endpoint.name
        self.prefix = prefix
        self.wire = Wire(endpoint.host, endpoint.port)
        self._extra: list[Wire] = []
        self.steps: list[tuple[str, Any]] = []

    # -- names ---------------------------------------------------------------------------------

    def topic(self, suffix: str = "") -> str:
        """A topic name unique to this scenario in this session, identical on both brokers."""
        return f"{self.prefix}{suffix}"

    # -- talking ----------------------------------------------------------------------------------

    def connection(self, timeout: float = 15.0) -> Wire:
        """An extra connection (closed when the scenario ends)."""
        wire = Wire(self.endpoint.host, self.endpoint.port, timeout=timeout)
        self._extra.append(wire)
        return wire

    def call(self, label: str, request: Any, *, wire: Wire | None = None) -> Any:
        outcome = (wire or self.wire).call(request)
        self.record(label, outcome)
        return outcome

    def quiet(self, request: Any) -> Any:
        return self.wire.call(request)

    def probe(self, label: str, request: Any, version: int, api_key: int | None = None) -> Any:
        """Send ``request``'s body under ``version`` on a fresh connection; record what happens."""
        outcome = self.connection().send_version(request, version, api_key)
        self.record(label, outcome)
        return outcome

    def note(self, label: str, value: Any) -> None:
        self.steps.append((label, value))

    def record(self, label: str, outcome: Any) -> None:
        self.steps.append((label, plain_outcome(outcome)))

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
            time.sleep(0.05)

    def close(self) -> None:
        self.wire.close()
        for wire in self._extra:
            wire.close()


def plain_outcome(outcome: Any) -> Any:
    if isinstance(outcome, Closed):
        return "<connection closed without an answer>"
    if isinstance(outcome, Unanswered):
        return "<no answer within the timeout>"
    if isinstance(outcome, Undecodable):
        return {"undecodable": outcome.reason}
    if isinstance(outcome, RawAnswer):
        return {"raw_answer": outcome.body}
    return to_plain(outcome)


def run(scenario: ScenarioFn, endpoint: Endpoint, prefix: str) -> list[tuple[str, Any]]:
    broker = Broker(endpoint, prefix)
    try:
        scenario(broker)
    except Exception as exc:
        broker.note("scenario aborted", f"{type(exc).__name__}: {exc}")
    finally:
        broker.close()
    return broker.steps


def transcript(steps: list[tuple[str, Any]], normaliser: Normaliser) -> dict[str, Any]:
    """Steps as an ordered mapping, normalised; a repeated label gets ``#2``, ``#3``, ..."""
    out: dict[str, Any] = {}
    for label, value in steps:
        key, n = label, 1
        while key in out:
            n += 1
            key = f"{label}#{n}"
        out[key] = normaliser.apply(value)
    return out


@dataclass
class Result:
    """One scenario's comparison."""

    name: str
    doc: str
    kafka: dict[str, Any]
    tidelog: dict[str, Any]
    allowed: list[tuple[Difference, Entry]] = field(default_factory=list)
    known: list[tuple[Difference, Entry]] = field(default_factory=list)
    unexplained: list[Difference] = field(default_factory=list)
    stale_bugs: list[Entry] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.unexplained or self.stale_bugs:
            return "different"
        if self.known:
            return "known bug"
        if self.allowed:
            return "allowed differences"
        return "same"

    def failure_text(self) -> str:
        lines = [f"scenario {self.name}: tidelog differs from Apache Kafka", f"  ({self.doc})"]
        if self.unexplained:
            lines.append("unexplained differences (path: kafka=... tidelog=...):")
            lines += [f"  {difference}" for difference in self.unexplained]
        for entry in self.stale_bugs:
            lines.append(
                f"known bug {entry.finding} ({', '.join(entry.paths)}) no longer reproduces: remove its [[known_bug]] "
                "entry from tests/compat/allowed_differences.toml and mark the finding fixed"
            )
        if self.known:
            lines.append("known bugs still present:")
            lines += [f"  {d} [{e.finding}]" for d, e in self.known]
        return "\n".join(lines)


def compare(name: str, scenario: ScenarioFn, kafka: Endpoint, tidelog: Endpoint, allowlist: AllowList,
            prefix: str) -> Result:
    kafka_steps = run(scenario, kafka, prefix)
    tidelog_steps = run(scenario, tidelog, prefix)
    left = transcript(kafka_steps, Normaliser(allowlist.rules))
    right = transcript(tidelog_steps, Normaliser(allowlist.rules))
    doc = " ".join((scenario.__doc__ or "").split())
    result = Result(name, doc, left, right)
    for difference in diff(left, right):
        entry = allowlist.classify(name, difference)
        if entry is None:
            result.unexplained.append(difference)
        elif entry.kind == "known_bug":
            result.known.append((difference, entry))
        else:
            result.allowed.append((difference, entry))
    _dump(name, left, right)
    matched = {id(entry) for _, entry in result.known}
    result.stale_bugs = [entry for entry in allowlist.known_bugs(name) if id(entry) not in matched]
    return result


def _dump(name: str, kafka: dict[str, Any], tidelog: dict[str, Any]) -> None:
    """With ``COMPAT_DUMP=DIR``, write both normalised transcripts to ``DIR/NAME.json``."""
    folder = os.environ.get("COMPAT_DUMP")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        text = json.dumps({"kafka": kafka, "tidelog": tidelog}, indent=1, default=repr)
        (Path(folder) / f"{name}.json").write_text(text)


def scenario_params(namespace: dict[str, Any]) -> list[Any]:
    """``pytest.param`` for every ``scenario_*`` function of a module, with its name as the id."""
    return [
        pytest.param(fn, id=name.removeprefix("scenario_"))
        for name, fn in namespace.items()
        if name.startswith("scenario_") and callable(fn)
        and getattr(fn, "__module__", None) == namespace["__name__"]  # not imported helpers
    ]
