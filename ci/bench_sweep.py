"""Benchmark `verify sweep` over the broad K3 family (docs/benchmarks.md) for each policy: median wall and CPU
seconds of fresh processes (imports included), with the load average, since the machine may be
shared and the wall time then says more about the neighbours than about the sweep.

Usage: python -m kvproof.ci.bench_sweep [--runs 3] [--policy search ceil pinned12] [--limit 60]
Exit 1 when a median wall time exceeds --limit seconds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

FAMILY = ("num_layers=24..128", "mla_every=2..8", "kda_heads=16..128", "head_dim=64,128,256",
          "kv_lora_rank=256..1024")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--policy", nargs="+", default=["search", "ceil", "pinned12"])
    parser.add_argument("--limit", type=float, default=60.0, help="seconds allowed per sweep (median wall)")
    args = parser.parse_args()
    over = False
    for policy in args.policy:
        command = [sys.executable, "-m", "kvproof.cli.main", "sweep", "--model", "kimi-k3", "--vary", *FAMILY,
                   "--policy", policy, "--json"]
        walls, cpus = [], []
        for _ in range(args.runs):
            start, cpu = time.perf_counter(), _cpu()
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - start)
            cpus.append(_cpu() - cpu)
            if done.returncode not in (0, 1):
                print(done.stdout + done.stderr, file=sys.stderr)
                return done.returncode
        wall = statistics.median(walls)
        over |= wall > args.limit
        print(f"verify sweep --policy {policy} (K3 family, 2,034,774,000 members): median {wall:.2f} s wall, "
              f"{statistics.median(cpus):.2f} s CPU over {args.runs} runs; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
