"""``tidelog cluster describe``: the cluster id, the controller, the brokers, topic and partition counts."""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException

from tidelog.cli.common import (
    CliError,
    Output,
    add_connection_options,
    add_json_option,
    admin_client,
    kafka_error_text,
    result,
)

EXAMPLES = """\
examples:
  tidelog cluster describe
  tidelog cluster describe --bootstrap-server kafka-1:9092 --json
"""


def add_parser(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster", help="describe the cluster",
        description="Facts about the cluster, through DescribeCluster and Metadata.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    describe = commands.add_parser(
        "describe", help="cluster id, controller, brokers, topic and partition counts",
        description="Show the cluster id, the controller, every broker (id, host, port, rack) and how many topics "
                    "and partitions there are, and how many partitions have no leader or fewer in-sync replicas than replicas.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(describe)
    add_json_option(describe, "the description")
    describe.set_defaults(func=_describe)


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    cluster = result(admin.describe_cluster(request_timeout=args.timeout), args)
    try:
        metadata = admin.list_topics(timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    partitions = [p for t in metadata.topics.values() for p in t.partitions.values()]
    controller = cluster.controller.id if cluster.controller is not None else None
    facts = {
        "cluster_id": cluster.cluster_id,
        "controller": controller,
        "brokers": [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in sorted(cluster.nodes, key=lambda n: n.id)],
        "topics": len(metadata.topics),
        "partitions": len(partitions),
        "offline_partitions": sum(1 for p in partitions if p.leader < 0),
        "under_replicated_partitions": sum(1 for p in partitions if len(p.isrs) < len(p.replicas)),
    }
    out = Output(args.json)
    if args.json:
        out.json(facts)
        return 0
    out.line(f"Cluster ID: {facts['cluster_id']}")
    out.line(f"Controller: {controller if controller is not None else 'none'}")
    out.line(f"Topics: {facts['topics']}  Partitions: {facts['partitions']}  "
             f"Offline: {facts['offline_partitions']}  Under-replicated: {facts['under_replicated_partitions']}")
    out.table(["BROKER", "HOST", "PORT", "RACK", "ROLE"],
              [(b["id"], b["host"], b["port"], b["rack"], "controller" if b["id"] == controller else "")
               for b in facts["brokers"]])
    return 0
