"""Helpers for the end-to-end tests: the slurmtrain command line in a subprocess, and
bounded waits on `slurmtrain status --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "allreduce.py"
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY", "REVOKED", "REFUSED"}


def cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`slurmtrain ARGS` as a user runs it (a real argv, the environment's SLURM_CONF)."""
    return subprocess.run([sys.executable, "-m", "slurmtrain", *args], cwd=cwd, env=dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)


def submit(cwd: Path, *args: str) -> str:
    """Submit and return the run directory's name."""
    proc = cli(cwd, "submit", *args)
    assert proc.returncode == 0, f"submit {args} failed:\n{proc.stdout}{proc.stderr}"
    run_dir = next(line.split(": ", 1)[1] for line in proc.stdout.splitlines()
                   if line.startswith("run directory: "))
    return Path(run_dir).name


def statuses(cwd: Path, names: list[str]) -> dict[str, dict]:
    proc = cli(cwd, "status", "--json", *names)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {s["name"]: s for s in map(json.loads, proc.stdout.splitlines())}


def wait_final(cwd: Path, names: list[str], timeout: float = 240, on_poll=None) -> dict[str, dict]:
    """Poll `slurmtrain status` (one query for all) until every run is in a final state."""
    deadline = time.monotonic() + timeout
    while True:
        got = statuses(cwd, names)
        if on_poll:
            on_poll(got)
        if all(s["state"] in FINAL for s in got.values()):
            return got
        if time.monotonic() > deadline:
            pending = {n: s["state"] for n, s in got.items() if s["state"] not in FINAL}
            logs = {n: cli(cwd, "logs", n).stdout[-3000:] for n in pending}
            raise AssertionError(f"runs not final after {timeout:.0f} s: {pending}\n{logs}")
        time.sleep(2)


def ranks(cwd: Path, name: str) -> list[dict]:
    path = cwd / "runs" / name / "ranks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
