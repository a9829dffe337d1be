"""tests/remote: a laptop user runs slurmtrain against the container lane's login node over
ssh (scripts/container_lane.sh, scripts/login_node.sh). The laptop's commands get a PATH with
slurmtrain, ssh and rsync only; the test itself plays the cluster's other users (a job of
the high partition) with Slurm's commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

LAPTOP_BIN = os.environ.get("SLURMTRAIN_LAPTOP_BIN", "")
LOGIN_LOG = Path(os.environ.get("SLURMTRAIN_LOGIN_LOG", "/nonexistent"))
LOGIN_USER = os.environ.get("SLURMTRAIN_LOGIN_USER", "")
LOGIN_PORT = os.environ.get("SLURMTRAIN_LOGIN_PORT", "")
HOME = Path(os.path.expanduser("~"))
# Ports of this lane's jobs, apart from the suite's sandboxes and the container tests'.
SETS = ["--set", "launch.rdzv_port=12000", "--set", "launch.rdzv_port_spread=2000",
        "--set", "launch.procs_per_node=1", "--set", "resilience.rendezvous_timeout=60"]


@pytest.fixture(scope="session")
def laptop_env(tmp_path_factory) -> dict[str, str]:
    if os.getuid() == 0 or not LAPTOP_BIN:
        pytest.fail("tests/remote run as the laptop user of scripts/container_lane.sh")
    runtime = tmp_path_factory.mktemp("runtime")  # the shared ssh connections of this session
    return {"HOME": str(HOME), "PATH": LAPTOP_BIN, "LANG": "C.UTF-8", "XDG_RUNTIME_DIR": str(runtime)}


def laptop(env: dict, cwd: Path, *args: str, remote: str = "lane", timeout: float = 120,
           path: str | None = None) -> subprocess.CompletedProcess:
    """``slurmtrain --remote REMOTE ARGS`` as the laptop user types it."""
    e = dict(env, PATH=path or env["PATH"])
    return subprocess.run(["slurmtrain", "--remote", remote, *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


def on_login(command: str) -> subprocess.CompletedProcess:
    """COMMAND (a line for the login shell) on the login node as its user, over plain ssh:
    the test looking, not the tool."""
    return subprocess.run(["ssh", "-p", LOGIN_PORT, "-o", "BatchMode=yes", "-i", str(HOME / ".ssh/id_ed25519"),
                           f"{LOGIN_USER}@127.0.0.1", command], capture_output=True, text=True, timeout=60)


def handshakes() -> int:
    """Logins the login node's sshd has accepted so far."""
    return LOGIN_LOG.read_text().count("Accepted publickey")


def submitted(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path(re.search(r"run directory: (\S+)", proc.stdout)[1]).name


def status(env, cwd, name: str) -> dict:
    proc = laptop(env, cwd, "status", "--json", name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[0])


def wait_state(env, cwd, name: str, pred, what: str, timeout: float = 300) -> dict:
    end = time.monotonic() + timeout
    while True:
        st = status(env, cwd, name)
        if pred(st):
            return st
        if time.monotonic() > end:
            raise AssertionError(f"{name}: no {what} in {timeout} s: {st}")
        time.sleep(3)  # each look is a slurmtrain on the login node: not too often
