#!/usr/bin/env python3
"""Median wall time of `slurmtrain gen` against `python -c "import click, jinja2"`.

Both run as fresh processes of this interpreter, interleaved, many times, in the same
run; the figure that matters is the ratio (goal: at most 1.5x). gen runs as ``python -m
slurmtrain``, which imports the package of the current directory: run it from the root of
the checkout to be timed. Not the ``slurmtrain`` on PATH: that may be a pyenv shim (a shell
script that costs some 100 ms a call, none of it slurmtrain's) or another install.

    python scripts/bench_gen.py [--runs 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


# Every run may write bytecode, so the warm-up leaves what an installed package has: with
# PYTHONDONTWRITEBYTECODE set, each run would compile every module edited since its last
# .pyc, and gen's figure would be the compiler's.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--profile", default="aws-p4d")
    args = ap.parse_args()
    gen = [sys.executable, "-m", "slurmtrain", "gen", "--profile", args.profile, "--nodes", "4", "--",
           "python", "train.py"]
    where = subprocess.run([sys.executable, "-c", "import slurmtrain; print(slurmtrain.__path__[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"  timing {where}", file=sys.stderr)
    base = [sys.executable, "-c", "import click, jinja2"]
    for cmd in (gen, base):  # warm the file cache, write the bytecode
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
