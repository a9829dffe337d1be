"""CPU-seconds by test, for the whole machine: where the suite's CPU time goes.

Every 0.5 s it reads each process's utime+stime and the PYTEST_CURRENT_TEST in its
/proc/PID/environ (pytest sets it in each worker; every process a test starts inherits it,
Slurm jobs too, since sbatch exports the submitter's environment). Processes without it
count as "other" (root) or "uid N". A process is counted from its first sighting, whole;
its last half-second before exiting is lost. The pytest workers' own computing shows as
"other" (their environ is their start's). Writes a JSON object (key -> CPU-s, largest
first) every 10 s and at the end.

    python scripts/cpu_by_test.py OUT.json &    # then run the suite; kill it after
    SLURMTRAIN_CPU_BY_TEST=OUT.json bash scripts/test.sh     # the same, around pytest
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def key_of(pid: int) -> str | None:
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    for entry in env:
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace").rsplit(" ", 1)[0]
    return "other" if uid == 0 else f"uid {uid}"


def sample(seen: dict, totals: collections.Counter) -> None:
    alive = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = open(f"/proc/{name}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        ticks, started = int(fields[11]) + int(fields[12]), int(fields[19])
        ident = (int(name), started)
        alive.add(ident)
        before, key = seen.get(ident, (0, None))
        key = key or key_of(int(name))
        if key is None:
            continue
        totals[key] += ticks - before
        seen[ident] = (ticks, key)
    for ident in set(seen) - alive:
        del seen[ident]


def write(out: str, totals: collections.Counter) -> None:
    with open(out + ".tmp", "w") as f:
        json.dump({k: round(v / TICK, 1) for k, v in totals.most_common()}, f, indent=0)
    os.replace(out + ".tmp", out)


def main() -> None:
    out = sys.argv[1]
    seen, totals, n = {}, collections.Counter(), 0
    signal.signal(signal.SIGTERM, lambda *_: (write(out, totals), sys.exit(0)))
    while True:
        sample(seen, totals)
        n += 1
        if n % 20 == 0:
            write(out, totals)
        time.sleep(0.5)


if __name__ == "__main__":
    main()
