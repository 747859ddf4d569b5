"""What a listener's security protocol needs, built once from the configuration at start-up.

=============== ===== ===== ==================================================================
protocol         TLS   SASL  principal
=============== ===== ===== ==================================================================
PLAINTEXT        no    no    User:ANONYMOUS
SSL              yes   no    from the client certificate (ssl.principal.mapping.rules), else ANONYMOUS
SASL_PLAINTEXT   no    yes   User:<authenticated name>
SASL_SSL         yes   yes   User:<authenticated name>
=============== ===== ===== ==================================================================
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ConfigError
from tidelog.protocol.sasl import PLAIN, ScramCredential
from tidelog.security.auth_throttle import FailedAuthThrottle
from tidelog.security.authenticator import SaslSettings
from tidelog.security.credentials import PlainUsers
from tidelog.security.principal import SslPrincipalMapper
from tidelog.security.tls import TlsSettings, server_context

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str
    tls: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None
    principal_mapper: SslPrincipalMapper | None = None


def build_listener_security(
    config: BrokerConfig, name: str, protocol: str, scram_lookup: Callable[[str, str], ScramCredential | None],
    throttle: FailedAuthThrottle | None = None,
) -> ListenerSecurity:
    """Raises ConfigError naming the listener and the setting at fault."""
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"listener {name}: unknown security protocol {protocol} (expected one of {', '.join(SECURITY_PROTOCOLS)})")
    tls = server_context(TlsSettings.for_listener(config, name)) if protocol in ("SSL", "SASL_SSL") else None
    mapper = None
    if protocol == "SSL":
        rules = str(config.get_for_listener(name, "ssl.principal.mapping.rules") or "DEFAULT")
        try:
            mapper = SslPrincipalMapper(rules)
        except ValueError as exc:
            raise ConfigError(f"listener {name}: ssl.principal.mapping.rules: {exc}") from None
    sasl = None
    if protocol.startswith("SASL_"):
        mechanisms = config.get_for_listener(name, "sasl.enabled.mechanisms")
        assert isinstance(mechanisms, list)
        if not mechanisms:
            raise ConfigError(f"listener {name}: sasl.enabled.mechanisms is empty")
        users = None
        if PLAIN in mechanisms:
            path = config.get_for_listener(name, "sasl.plain.users.file")
            if not path:
                raise ConfigError(f"listener {name}: PLAIN is enabled but sasl.plain.users.file is not set")
            users = PlainUsers(str(path))
        sasl = SaslSettings(tuple(mechanisms), scram_lookup, users, throttle=throttle)
    return ListenerSecurity(name, protocol, tls, sasl, mapper)
