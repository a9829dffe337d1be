"""Starting each daemon the sandbox runs, and waiting until it answers.

Slurm's daemons and munged daemonize themselves and write pid files under
``<state>/run``; mariadbd does not, so it is started through ``setsid -f`` and
writes its own pid file. None of them stays a child of this process, so a
short-lived ``slurmtrain sandbox up`` can exit and leave them running.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable

from . import netns, procs
from .config import CLUSTER_NAME, MYSQL_PORT
from .errors import DaemonFailed
from .install import which
from .layout import Layout, STATE_DIR_ENV

Progress = Callable[[str], None]


def daemon_env(layout: Layout) -> dict[str, str]:
    """Environment for the daemons: our slurm.conf, and a marker that lets `down`
    recognise processes (slurmstepd included) that belong to this sandbox."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    return dict(os.environ, SLURM_CONF=str(layout.slurm_conf), PATH=path,
                **{STATE_DIR_ENV: str(layout.root)})


def _run(cmd: list[str], layout: Layout, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=daemon_env(layout), capture_output=True, text=True,
                          timeout=timeout, **kw)


def _last_errors(log: Path, n: int = 3) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    bad = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()]
    return " | ".join((bad or lines)[-n:])


def _fail(daemon: str, log: Path, detail: str) -> DaemonFailed:
    last = _last_errors(log)
    return DaemonFailed(daemon, str(log), f"{detail}" + (f" (last log lines: {last})" if last else ""))


def _wait(check: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _start_self_daemonizing(name: str, program: str, cmd: list[str], layout: Layout,
                            pid_file: Path, log: Path) -> int:
    """Run a daemon that forks itself; wait for its pid file; return its pid."""
    pid = procs.read_pid(pid_file)
    if procs.is_ours(pid, program):
        return pid
    pid_file.unlink(missing_ok=True)
    log_start = log.stat().st_size if log.exists() else 0
    proc = _run(cmd, layout, timeout=60, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise _fail(name, log, f"`{' '.join(cmd)}` exited {proc.returncode}: {msg[-1] if msg else ''}")

    def started() -> bool:
        if procs.is_ours(procs.read_pid(pid_file), program):
            return True
        if _fatal_since(log, log_start):  # don't sit out the timeout on a daemon that gave up
            raise _fail(name, log, "it exited right after starting")
        return False

    if not _wait(started, 15):
        raise _fail(name, log, "it exited right after starting")
    return procs.read_pid(pid_file)


def _fatal_since(log: Path, offset: int) -> bool:
    """The daemon wrote a fatal error to ``log`` after ``offset``."""
    try:
        with open(log, errors="replace") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return False
    return "fatal:" in text or "Unable to bind" in text


# --- munge -------------------------------------------------------------------

def start_munged(layout: Layout) -> int:
    if not layout.munge_key.exists():
        layout.munge_key.write_bytes(os.urandom(1024))
    layout.munge_key.chmod(0o600)
    cmd = [which("munged") or "munged", "--force",
           f"--socket={layout.munge_socket}", f"--key-file={layout.munge_key}",
           f"--log-file={layout.log('munged')}", f"--pid-file={layout.pid_file('munged')}",
           f"--seed-file={layout.munge_dir / 'munged.seed'}"]
    return _start_self_daemonizing("munged", "munged", cmd, layout,
                                   layout.pid_file("munged"), layout.log("munged"))


# --- accounting: mariadb + slurmdbd ----------------------------------------------

def _mysql(layout: Layout, sql: str) -> subprocess.CompletedProcess:
    return _run([which("mariadb") or "mariadb", "--no-defaults", f"--socket={layout.mysql_socket}",
                 "-uroot", "-e", sql], layout, timeout=30)


def start_mariadb(layout: Layout, progress: Progress) -> int:
    pid_file, log = layout.pid_file("mariadb"), layout.log("mariadb")
    pid = procs.read_pid(pid_file)
    if procs.is_ours(pid, "mariadbd"):
        return pid
    if not (layout.mysql_data / "mysql").is_dir():
        progress("initialising MariaDB data directory (first time only)")
        proc = _run([which("mariadb-install-db") or "mariadb-install-db", "--no-defaults",
                     f"--datadir={layout.mysql_data}", "--user=root",
                     "--auth-root-authentication-method=socket", "--skip-test-db"],
                    layout, timeout=300)
        if proc.returncode != 0:
            log.write_text(proc.stdout + proc.stderr)
            raise _fail("mariadb-install-db", log, f"exited {proc.returncode}")
    pid_file.unlink(missing_ok=True)
    cmd = ["setsid", "-f", which("mariadbd") or "mariadbd", "--no-defaults",
           f"--datadir={layout.mysql_data}", f"--socket={layout.mysql_socket}",
           f"--pid-file={pid_file}", f"--log-error={log}", "--user=root",
           "--bind-address=127.0.0.1", f"--port={layout.port_base + MYSQL_PORT}", "--skip-name-resolve",
           "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M", "--innodb-lock-wait-timeout=900"]
    with open(log, "a") as out:
        subprocess.run(cmd, env=daemon_env(layout), stdin=subprocess.DEVNULL, stdout=out,
                       stderr=subprocess.STDOUT, check=False)
    if not _wait(lambda: _mysql(layout, "SELECT 1").returncode == 0, 60, 0.5):
        raise _fail("mariadbd", log, "it did not accept connections within 60s")
    sql = ("CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
    proc = _mysql(layout, sql)
    if proc.returncode != 0:
        raise _fail("mariadbd", log, f"creating the slurm database user failed: {proc.stderr.strip()}")
    return procs.read_pid(pid_file)


def start_slurmdbd(layout: Layout) -> int:
    layout.slurmdbd_conf.chmod(0o600)  # slurmdbd refuses a readable password file
    pid = _start_self_daemonizing("slurmdbd", "slurmdbd", [which("slurmdbd") or "slurmdbd"], layout,
                                  layout.pid_file("slurmdbd"), layout.log("slurmdbd"))
    sacctmgr = which("sacctmgr") or "sacctmgr"
    def answers() -> bool:
        if not procs.is_ours(pid, "slurmdbd"):
            raise _fail("slurmdbd", layout.log("slurmdbd"), "it exited after starting")
        return _run([sacctmgr, "-n", "show", "cluster"], layout, timeout=20).returncode == 0

    if not _wait(answers, 30, 0.5):
        raise _fail("slurmdbd", layout.log("slurmdbd"), "sacctmgr could not reach it within 30s")
    # Register the cluster before slurmctld starts, and an account for root's jobs.
    for args in (["add", "cluster", CLUSTER_NAME],
                 ["add", "account", "sandbox", f"Cluster={CLUSTER_NAME}", "Description=sandbox",
                  "Organization=sandbox"],
                 ["add", "user", "root", "Account=sandbox", "DefaultAccount=sandbox"]):
        _run([sacctmgr, "-i", *args], layout, timeout=30)  # "already exists" is fine
    return pid


# --- slurm -------------------------------------------------------------------------

def start_slurmctld(layout: Layout) -> int:
    pid = _start_self_daemonizing("slurmctld", "slurmctld", [which("slurmctld") or "slurmctld"],
                                  layout, layout.pid_file("slurmctld"), layout.log("slurmctld"))
    scontrol = which("scontrol") or "scontrol"

    def answers() -> bool:
        if not procs.is_ours(pid, "slurmctld"):
            raise _fail("slurmctld", layout.log("slurmctld"), "it exited after starting")
        return "UP" in _run([scontrol, "ping"], layout, timeout=20).stdout

    if not _wait(answers, 30, 0.3):
        raise _fail("slurmctld", layout.log("slurmctld"), "`scontrol ping` did not answer UP within 30s")
    return pid


def slurmd_name(node: str) -> str:
    return f"slurmd-{node}"


def start_slurmd(layout: Layout, node: str, network: bool = False) -> int:
    """``network``: in the node's own namespaces (netns.py), with every step it starts."""
    name = slurmd_name(node)
    (layout.spool / name).mkdir(parents=True, exist_ok=True)
    cmd = [which("slurmd") or "slurmd", "-N", node]
    return _start_self_daemonizing(name, "slurmd", netns.wrap(layout, node, cmd) if network else cmd, layout,
                                   layout.pid_file(name), layout.log(name))


def node_states(layout: Layout) -> dict[str, str]:
    """``{node: state}`` as sinfo reports it (e.g. "idle", "down*"); {} if slurmctld does not answer."""
    try:
        proc = _run([which("sinfo") or "sinfo", "-h", "-N", "-o", "%N %t"], layout, timeout=20)
    except subprocess.TimeoutExpired:
        return {}
    if proc.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())


READY_STATES = {"idle", "mix", "alloc", "comp"}


def resume_nodes(layout: Layout, nodes: list[str]) -> None:
    """Bring back nodes that a previous run left down or drained."""
    _run([which("scontrol") or "scontrol", "update", f"NodeName={','.join(nodes)}", "State=RESUME"],
         layout, timeout=20)
