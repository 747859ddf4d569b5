"""Governor planner at scale: 100 brokers in 10 racks, 100,000 partitions (RF 3), skewed so that ten
brokers carry three times their share and five brokers were just added empty.

Prints the model's memory (tracemalloc: every allocation made while building it), the working
state's memory, the plan time and the goals before and after. Target: a plan in under 30 s.

    python bench/governor_bench.py [--brokers 100] [--partitions 100000]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from tidelog.governor.goals import default_goals
from tidelog.governor.planner import execute_in_simulation, plan
from tidelog.governor.state import State
from tidelog.governor.synthetic import synthetic_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--racks", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=1_000)
    args = parser.parse_args()

    gc.collect()
    tracemalloc.start()
    model = synthetic_cluster(brokers=args.brokers, racks=args.racks, topics=args.topics, partitions=args.partitions,
                              disk_capacity=40 * 2**40, mean_size=100 * 2**20, hot_brokers=args.brokers // 10,
                              skew=3.0, empty_brokers=args.brokers // 20)
    model_bytes = tracemalloc.get_traced_memory()[0]
    state = State(model)
    state_bytes = tracemalloc.get_traced_memory()[0] - model_bytes
    del state
    tracemalloc.stop()
    print(f"cluster: {args.brokers} brokers, {args.racks} racks, {args.partitions} partitions, RF 3")
    print(f"model memory: {model_bytes / 2**20:.1f} MiB ({model_bytes / args.partitions:.0f} B per partition)")
    print(f"planner working state: {state_bytes / 2**20:.1f} MiB")

    started = time.perf_counter()
    result = plan(model, default_goals())
    elapsed = time.perf_counter() - started
    print(f"plan: {elapsed:.1f} s, {len(result.moves)} partition moves ({result.replica_moves} replica, "
          f"{result.leader_moves} leader moves), {result.bytes_to_copy / 2**40:.2f} TiB to copy, "
          f"~{result.estimated_seconds(100 * 2**20) / 3600:.1f} h at 100 MiB/s per broker; hard goals ok: {result.ok}")
    print(f"{'goal':18} {'score before':>12} {'after':>8} {'violations before':>18} {'after':>6}")
    for g in result.goals:
        print(f"{g.name:18} {g.score_before:12.3f} {g.score_after:8.3f} {g.violations_before:18} {g.violations_after:6}")
    check = State(execute_in_simulation(model, result.moves))
    assert abs(sum(check.disk) - sum(State(model).disk)) < 1, "bytes appeared or vanished in simulation"


if __name__ == "__main__":
    main()
