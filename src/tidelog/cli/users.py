"""``tidelog users add|list|delete``: SCRAM credentials, the way ``kafka-configs.sh --entity-type users
--alter --add-config 'SCRAM-SHA-512=[password=...]'`` manages them, over the Kafka protocol.

AlterUserScramCredentials and DescribeUserScramCredentials (confluent-kafka's AdminClient). The client
salts and hashes the password; only the salted credential reaches the broker. PLAIN users live in the
broker's ``sasl.plain.users.file`` instead (docs/security.md).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    admin_client,
    command_adder,
    error_code_name,
    result,
)
from tidelog.security.credentials import hash_plain_password

EXAMPLES = """\
examples:
  tidelog users add alice                               # asks for the password (SCRAM-SHA-512)
  tidelog users add alice --mechanism SCRAM-SHA-256 --iterations 8192 --password-file alice.pw
  printf '%s' "$PASSWORD" | tidelog users add billing   # password from stdin when it is not a terminal
  tidelog users list
  tidelog users list alice --json
  tidelog users delete alice                            # every mechanism alice has
  tidelog users delete alice --mechanism SCRAM-SHA-256
  tidelog users hash-password carol >> /etc/tidelog/plain-users   # a PLAIN user (no cluster call)

Adding an existing user replaces that mechanism's credential. Iterations must be 4096-16384.
With ACLs enforced, add/delete need ALTER and list needs DESCRIBE on the cluster.
"""

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def add_parser(sub: Any) -> None:
    users = sub.add_parser(
        "users", help="add, list and delete SCRAM users",
        description="Manage SASL/SCRAM credentials over the Kafka protocol (works against Apache Kafka too).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")

    command = command_adder(commands, EXAMPLES)

    add = command("add", "create a user or replace its password", _add,
                  "Store a SCRAM credential for a user. The password comes from --password, --password-file, "
                  "stdin when it is not a terminal, or a prompt.")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--mechanism", type=str.upper, choices=sorted(MECHANISMS), default="SCRAM-SHA-512", help="(default SCRAM-SHA-512)")
    add.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations, 4096-16384 (default 8192)")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--password", help="the password (visible to other local users in the process list: prefer a file or the prompt)")
    secret.add_argument("--password-file", metavar="FILE", help="read the password from this file (first line)")
    add_json_option(add, "the outcome")

    listing = command("list", "show users and their mechanisms", _list, "Show SCRAM users with their mechanisms and iterations.")
    listing.add_argument("names", nargs="*", metavar="NAME", help="only these users (default: all)")
    add_json_option(listing, "the users")

    delete = command("delete", "delete a user's credentials", _delete,
                     "Delete a user's SCRAM credentials: every mechanism it has, or only --mechanism.")
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--mechanism", type=str.upper, choices=sorted(MECHANISMS), help="only this mechanism")
    add_json_option(delete, "the outcome")

    hashed = commands.add_parser(
        "hash-password", help="a line for the broker's PLAIN users file", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print NAME = <PBKDF2 hash of the password>, a line for the file sasl.plain.users.file names "
                    "(the broker reads it again when it changes). Works offline: nothing is sent anywhere.")
    hashed.add_argument("name", metavar="NAME")
    secret = hashed.add_mutually_exclusive_group()
    secret.add_argument("--password", help="the password (prefer a file or the prompt)")
    secret.add_argument("--password-file", metavar="FILE", help="read the password from this file (first line)")
    hashed.set_defaults(func=_hash_password)


def _mechanism_name(mechanism: Any) -> str:
    return str(getattr(mechanism, "name", mechanism)).replace("_", "-")


def read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password: str = args.password
    elif args.password_file:
        path = Path(args.password_file)
        if not path.is_file():
            raise CliError(f"password file {path} does not exist", 2)
        lines = path.read_text().splitlines()
        password = lines[0] if lines else ""
    elif not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {args.name}: ")
        if getpass.getpass("Again: ") != password:
            raise CliError("the passwords differ", 2)
    if not password:
        raise CliError("empty password", 2)
    return password


def _alter(args: argparse.Namespace, alterations: list[UserScramCredentialAlteration]) -> str | None:
    admin = admin_client(args)  # must outlive its futures
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=args.timeout)
    try:
        result(futures[args.name], args)
    except CliError as exc:
        return str(exc)
    return None


def _add(args: argparse.Namespace) -> int:
    if not 4096 <= args.iterations <= 16384:
        raise CliError("--iterations must be between 4096 and 16384", 2)
    password = read_password(args)
    info = ScramCredentialInfo(MECHANISMS[args.mechanism], args.iterations)
    error = _alter(args, [UserScramCredentialUpsertion(args.name, info, password.encode())])
    return _report(args, "added", error, [args.mechanism],
                   f"Stored the {args.mechanism} credential of {args.name} ({args.iterations} iterations).")


def _report(args: argparse.Namespace, status: str, error: str | None, mechanisms: list[str], text: str) -> int:
    out = Output(args.json)
    if args.json:
        out.json({"user": args.name, "status": "error" if error else status, "mechanisms": mechanisms, "error": error})
    if error:
        out.note(f"Error on user {args.name}: {error}")
        return 1
    if not args.json:
        out.line(text)
    return 0


def describe(args: argparse.Namespace, names: list[str]) -> tuple[dict[str, list[tuple[str, int]]], dict[str, str]]:
    """Users → [(mechanism, iterations)], and the names that failed with their errors."""
    admin = admin_client(args)  # must outlive its futures
    found: dict[str, list[tuple[str, int]]] = {}
    errors: dict[str, str] = {}
    described: dict[str, Any] = {}
    if not names:
        everyone = admin.describe_user_scram_credentials(request_timeout=args.timeout)
        assert not isinstance(everyone, dict)  # one future without names
        described = result(everyone, args)
    else:
        futures = admin.describe_user_scram_credentials(names, request_timeout=args.timeout)
        assert isinstance(futures, dict)  # a future per name
        for name, future in futures.items():
            try:
                described[name] = future.result(timeout=args.timeout)
            except Exception as exc:  # KafkaException or a timeout: reported per user
                code = error_code_name(exc)
                errors[name] = "RESOURCE_NOT_FOUND: no such SCRAM user" if code == "RESOURCE_NOT_FOUND" else (code or str(exc))
    for name, description in described.items():
        found[name] = sorted((_mechanism_name(i.mechanism), int(i.iterations)) for i in description.scram_credential_infos)
    return dict(sorted(found.items())), errors


def _list(args: argparse.Namespace) -> int:
    names = list(dict.fromkeys(args.names))
    found, errors = describe(args, names)
    out = Output(args.json)
    if args.json:
        docs: list[dict[str, Any]] = [{"user": name, "credentials": [{"mechanism": m, "iterations": i} for m, i in infos]}
                                      for name, infos in found.items()]
        docs += [{"user": name, "error": error} for name, error in errors.items()]
        out.json(docs)
    elif found:
        out.table(["USER", "MECHANISM", "ITERATIONS"], [(name, m, i) for name, infos in found.items() for m, i in infos])
    elif not errors:
        out.note("No SCRAM users.")
    if not args.json:
        for name, error in errors.items():
            out.note(f"Error on user {name}: {error}")
    return 1 if errors else 0


def _delete(args: argparse.Namespace) -> int:
    if args.mechanism:
        mechanisms = [args.mechanism]
    else:
        found, errors = describe(args, [args.name])
        if errors:
            return _report(args, "deleted", errors[args.name], [], "")
        mechanisms = [m for m, _i in found.get(args.name, [])]
    deletions: list[UserScramCredentialAlteration] = [UserScramCredentialDeletion(args.name, MECHANISMS[m]) for m in mechanisms]
    error = _alter(args, deletions)
    return _report(args, "deleted", error, mechanisms, f"Deleted the {', '.join(mechanisms)} credential(s) of {args.name}.")


def _hash_password(args: argparse.Namespace) -> int:
    if any(c.isspace() or c in "=#" for c in args.name):
        raise CliError(f"a PLAIN user name cannot hold spaces, '=' or '#': {args.name!r}", 2)
    Output().line(f"{args.name} = {hash_plain_password(read_password(args))}")
    return 0
