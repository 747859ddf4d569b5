"""SaslHandshake, SaslAuthenticate, Create/Describe/DeleteAcls and Describe/AlterUserScramCredentials.

Authentication: the connection's ``SaslAuthenticator`` (security/authenticator.py) sequences the
exchange; these handlers translate it to responses. A failed attempt (unknown mechanism, bad token,
wrong credentials) is answered after ``connection.failed.authentication.delay.ms`` and the connection
is then closed: one connection, one attempt, as in Kafka. On success the connection takes the
principal ``User:<name>`` and may send any request.

Before the token that decides an exchange is checked, the broker-wide failed-authentication throttle
(``security/auth_throttle.py``) may make it wait, or refuse it unchecked; failures are logged at WARN
once a minute per user name (with how many were held back), and counted per listener and mechanism.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0 the session lasts that long
(told in SaslAuthenticate v1+). An authenticated connection may then send SaslHandshake v1 and
SaslAuthenticate again; the new authentication must name the same principal and mechanism. Once the
session has ended, any other request closes the connection (``session_expired``, checked by the
server before dispatch).

ACLs and SCRAM credentials are part of the cluster metadata: each request validates every item,
commits one new image with the accepted changes, and answers per item with Kafka's error codes.
With no authorizer configured the ACL requests answer SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import defaultdict
from typing import Any

from tidelog.broker.authz import Op, acl_entry, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_problem,
)
from tidelog.common.errors import ErrorCode
from tidelog.metadata.errors import MetadataStoreUnavailable, StaleMetadataError
from tidelog.metadata.image import ClusterImage
from tidelog.observability.logs import OncePerInterval
from tidelog.protocol.headers import RequestHeader
from tidelog.protocol.sasl import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationFailed,
    SaslError,
    Step,
    credential_from_salted_password,
)
from tidelog.security.authenticator import AuthState, SaslAuthenticator

log = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
NO_AUTHORIZER = "No Authorizer is configured."
# Kafka answers its authorization errors with their message, not a null one.
NOT_AUTHORIZED = "Cluster authorization failed."
# Kafka's ScramMechanism codes on the wire.
SCRAM_CODES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
SCRAM_NUMBERS = {name: code for code, name in SCRAM_CODES.items()}


# -- authentication --------------------------------------------------------------------------------


_failure_log = OncePerInterval(60.0)


def _printable(user: str | None) -> str:
    """A client-chosen user name, safe for a log line."""
    return "(none)" if user is None else repr(user[:64])


async def _fail_slowly(ctx: BrokerContext, conn: ConnectionInfo, why: str, user: str | None = None) -> None:
    """Delay the answer to a failed authentication, then have the server close the connection."""
    conn.close_after_response = True
    auth = conn.auth
    mechanism = (auth.mechanism if auth is not None else None) or "none"
    ctx.metrics.authentication_failed(conn.listener.name, mechanism)
    throttle = conn.sasl.throttle if conn.sasl is not None else None
    if throttle is not None:
        throttle.failed(user, conn.host, time.monotonic())
    logged, held = _failure_log.should_log(f"user {user}")
    if logged:
        log.warning("authentication failed for user %s from %s (client %s) on %s with %s: %s%s", _printable(user),
                    conn.peer, conn.client_id, conn.listener.name, mechanism, why,
                    f"; {held} more failures for this user name since the last message" if held else "")
    else:
        log.debug("authentication failed for user %s from %s: %s", _printable(user), conn.peer, why)
    delay_ms = ctx.config.get_int("connection.failed.authentication.delay.ms")
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def session_expired(conn: ConnectionInfo, api_key: int) -> bool:
    """The connection's SASL session is over and this request is not a re-authentication."""
    return _monotonic_ms() >= conn.session_expires_ms and api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE)


def _authenticated(ctx: BrokerContext, conn: ConnectionInfo, auth: SaslAuthenticator) -> int:
    """Complete an authentication; the session's lifetime in ms to tell the client (0: no limit).

    Raises SaslAuthenticationFailed when a re-authentication names another principal or mechanism
    (Kafka refuses those: a connection keeps its identity)."""
    assert auth.principal is not None and auth.mechanism is not None
    reauthenticating = conn.sasl_mechanism is not None
    if reauthenticating and (auth.principal, auth.mechanism) != (conn.principal, conn.sasl_mechanism):
        raise SaslAuthenticationFailed(
            f"re-authentication as {auth.principal} with {auth.mechanism} on a connection authenticated as "
            f"{conn.principal} with {conn.sasl_mechanism}: both must stay the same")
    conn.principal, conn.sasl_mechanism = auth.principal, auth.mechanism
    conn.auth = None
    lifetime = ctx.config.get_int("connections.max.reauth.ms")
    conn.session_expires_ms = _monotonic_ms() + lifetime if lifetime > 0 else 0
    if reauthenticating:
        ctx.metrics.reauthenticated(conn.listener.name, auth.mechanism)
    else:
        ctx.metrics.authentication_succeeded(conn.listener.name, auth.mechanism)
    log.debug("%s %s as %s with %s on %s", conn.peer, "re-authenticated" if reauthenticating else "authenticated",
              auth.principal, auth.mechanism, conn.listener.name)
    return lifetime


async def _step(ctx: BrokerContext, conn: ConnectionInfo, auth: SaslAuthenticator, token: bytes) -> Step:
    """Check one token, after the wait the throttle asks for; raises SaslError."""
    throttle = auth.settings.throttle
    if throttle is not None and auth.decides_next:
        wait = throttle.before_attempt(auth.claimed_user(token), conn.host, time.monotonic())
        if wait is None:
            ctx.metrics.authentication_throttled(conn.listener.name, "refused")
            raise SaslAuthenticationFailed(
                "Authentication failed: too many failed authentications from this address, try again later")
        if wait > 0:
            ctx.metrics.authentication_throttled(conn.listener.name, "delayed")
            await asyncio.sleep(wait)
    # PLAIN may check a PBKDF2 hash from the users file: keep that off the event loop.
    step = await asyncio.get_running_loop().run_in_executor(None, auth.authenticate, token)
    if step.complete and throttle is not None and auth.principal is not None:
        throttle.succeeded(auth.claimed_user(token) or "", conn.host)
    return step


async def sasl_handshake(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(SASL_HANDSHAKE, header.api_version)
    auth = conn.auth
    if auth is None:
        if conn.sasl is None or not conn.session_expires_ms or header.api_version < 1:
            # Not a SASL listener, or authenticated for good (connections.max.reauth.ms is 0): Kafka's answer.
            return b.make("SaslHandshakeResponse", error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=())
        auth = conn.auth = SaslAuthenticator(conn.sasl)  # KIP-368: a re-authentication starts
    error = auth.handshake(request.mechanism, header.api_version)
    if error is not ErrorCode.NONE:
        await _fail_slowly(ctx, conn, f"SaslHandshake for {request.mechanism!r}: {error.name}")
    return b.make("SaslHandshakeResponse", error_code=error, mechanisms=auth.settings.mechanisms)


async def sasl_authenticate(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(SASL_AUTHENTICATE, header.api_version)

    def answer(error: ErrorCode, message: str | None, challenge: bytes = b"", lifetime_ms: int = 0) -> Any:
        return b.make(
            "SaslAuthenticateResponse", error_code=error, error_message=message, auth_bytes=challenge,
            session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
        )

    auth = conn.auth
    if auth is None:
        return answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication")
    if auth.state is not AuthState.AUTHENTICATE:
        await _fail_slowly(ctx, conn, "SaslAuthenticate before SaslHandshake v1")
        return answer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request: send SaslHandshake first")
    try:
        token = bytes(request.auth_bytes)
        step = await _step(ctx, conn, auth, token)
        lifetime = _authenticated(ctx, conn, auth) if step.complete else 0
    except SaslError as exc:
        await _fail_slowly(ctx, conn, str(exc), auth.claimed_user(token))
        return answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    return answer(ErrorCode.NONE, None, step.challenge, lifetime)


async def sasl_raw_token(ctx: BrokerContext, conn: ConnectionInfo, token: bytes) -> bytes | None:
    """A bare SASL token after SaslHandshake v0; the challenge to send back, or None to close."""
    auth = conn.auth
    assert auth is not None
    try:
        step = await _step(ctx, conn, auth, token)
    except SaslError as exc:
        await _fail_slowly(ctx, conn, str(exc), auth.claimed_user(token))
        return None
    if step.complete:
        try:
            _authenticated(ctx, conn, auth)  # no lifetime to tell: a v0 client cannot re-authenticate
        except SaslError as exc:
            await _fail_slowly(ctx, conn, str(exc), auth.claimed_user(token))
            return None
    return step.challenge


# -- ACLs ------------------------------------------------------------------------------------------


def _binding(creation: Any) -> AclBinding | str:
    try:
        return AclBinding(
            ResourceType(creation.resource_type), creation.resource_name, PatternType(creation.resource_pattern_type),
            creation.principal, creation.host, AclOperation(creation.operation), AclPermissionType(creation.permission_type),
        )
    except ValueError:
        return "Unknown resource type, pattern type, operation or permission type code"


def _filter(raw: Any) -> AclBindingFilter | str:
    try:
        return AclBindingFilter(
            ResourceType(raw.resource_type_filter), raw.resource_name_filter, PatternType(raw.pattern_type_filter),
            raw.principal_filter, raw.host_filter, AclOperation(raw.operation), AclPermissionType(raw.permission_type),
        )
    except ValueError:
        return "Unknown resource type, pattern type, operation or permission type code"


async def create_acls(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(CREATE_ACLS, header.api_version)

    def result(error: ErrorCode, message: str | None = None) -> Any:
        return b.make("AclCreationResult", error_code=error, error_message=message)

    def every(error: ErrorCode, message: str | None) -> Any:
        return b.make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=tuple(result(error, message) for _ in request.creations))

    if ctx.authorizer is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, conn, Op.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED)
    outcomes: list[tuple[ErrorCode, str | None]] = []
    added = []
    for creation in request.creations:
        binding = _binding(creation)
        problem = binding if isinstance(binding, str) else binding_problem(binding)
        if problem is not None:
            outcomes.append((ErrorCode.INVALID_REQUEST, problem))
            continue
        assert isinstance(binding, AclBinding)
        added.append(acl_entry(binding))
        outcomes.append((ErrorCode.NONE, None))
    if added:
        failed = await _committed(ctx, ctx.image.with_acls(ctx.image.acls + tuple(added)))
        if failed[0] is ErrorCode.NONE:
            log.info("%s added %d ACL(s)", conn.principal, len(added))
        else:
            outcomes = [failed if error is ErrorCode.NONE else (error, message) for error, message in outcomes]
    return b.make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=tuple(result(*o) for o in outcomes))


async def describe_acls(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_ACLS, header.api_version)

    def answer(error: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return b.make("DescribeAclsResponse", throttle_time=NO_THROTTLE, error_code=error, error_message=message, resources=resources)

    gate = ctx.authorizer
    if gate is None:
        return answer(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, conn, Op.DESCRIBE):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED)
    flt = _filter(request)
    problem = flt if isinstance(flt, str) else flt.problem()
    if problem is not None:
        return answer(ErrorCode.INVALID_REQUEST, problem)
    assert isinstance(flt, AclBindingFilter)
    grouped: dict[tuple[int, str, int], list[Any]] = defaultdict(list)
    for binding in gate.current().acls(flt):
        key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
        grouped[key].append(
            b.make("AclDescription", principal=binding.principal, host=binding.host,
                   operation=int(binding.operation), permission_type=int(binding.permission_type))
        )
    resources = tuple(
        b.make("DescribeAclsResource", resource_type=rt, resource_name=name, pattern_type=pt, acls=tuple(acls))
        for (rt, name, pt), acls in grouped.items()
    )
    return answer(ErrorCode.NONE, None, resources)


async def delete_acls(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DELETE_ACLS, header.api_version)

    def filter_result(error: ErrorCode, message: str | None, matching: tuple[Any, ...] = ()) -> Any:
        return b.make("DeleteAclsFilterResult", error_code=error, error_message=message, matching_acls=matching)

    def every(error: ErrorCode, message: str | None) -> Any:
        return b.make("DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=tuple(filter_result(error, message) for _ in request.filters))

    gate = ctx.authorizer
    if gate is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not authorize_cluster(ctx, conn, Op.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED)
    remaining = list(gate.current().bindings)
    results = []
    for raw in request.filters:
        flt = _filter(raw)
        problem = flt if isinstance(flt, str) else flt.problem()
        if problem is not None:
            results.append(filter_result(ErrorCode.INVALID_REQUEST, problem))
            continue
        assert isinstance(flt, AclBindingFilter)
        deleted = [binding for binding in remaining if flt.matches(binding)]
        remaining = [binding for binding in remaining if not flt.matches(binding)]
        results.append(filter_result(ErrorCode.NONE, None, tuple(_matching(b, d) for d in deleted)))
    if len(remaining) != len(gate.current().bindings):
        failed = await _committed(ctx, ctx.image.with_acls(tuple(acl_entry(binding) for binding in remaining)))
        if failed[0] is not ErrorCode.NONE:
            return every(*failed)
        log.info("%s deleted %d ACL(s)", conn.principal, len(gate.current().bindings) - len(remaining))
    return b.make("DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=tuple(results))


async def _committed(ctx: BrokerContext, image: ClusterImage) -> tuple[ErrorCode, str | None]:
    """Write ``image``; the error to answer when it could not be (nothing was changed then)."""
    try:
        await ctx.store.commit(image)
    except OSError as exc:  # the local metadata file could not be written (a full disk)
        log.error("the cluster metadata could not be written: %s", exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, f"The cluster metadata could not be written: {exc.strerror or exc}"
    except StaleMetadataError as exc:
        return ErrorCode.NOT_CONTROLLER, f"The metadata changed concurrently; retry ({exc})"
    except MetadataStoreUnavailable as exc:
        return ErrorCode.REQUEST_TIMED_OUT, f"The cluster metadata could not be written: {exc}"
    return ErrorCode.NONE, None


def _matching(b: Any, binding: AclBinding) -> Any:
    return b.make(
        "DeleteAclsMatchingAcl", error_code=ErrorCode.NONE, error_message=None,
        resource_type=int(binding.resource_type), resource_name=binding.resource_name, pattern_type=int(binding.pattern_type),
        principal=binding.principal, host=binding.host, operation=int(binding.operation),
        permission_type=int(binding.permission_type),
    )


# -- SCRAM credentials -----------------------------------------------------------------------------


async def describe_user_scram_credentials(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_USER_SCRAM_CREDENTIALS, header.api_version)

    def answer(error: ErrorCode, results: tuple[Any, ...] = (), message: str | None = None) -> Any:
        return b.make("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE, error_code=error, error_message=message, results=results)

    if not authorize_cluster(ctx, conn, Op.DESCRIBE):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message=NOT_AUTHORIZED)
    by_user: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (user, mechanism), credential in sorted(ctx.image.scram_credentials.items()):
        by_user[user].append((mechanism, credential.iterations))
    wanted = [u.name for u in request.users] if request.users else sorted(by_user)

    def one(user: str) -> Any:
        def result(error: ErrorCode, message: str | None, infos: tuple[Any, ...] = ()) -> Any:
            return b.make("DescribeUserScramCredentialsResult", user=user, error_code=error, error_message=message, credential_infos=infos)

        if wanted.count(user) > 1:
            return result(ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same user twice in a single request")
        if user not in by_user:
            return result(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist")
        infos = tuple(b.make("CredentialInfo", mechanism=SCRAM_NUMBERS[m], iterations=i) for m, i in by_user[user])
        return result(ErrorCode.NONE, None, infos)

    return answer(ErrorCode.NONE, tuple(one(user) for user in dict.fromkeys(wanted)))


def _alteration_problem(kind: str, item: Any, current: dict[tuple[str, str], Any]) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of one deletion or upsertion (after duplicates), or None."""
    if not item.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = SCRAM_CODES.get(item.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if kind == "delete":
        if (item.name, mechanism) not in current:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None
    return _upsertion_problem(item)


def _upsertion_problem(upsertion: Any) -> tuple[ErrorCode, str] | None:
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: at least {MIN_ITERATIONS}"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: at most {MAX_ITERATIONS}"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def alter_user_scram_credentials(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ALTER_USER_SCRAM_CREDENTIALS, header.api_version)
    users = list(dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions]))

    def answer(errors: dict[str, tuple[ErrorCode, str | None]]) -> Any:
        results = tuple(
            b.make("AlterUserScramCredentialsResult", user=user, error_code=errors[user][0], error_message=errors[user][1])
            for user in users
        )
        return b.make("AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=results)

    if not authorize_cluster(ctx, conn, Op.ALTER):
        return answer({user: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED) for user in users})
    current = dict(ctx.image.scram_credentials)
    items = [("delete", d) for d in request.deletions] + [("upsert", u) for u in request.upsertions]
    pairs = [(item.name, item.mechanism) for _, item in items]
    errors: dict[str, tuple[ErrorCode, str | None]] = {
        user: (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for user, mechanism in pairs if pairs.count((user, mechanism)) > 1
    }
    changes: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for kind, item in items:
        if item.name in errors:
            continue
        problem = _alteration_problem(kind, item, current)
        if problem is not None:
            errors[item.name] = problem
        else:
            changes[item.name].append((kind, item))
    for user in users:
        if user in errors:
            continue
        errors[user] = (ErrorCode.NONE, None)
        for kind, item in changes[user]:
            mechanism = SCRAM_CODES[item.mechanism]
            if kind == "delete":
                current.pop((user, mechanism), None)
            else:
                current[(user, mechanism)] = credential_from_salted_password(
                    mechanism, bytes(item.salted_password), bytes(item.salt), item.iterations
                )
    if any(error is ErrorCode.NONE for error, _ in errors.values()):
        failed = await _committed(ctx, ctx.image.with_scram_credentials(current))
        if failed[0] is not ErrorCode.NONE:
            return answer({user: failed if error is ErrorCode.NONE else (error, message)
                           for user, (error, message) in errors.items()})
        log.info("%s altered SCRAM credentials of %s", conn.principal, sorted(u for u, (e, _) in errors.items() if e is ErrorCode.NONE))
    return answer(errors)

