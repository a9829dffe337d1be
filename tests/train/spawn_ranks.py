"""Start N ranks of a command on this machine with torchrun's environment, without torchrun.

    python tests/train/spawn_ranks.py N COMMAND...

For the trainer's end-to-end tests: torchrun's agent imports torch and its elastic
machinery, about 3 CPU-s a start, which over the suite's ~40 multi-rank runs on 2 cores is
a minute and a half of wall time. The trainer reads only ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``MASTER_ADDR``/``MASTER_PORT`` (as under the ``srun`` launcher), and
this does what the tests rely on torchrun for:

- every rank's output goes to this process's stdout and stderr;
- as soon as one rank exits non-zero the others get SIGTERM, and SIGKILL 30 s later
  (torchrun's shutdown timeout); SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 sent here go on to
  every rank;
- the ranks that failed by themselves are reported as torchrun does (``exitcode : N``
  lines, which ``trainer_util.rank_exit_codes`` reads), and the exit status is 1 if any
  rank failed, else 0;
- the ranks die with this process (PR_SET_PDEATHSIG), as a test's kill after a stall wants.

The Slurm end-to-end tests launch through the real torchrun, as users do.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

SHUTDOWN_S = 30.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(n: int, command: list[str]) -> list[subprocess.Popen]:
    port = str(free_port())
    procs = []
    for rank in range(n):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(n),
               "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port}
        procs.append(subprocess.Popen(command, env=env, preexec_fn=_die_with_parent))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + SHUTDOWN_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def supervise(procs: list[subprocess.Popen]) -> dict[int, int]:
    """Wait for every rank, or for the first to fail and then stop the others; the exit
    status of each rank that failed by itself."""
    while True:
        failed = {rank: p.returncode for rank, p in enumerate(procs) if p.poll() not in (None, 0)}
        if failed or all(p.returncode is not None for p in procs):
            break
        time.sleep(0.1)
    if failed:
        stop(procs)
    return failed


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: spawn_ranks.py N COMMAND...", file=sys.stderr)
        return 2
    procs = start(int(argv[0]), argv[1:])
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: [p.send_signal(s) for p in procs if p.poll() is None])
    failed = supervise(procs)
    for rank, code in sorted(failed.items()):
        print(f"spawn_ranks: rank {rank} failed\n  exitcode  : {code}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
