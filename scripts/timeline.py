"""Which worker of the suite ends last, and with what: reads the lines tests/conftest.py
writes under ``SLURMTRAIN_TEST_TIMELINE=FILE`` and prints, for each pytest-xdist worker,
when it began and ended (seconds after the first test) and its files in the order it ran
them, with each file's wall time.

    SLURMTRAIN_TEST_TIMELINE=/tmp/tl.jsonl bash scripts/test.sh; python scripts/timeline.py /tmp/tl.jsonl
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:
        sys.exit(f"{path}: no tests recorded")
    t0 = min(r["start"] for r in rows)
    for worker in sorted({r["worker"] for r in rows}):
        mine = sorted((r for r in rows if r["worker"] == worker), key=lambda r: r["start"])
        print(f"{worker}: {mine[0]['start'] - t0:.0f} s to {mine[-1]['end'] - t0:.0f} s, {len(mine)} tests")
        files: list[list] = []  # [file, first start, last end], in the order they ran
        for r in mine:
            name = r["test"].split("::")[0]
            if files and files[-1][0] == name:
                files[-1][2] = r["end"]
            else:
                files.append([name, r["start"], r["end"]])
        for name, start, end in files:
            if end - start >= 5:
                print(f"  {start - t0:6.0f} s  {end - start:5.0f} s  {name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/timeline.py TIMELINE.jsonl")
    main(sys.argv[1])
