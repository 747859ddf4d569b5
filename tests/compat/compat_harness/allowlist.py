"""The reviewed list of differences between tidelog and Apache Kafka: ``allowed_differences.toml``.

Three kinds of entry, each with a ``reason`` (a loader refuses an entry without one):

``[[normalise]]``  ``field``, ``action``: applied to both sides before comparing (see ``normalise``).
``[[allow]]``      ``scenario``, ``path``: a difference that is fine, and why. ``*`` in either is a
                   wildcard for any characters (nothing else is special, so ``[`` and ``]`` in paths
                   are literal); ``path`` may be a list of such patterns. Optional ``kafka`` / ``tidelog`` pin the two values: if either
                   broker's answer changes, the entry stops matching and the difference fails again.
``[[known_bug]]``  ``scenario`` (exact name, or a list of them), ``path``, ``finding`` (an id in
                   ``docs/dev/compat-findings.md``): a difference that is a tidelog bug not fixed yet.
                   Its scenario is reported as an expected failure while the bug reproduces and fails
                   as soon as it no longer does (in any of its scenarios), so the entry is removed or
                   narrowed when the fix lands.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_harness.normalise import ABSENT, Difference, Rule

ALLOWLIST_PATH = Path(__file__).resolve().parent.parent / "allowed_differences.toml"
_UNSET = object()


def _pattern(glob: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in glob.split("*")) + r"\Z")


@dataclass(frozen=True)
class Entry:
    kind: str  # "allow" or "known_bug"
    scenarios: tuple[str, ...]
    paths: tuple[str, ...]
    reason: str
    finding: str | None = None
    kafka: Any = _UNSET
    tidelog: Any = _UNSET

    def matches(self, scenario: str, difference: Difference) -> bool:
        if self.kind == "known_bug":
            if scenario not in self.scenarios:
                return False
        elif not any(_pattern(glob).match(scenario) for glob in self.scenarios):
            return False
        if not any(_pattern(path).match(difference.path) for path in self.paths):
            return False
        return _same(self.kafka, difference.kafka) and _same(self.tidelog, difference.tidelog)

    def describe(self) -> str:
        label = f"known bug {self.finding}" if self.finding else "allowed"
        return f"{label}: {self.reason}"


def _same(pinned: Any, actual: Any) -> bool:
    if pinned is _UNSET:
        return True
    if pinned == ABSENT:
        return actual == ABSENT
    return bool(pinned == actual and type(pinned) is type(actual))


@dataclass(frozen=True)
class AllowList:
    rules: tuple[Rule, ...]
    entries: tuple[Entry, ...]

    def classify(self, scenario: str, difference: Difference) -> Entry | None:
        """The first entry that covers ``difference`` in ``scenario``, known bugs first."""
        ordered = sorted(self.entries, key=lambda entry: entry.kind != "known_bug")
        return next((entry for entry in ordered if entry.matches(scenario, difference)), None)

    def known_bugs(self, scenario: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == "known_bug" and scenario in e.scenarios]


def load(path: Path = ALLOWLIST_PATH) -> AllowList:
    data = tomllib.loads(path.read_text())
    rules = []
    for item in data.get("normalise", []):
        _require(item, "normalise", ("field", "action", "reason"))
        rules.append(Rule(item["field"], item["action"], item["reason"]))
    entries = []
    for kind, required in (("allow", ("scenario", "path", "reason")),
                           ("known_bug", ("scenario", "path", "reason", "finding"))):
        for item in data.get(kind, []):
            _require(item, kind, required)
            paths = item["path"] if isinstance(item["path"], list) else [item["path"]]
            scenarios = item["scenario"] if isinstance(item["scenario"], list) else [item["scenario"]]
            entries.append(Entry(
                kind=kind, scenarios=tuple(scenarios), paths=tuple(paths), reason=item["reason"],
                finding=item.get("finding"), kafka=item.get("kafka", _UNSET),
                tidelog=item.get("tidelog", _UNSET),
            ))
    return AllowList(tuple(rules), tuple(entries))


def _require(item: dict[str, Any], kind: str, keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if not str(item.get(key, "")).strip()]
    if missing:
        raise ValueError(f"[[{kind}]] entry {item!r} in {ALLOWLIST_PATH.name} lacks {missing}")
