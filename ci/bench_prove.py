"""Benchmark `verify prove --model kimi-k3` (all properties, all points), or any other verify
command: median wall seconds of several fresh processes, imports included, as a maintainer would
see it.

Usage: python -m kvproof.ci.bench_prove [--runs 7] [--model kimi-k3]
       python -m kvproof.ci.bench_prove --verify "engine tokenspeed --baseline engines/tokenspeed/baseline.json"
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--model", default="kimi-k3")
    parser.add_argument("--verify", metavar="ARGS", help="time `verify ARGS` instead (it must exit 0)")
    args = parser.parse_args()
    argv = shlex.split(args.verify) if args.verify else ["prove", "--model", args.model]
    command = [sys.executable, "-m", "kvproof.cli.main", *argv]
    walls = []
    for _ in range(args.runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
    print(f"verify {' '.join(argv)}: median {statistics.median(walls):.2f} s wall over {args.runs} runs "
          f"(min {min(walls):.2f}, max {max(walls):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
