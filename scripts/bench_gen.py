#!/usr/bin/env python3
"""Median wall time of `slurmtrain gen` against `python -c "import click, jinja2"`.

Both run as fresh processes, interleaved, many times, in the same run; the figure
that matters is the ratio (goal: at most 1.5x).

    python scripts/bench_gen.py [--runs 40]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--profile", default="aws-p4d")
    args = ap.parse_args()
    exe = shutil.which("slurmtrain")
    gen = ([exe] if exe else [sys.executable, "-m", "slurmtrain"]) + [
        "gen", "--profile", args.profile, "--nodes", "4", "--", "python", "train.py"]
    base = [sys.executable, "-c", "import click, jinja2"]
    for cmd in (gen, base):  # warm the file cache
        timed(cmd)
    gen_t, base_t = [], []
    for i in range(args.runs):
        gen_t.append(timed(gen))
        base_t.append(timed(base))
        if (i + 1) % 10 == 0:
            print(f"  {i + 1}/{args.runs} runs", file=sys.stderr)
    g, b = statistics.median(gen_t), statistics.median(base_t)
    print(f"slurmtrain gen:              median {g * 1000:.1f} ms over {args.runs} runs")
    print(f"python -c 'import click, jinja2': median {b * 1000:.1f} ms")
    print(f"ratio: {g / b:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
