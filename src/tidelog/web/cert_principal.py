"""Client certificates as Kafka principals: the subject's distinguished name, mapped by Kafka's
``ssl.principal.mapping.rules``.

The name is the subject in RFC 2253/4514 form as Java's ``X500Principal.getName()`` gives it (what a
Kafka broker matches its rules against): the most specific part first (``CN=alice,OU=ops,O=acme``),
``,`` between RDNs, ``+`` inside a multi-valued one, the RFC 4514 specials escaped. Attribute types
without a short name are written as Python's ssl module names them.

Rules, as Kafka's: a comma-separated list of ``RULE:pattern/replacement/`` (optionally ``L`` or ``U``
after the last slash: lower- or upper-case the result) and ``DEFAULT`` (the whole name). The first
rule whose pattern matches the whole name gives the principal ``User:<result>``; ``/`` inside a
pattern or replacement is written ``\\/``; replacements use ``$1``-style groups as Java does. No rule
matching is an error for the request (Kafka refuses the connection).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SHORT = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "countryName": "C",
          "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
          "userId": "UID"}
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


class MappingRuleError(ValueError):
    """The rules do not parse; the message names where."""


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;=' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def distinguished_name(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """``getpeercert()["subject"]`` (RDNs in certificate order) as Java's RFC 2253 name."""
    return ",".join("+".join(f"{_SHORT.get(kind, kind)}={_escape(value)}" for kind, value in rdn)
                    for rdn in reversed(subject))


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        position = 0
        text = rules.strip()
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise MappingRuleError(f"ssl.principal.mapping.rules: cannot parse {text[position:position + 40]!r}")
            if match.group(1):
                self.rules.append(_Rule(None))
            else:
                pattern = match.group(2).replace("\\/", "/")
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise MappingRuleError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
                # Java's $1 groups become Python's \g<1>.
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
                self.rules.append(_Rule(compiled, replacement, match.group(4)))
            position = match.end()
        if not self.rules:
            raise MappingRuleError("ssl.principal.mapping.rules: no rule")

    def principal(self, name: str) -> str | None:
        """``User:<mapped name>``, or None when no rule matches."""
        for rule in self.rules:
            if rule.pattern is None:
                return f"User:{name}"
            if rule.pattern.fullmatch(name):
                mapped = rule.pattern.sub(rule.replacement, name, count=1)
                mapped = mapped.lower() if rule.case == "L" else mapped.upper() if rule.case == "U" else mapped
                return f"User:{mapped}"
        return None
