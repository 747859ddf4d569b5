"""Principals: who a connection is, as Kafka names it (``User:alice``).

- PLAINTEXT, and SSL without a client certificate: ``User:ANONYMOUS``.
- SASL_PLAINTEXT and SASL_SSL: ``User:<the authenticated name>``.
- SSL with a client certificate: ``User:<the certificate's subject, mapped>``. The subject is written
  as an RFC 2253 distinguished name, most specific part first (``CN=alice,OU=eng,O=Acme,C=US``), the
  form Java's ``X500Principal.getName()`` gives, then passed through ``ssl.principal.mapping.rules``.

Mapping rules (Kafka's ``SslPrincipalMapper``), tried in order, the first that applies wins::

    DEFAULT                          the distinguished name unchanged
    RULE:<regex>/<replacement>/[L|U]  if <regex> matches the whole name, the name becomes
                                      <replacement> ($1, $2 ... are the regex's groups),
                                      then optionally lower- (L) or upper-cased (U)

Rules are separated by commas or newlines; a ``/`` inside a rule is written ``\\/``. When no rule
applies the connection has no principal and is closed, as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ANONYMOUS = "User:ANONYMOUS"

# Attribute names Java's RFC 2253 output uses as keywords; others appear by OID.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's distinguished name."""


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in ',+"\\<>;' or (i == 0 and char in "# ") or (i == len(value) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _der_ia5(value: str) -> str:
    data = value.encode("ascii", "replace")
    length = bytes([len(data)]) if len(data) < 128 else bytes([0x81, len(data)]) if len(data) < 256 else bytes([0x82]) + len(data).to_bytes(2, "big")
    return "#" + (b"\x16" + length + data).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    if name == "emailAddress":
        return f"{_EMAIL_OID}={_der_ia5(value)}"
    return f"{name}={_escape(value)}"


def distinguished_name(peercert: Mapping[str, Any]) -> str | None:
    """The RFC 2253 subject of a certificate as ``ssl.SSLSocket.getpeercert()`` returns it."""
    subject = peercert.get("subject")
    if not subject:
        return None
    rdns: Sequence[Sequence[tuple[str, str]]] = subject
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(rdns))


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        result = match.expand(self.replacement)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _java_replacement(text: str) -> str:
    """Java's ``$1`` group references and ``\\x`` escapes → Python's ``Match.expand`` template."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append("\\\\" if text[i + 1] == "\\" else text[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1 : j]}>")
            i = j
        else:
            out.append("\\\\" if char == "\\" else char)
            i += 1
    return "".join(out)


def _read_until_slash(text: str, start: int) -> tuple[str, int]:
    i = start
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] == "/":
            i += 2
            continue
        if text[i] == "/":
            return text[start:i], i + 1
        i += 1
    raise ValueError(f"Invalid rule: {text[start - 5 if start >= 5 else 0:]!r} (expected RULE:pattern/replacement/[LU])")


def parse_rules(text: str) -> list[_Rule]:
    """Parse ``ssl.principal.mapping.rules``; raises ValueError with the offending part."""
    rules: list[_Rule] = []
    i = 0
    text = text.strip()
    while i < len(text):
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if text.startswith("DEFAULT", i):
            rules.append(_Rule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _read_until_slash(text, i + len("RULE:"))
            replacement, i = _read_until_slash(text, i)
            case = ""
            if i < len(text) and text[i] in "LU":
                case = text[i]
                i += 1
            try:
                compiled = re.compile(pattern.replace("\\/", "/"))
            except re.error as exc:
                raise ValueError(f"Invalid rule pattern {pattern!r}: {exc}") from None
            rules.append(_Rule(compiled, _java_replacement(replacement.replace("\\/", "/")), case))
        else:
            raise ValueError(f"Invalid rule: {text[i:]!r}")
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text):
            if text[i] not in ",\n":
                raise ValueError(f"Invalid rule: {text[i:]!r}")
            i += 1
    return rules


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules_text = rules
        self._rules = parse_rules(rules)

    def name(self, distinguished: str) -> str:
        for rule in self._rules:
            mapped = rule.apply(distinguished)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished}, rules {self.rules_text}")

    def principal(self, peercert: Mapping[str, Any] | None) -> str:
        """``User:<mapped subject>``, or ANONYMOUS for a connection without a client certificate."""
        if not peercert:
            return ANONYMOUS
        distinguished = distinguished_name(peercert)
        if distinguished is None:
            return ANONYMOUS
        return "User:" + self.name(distinguished)
