"""TLS for listeners: an ``ssl.SSLContext`` built from Kafka's PEM settings.

Kafka's keys, PEM only (``ssl.keystore.type=PEM``, ``ssl.truststore.type=PEM``)::

    ssl.keystore.location     PEM file with the broker's certificate (chain) and private key
    ssl.key.password          password of that private key, if it is encrypted
    ssl.truststore.location   PEM bundle of the CAs that sign client certificates
    ssl.truststore.certificates  the same bundle inline (PEM text), instead of a file
    ssl.client.auth           none | requested | required
    ssl.enabled.protocols     TLSv1.2, TLSv1.3 (older versions are refused)

Each key may be set for one listener only as ``listener.name.<listener>.<key>`` (listener name in
lower case), which wins over the plain key. ``requested`` asks for a client certificate and accepts
a client without one (its principal is ANONYMOUS); a certificate that is sent must verify.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ConfigError

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    keystore_location: str | None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    listener: str = ""

    @classmethod
    def for_listener(cls, config: BrokerConfig, listener: str) -> TlsSettings:
        def get(key: str) -> str | None:
            value = config.get_for_listener(listener, key)
            return None if value is None or value == "" else str(value)

        for kind in ("ssl.keystore.type", "ssl.truststore.type"):
            if (get(kind) or "PEM").upper() != "PEM":
                raise ConfigError(f"listener {listener}: {kind}={get(kind)} is not supported; tidelog reads PEM files only")
        protocols = config.get_for_listener(listener, "ssl.enabled.protocols")
        return cls(
            keystore_location=get("ssl.keystore.location"),
            key_password=get("ssl.key.password"),
            truststore_location=get("ssl.truststore.location"),
            truststore_certificates=get("ssl.truststore.certificates"),
            client_auth=(get("ssl.client.auth") or "none").lower(),
            enabled_protocols=tuple(protocols) if isinstance(protocols, list) else ("TLSv1.2", "TLSv1.3"),
            listener=listener,
        )


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server-side context for one listener; ConfigError says which setting is wrong."""
    where = f"listener {settings.listener}: " if settings.listener else ""
    if settings.client_auth not in CLIENT_AUTH:
        raise ConfigError(f"{where}ssl.client.auth must be none, requested or required, not {settings.client_auth!r}")
    unknown = [p for p in settings.enabled_protocols if p not in PROTOCOLS]
    if unknown or not settings.enabled_protocols:
        raise ConfigError(f"{where}ssl.enabled.protocols may list only TLSv1.2 and TLSv1.3, not {unknown or 'nothing'}")
    if not settings.keystore_location:
        raise ConfigError(f"{where}TLS needs ssl.keystore.location (a PEM file with the certificate and private key)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(PROTOCOLS[p] for p in settings.enabled_protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    context.options |= ssl.OP_NO_RENEGOTIATION
    try:
        context.load_cert_chain(settings.keystore_location, password=settings.key_password)
    except FileNotFoundError:
        raise ConfigError(f"{where}ssl.keystore.location {settings.keystore_location} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{where}cannot load the certificate and key from {settings.keystore_location} "
            f"(wrong ssl.key.password, or not a PEM file with both?): {exc}"
        ) from None
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    if settings.client_auth != "none":
        _load_trust(context, settings, where)
    return context


def _load_trust(context: ssl.SSLContext, settings: TlsSettings, where: str) -> None:
    if not (settings.truststore_location or settings.truststore_certificates):
        raise ConfigError(
            f"{where}ssl.client.auth={settings.client_auth} needs ssl.truststore.location (the CAs of client certificates)"
        )
    try:
        if settings.truststore_location:
            context.load_verify_locations(cafile=settings.truststore_location)
        if settings.truststore_certificates:
            context.load_verify_locations(cadata=settings.truststore_certificates)
    except FileNotFoundError:
        raise ConfigError(f"{where}ssl.truststore.location {settings.truststore_location} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{where}cannot load the trusted certificates: {exc}") from None
