"""One `resubmit --watch` per run, and a watch that outlives the shell that started it.

Two watches of one run would each resubmit it after the same stop: two jobs training into
one run directory. So a watch holds a lock on the run directory's ``watch.lock`` for as
long as it runs (``flock``: the kernel lets go when the process dies, however it dies), and
writes who it is there (pid, host, since when, its log) for the refusal's words and for
`status`. On a file system without locks (a Lustre mounted without ``flock``) the watch
runs unguarded and says so.

``--detach`` starts the watch as a process of its own session, its output in
``watch.log``, so that it goes on after the login shell (or the laptop's ssh) ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import UsageError
from .rundir import RunDir

LOCK = "watch.lock"
LOG = "watch.log"
START_S = 15.0  # how long --detach waits for the watch to hold the lock


def holder(run: RunDir) -> dict | None:
    """Who watches ``run`` now (pid, host, since, log), or None."""
    path = run.path / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: read who holds it
        try:
            return json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
    except OSError:  # no locks on this file system: nobody can tell
        return None
    finally:
        os.close(fd)
    return None


def describe(who: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(who["since"])) if "since" in who else "?"
    return f"pid {who.get('pid', '?')} on {who.get('host', '?')} since {since} (log: {who.get('log', '?')})"


@contextmanager
def claim(run: RunDir, log: str = "the terminal", warn: Callable[[str], None] = print) -> Iterator[None]:
    """Hold ``run``'s watch lock while the body runs; UsageError naming the holder when
    another watch has it."""
    path = run.path / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides: a team shares runs (002)
    try:
        try:
            _lock(fd)
        except BlockingIOError:
            raise UsageError(f"run {run.name} is watched already by {describe(holder(run) or {})}: a second watch "
                             "would resubmit it a second time after each stop") from None
        except OSError as err:
            warn(f"warning: no lock on {path} ({err.strerror}): nothing keeps a second watch of this run from "
                 "resubmitting it too")
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": round(time.time()),
                                 "log": log}).encode())
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _lock(fd: int, tries: int = 5) -> None:
    """The exclusive lock, asked a few times: `status` looking (a shared lock, a moment) is
    no other watch."""
    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if i + 1 == tries:
                raise
            time.sleep(0.1)


def detach(run: RunDir, options: list[str]) -> dict:
    """Start ``slurmtrain resubmit --watch <options> RUN`` in a session of its own, its
    output appended to the run's ``watch.log``; return who watches once it holds the lock.
    UsageError with the log's last lines when it ended first (a watch already there, say)."""
    log = run.path / LOG
    argv = [sys.executable, "-m", "slurmtrain", "resubmit", "--watch", *options, "--log-name", str(log),
            str(run.path)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=run.path)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        who = holder(run)
        if who and who.get("pid") == proc.pid:
            return who
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    else:
        return {"pid": proc.pid, "host": socket.gethostname(), "log": str(log)}  # slow to start, but going
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    raise UsageError(f"the watch of run {run.name} ended at once (exit status {proc.returncode}): "
                     + (" / ".join(tail) or "no output"))
