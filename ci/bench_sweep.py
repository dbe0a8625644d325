"""Benchmark `verify sweep --model kimi-k3` over the families of docs/benchmarks.md: median wall and CPU
seconds of fresh processes (imports included), with the load average, since the machine may be
shared and the wall time then says more about the neighbours than about the sweep.

Usage: python -m kvproof.ci.bench_sweep [--runs 3] [--family k3 search double] [--policy search ceil pinned12]
                                        [--limit 60] [--base DIR] [--budget 600]
Exit 1 when a median wall time here exceeds --limit seconds (each family's own limit when not given).

With --base, each run here is paired with one started in DIR (a worktree of the code to compare
with, whose kvproof `python -m` imports from there), so both see the same load; the line then
gives DIR's median and the ratio. A sweep that exits 2 (undecided within --budget) counts as
--budget seconds, and the line says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Bench:
    vary: tuple[str, ...]
    policies: tuple[str, ...]
    limit: float  # seconds a median wall may take


FAMILIES = {
    # the broad K3 family of docs/commands/sweep.md, refuted under every policy
    "k3": Bench(("num_layers=24..128", "mla_every=2..8", "kda_heads=16..128", "head_dim=64,128,256",
                 "kv_lora_rank=256..1024"), ("search", "ceil", "pinned12"), 60.0),
    # `search` over every tp and dtype at two head dims, decided within 120 s on 2 cores
    "search": Bench(("num_layers=24..128", "mla_every=2..4", "kda_heads=16..128", "head_dim=64,128",
                     "kv_lora_rank=256..1024"), ("search",), 120.0),
    # the same family twice as wide in each range, decided within 10 minutes
    "double": Bench(("num_layers=24..232", "mla_every=2..6", "kda_heads=16..240", "head_dim=64,128,192,256",
                     "kv_lora_rank=256..1792"), ("search",), 600.0),
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], cwd: str | None, budget: float) -> tuple[float, float, int]:
    start, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1, 2):
        print(done.stdout + done.stderr, file=sys.stderr)
        raise SystemExit(done.returncode)
    return (budget if done.returncode == 2 else wall), _cpu() - cpu, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--family", nargs="+", choices=list(FAMILIES), default=["k3"])
    parser.add_argument("--policy", nargs="+", help="only these of each family's policies")
    parser.add_argument("--limit", type=float, help="seconds allowed per sweep (median wall)")
    parser.add_argument("--base", metavar="DIR", help="also time the sweep in DIR, each run paired with one here")
    parser.add_argument("--budget", type=float, default=600.0, help="each sweep's --budget")
    args = parser.parse_args()
    over = False
    for name in args.family:
        bench = FAMILIES[name]
        for policy in (p for p in bench.policies if not args.policy or p in args.policy):
            command = [sys.executable, "-m", "kvproof.cli.main", "sweep", "--model", "kimi-k3", "--vary",
                       *bench.vary, "--policy", policy, "--budget", str(args.budget), "--json"]
            trees = [None, *([args.base] if args.base else [])]
            walls: dict[str | None, list[float]] = {t: [] for t in trees}
            cpus: dict[str | None, list[float]] = {t: [] for t in trees}
            undecided: dict[str | None, int] = dict.fromkeys(trees, 0)
            for _ in range(args.runs):
                for tree in trees:
                    wall, cpu, code = _run(command, tree, args.budget)
                    walls[tree].append(wall)
                    cpus[tree].append(cpu)
                    undecided[tree] += code == 2
            here = statistics.median(walls[None])
            over |= here > (args.limit or bench.limit) or undecided[None] > 0
            print(f"verify sweep --vary {' '.join(bench.vary)} --policy {policy}: median {here:.2f} s wall, "
                  f"{statistics.median(cpus[None]):.2f} s CPU over {args.runs} runs"
                  f"{f', {undecided[None]} undecided' if undecided[None] else ''}; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            if args.base:
                base = statistics.median(walls[args.base])
                late = f", {undecided[args.base]} of {args.runs} undecided within {args.budget:.0f} s" \
                    if undecided[args.base] else ""
                print(f"  in {args.base}: median {base:.2f} s wall{late}; ratio {here / base:.4f}"
                      f"{' or less' if undecided[args.base] else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
