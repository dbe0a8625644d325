"""Benchmark `verify prove --model kimi-k3` (all properties, all points), or any other verify
command: median wall seconds of several fresh processes, imports included, as a maintainer would
see it, and the median CPU seconds (user, the process and the workers it waited for) beside them,
since a shared machine's load shows in the wall time.

Usage: python -m kvproof.ci.bench_prove [--runs 7] [--model kimi-k3]
       python -m kvproof.ci.bench_prove --verify "engine tokenspeed --baseline engines/tokenspeed/baseline.json"
       python -m kvproof.ci.bench_prove --base /tmp/before ...  # also time DIR's code, run for run, and the ratio
       python -m kvproof.ci.bench_prove --exit 1 --verify "config --model kimi-k3 -- --tp 1 --data-parallel-size 8"

With --base, each run here is paired with one started in DIR (a worktree of the code to compare with,
whose kvproof `python -m` imports from there), so both see the same load.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import statistics
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--model", default="kimi-k3")
    parser.add_argument("--verify", metavar="ARGS", help="time `verify ARGS` instead (it must exit with --exit)")
    parser.add_argument("--exit", type=int, default=0, metavar="CODE",
                        help="the exit code every run must give (1: `verify config` on a launch it rejects)")
    parser.add_argument("--base", metavar="DIR", help="also time the command in DIR, each run paired with one here")
    args = parser.parse_args()
    argv = shlex.split(args.verify) if args.verify else ["prove", "--model", args.model]
    command = [sys.executable, "-m", "kvproof.cli.main", *argv]
    walls: dict[str | None, list[float]] = {None: [], **({args.base: []} if args.base else {})}
    users: dict[str | None, list[float]] = {tree: [] for tree in walls}
    for _ in range(args.runs):
        for tree, times in walls.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            start = time.perf_counter()
            done = subprocess.run(command, cwd=tree, capture_output=True, text=True, check=False)
            times.append(time.perf_counter() - start)
            users[tree].append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before)
            if done.returncode != args.exit:
                print(done.stdout + done.stderr, file=sys.stderr)
                return done.returncode or 1
    here = walls[None]
    print(f"verify {' '.join(argv)}: median {statistics.median(here):.2f} s wall over {args.runs} runs "
          f"(min {min(here):.2f}, max {max(here):.2f}); median {statistics.median(users[None]):.2f} s user")
    if args.base:
        base = walls[args.base]
        print(f"  in {args.base}: median {statistics.median(base):.2f} s (min {min(base):.2f}, max {max(base):.2f}); "
              f"median {statistics.median(users[args.base]):.2f} s user; "
              f"ratio {statistics.median(here) / statistics.median(base):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
