"""Start N ranks of a command on this machine with torchrun's environment, without torchrun.

    python tests/train/spawn_ranks.py [--server SOCKET] N COMMAND...

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

With ``--server SOCKET`` (COMMAND being ``python -m MODULE ...`` or ``python -c CODE ...``)
the ranks are forked by rank_server.py, which has imported the trainer already, and this
process only passes its streams on, forwards those signals to the run and exits as it does
(one rank: that rank's own status, as ``python`` itself would).

The Slurm end-to-end tests launch through the real torchrun, as users do.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

SHUTDOWN_S = 30.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768 and up by default): one the
    kernel handed out (bind to 0) went to another process's outgoing connection, on a busy
    machine, before the ranks' store could listen on it (EADDRINUSE, seen in CI)."""
    import random
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def rank_env(rank: int, n: int, port: str) -> dict[str, str]:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
            "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


class Forked:
    """A forked child with the part of Popen's interface that supervise() and stop() use."""

    die_with_parent = staticmethod(_die_with_parent)

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(n: int, command: list[str]) -> list[subprocess.Popen]:
    port = str(free_port())
    return [subprocess.Popen(command, env={**os.environ, **rank_env(rank, n, port)}, preexec_fn=_die_with_parent)
            for rank in range(n)]


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


def report(failed: dict[int, int]) -> int:
    """torchrun's report of the ranks that failed by themselves, and its exit status."""
    for rank, code in sorted(failed.items()):
        print(f"spawn_ranks: rank {rank} failed\n  exitcode  : {code}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def through_server(path: str, n: int, argv: list[str]) -> int:
    """Have rank_server.py at ``path`` run it; its exit status (negative: a signal)."""
    # The signals are held from the start: the ranks may be up (and a test signal this process)
    # before the server's pid line is read; one that came meanwhile is passed on then.
    run: dict[str, int] = {}
    held: list[int] = []
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: os.kill(run["pid"], s) if "pid" in run else held.append(s))
    request = json.dumps({"n": n, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [struct.pack("!Q", len(request))], [0, 1, 2])
    conn.sendall(request)
    reader = conn.makefile("r")
    run["pid"] = int(reader.readline().split()[1])
    for s in held:
        os.kill(run["pid"], s)
    line = reader.readline()
    if not line.startswith("exit "):
        print(f"spawn_ranks: rank_server.py ended without the run's status ({line!r})", file=sys.stderr)
        return 1
    return int(line.split()[1])


def main(argv: list[str]) -> int:
    server = None
    if argv[:1] == ["--server"] and len(argv) > 1:
        server, argv = argv[1], argv[2:]
    if len(argv) < 2 or not argv[0].isdigit() or (server and (len(argv) < 4 or argv[2] not in ("-m", "-c"))):
        print("usage: spawn_ranks.py [--server SOCKET] N COMMAND... (with --server: PYTHON -m MODULE "
              "or PYTHON -c CODE)", file=sys.stderr)
        return 2
    if server:
        return through_server(server, int(argv[0]), argv[2:])
    procs: list = []
    held: list[int] = []  # signals that came before the ranks were all started: passed on then
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: [p.send_signal(s) for p in procs if p.poll() is None] if procs
                      else held.append(s))
    procs.extend(start(int(argv[0]), argv[1:]))
    for s in held:
        for p in procs:
            p.send_signal(s)
    return report(supervise(procs))


def exit_as(code: int) -> None:
    """Exit with ``code``; a negative one by that signal, as the run's own process did."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)  # delivered before kill returns: this process ends here
        code = 128 - code  # a signal whose default is not to end a process: the shell's number
    sys.exit(code)


if __name__ == "__main__":
    exit_as(main(sys.argv[1:]))
