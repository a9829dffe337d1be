"""Helpers for the end-to-end tests: the slurmtrain command line in a subprocess, and
waits on `slurmtrain status --json` that follow progress.

A wait fails when nothing has moved for ``waiting.STALL_S`` seconds (no change in any
run's state, restarts or events, no new log output in its run directory), or after
``waiting.CAP_S`` (tests/waiting.py); the ``timeout`` arguments say how long a wait takes
on a quiet machine, for the reader, and no longer bound it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import waiting

PROGRAM = Path(__file__).resolve().parent / "allreduce.py"


def make_venv(where: Path) -> str:
    """A virtualenv that sees this interpreter's packages (torch) but is its own
    environment: sys.prefix in it is the venv, so a rank can tell which Python ran it."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(where)],
                   check=True, capture_output=True, timeout=120)
    return str(where / "bin" / "python")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED",
         "OUT_OF_MEMORY", "REVOKED", "REFUSED"}


def cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`slurmtrain ARGS` as a user runs it (a real argv, the environment's SLURM_CONF).
    ``timeout`` bounds one command (each answers in seconds; a hang is a bug)."""
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
    """`slurmtrain status --json NAMES` (one query to Slurm for all): name -> status."""
    proc = cli(cwd, "status", "--json", *names)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {s["name"]: s for s in map(json.loads, proc.stdout.splitlines())}


def _statuses_here(cwd: Path, names: list[str]) -> dict[str, dict]:
    """What `status --json NAMES` prints, from the same library call in this process: a
    wait polls every few seconds, and a `slurmtrain` process costs about half a CPU-second
    (the suite's waits would keep a core busy). The commands a test checks run as a user
    runs them (``statuses``)."""
    from slurmtrain.cli.runs import _targets
    from slurmtrain.runs import track

    got = track.statuses(_targets(tuple(names), str(cwd / "runs")))
    return {s.name: s.to_json() for s in got}


def run_dir(cwd: Path, name: str) -> Path:
    return cwd / "runs" / name


def _progress(cwd: Path, got: dict[str, dict]) -> tuple:
    """What moves while runs make progress: Slurm's state and restarts, the events, and
    the files (events, metrics, logs) in each run directory."""
    said = tuple((n, s["state"], s.get("restarts"), len(s.get("events") or ())) for n, s in sorted(got.items()))
    files = waiting.files_fingerprint(*(run_dir(cwd, n) / f for n in sorted(got)
                                        for f in ("events.jsonl", "metrics.jsonl", "logs")))
    return said, files


def wait_until(cwd: Path, names: list[str], what: str, pred, timeout: float = 240, on_poll=None, poll: float = 2):
    """Poll `slurmtrain status` for ``names`` until ``pred(statuses)`` is truthy; return the
    statuses. ``on_poll(statuses)`` runs after each poll. Fails only when the runs stop
    progressing (module docstring); ``timeout`` is how long it takes on a quiet machine."""
    last: dict[str, dict] = {}

    def poll_once():
        last.clear()
        last.update(_statuses_here(cwd, names))
        if on_poll:
            on_poll(last)
        return dict(last) if pred(last) else None

    def details() -> str:
        pending = {n: s for n, s in last.items() if s["state"] not in FINAL}
        logs = {n: cli(cwd, "logs", n).stdout[-3000:] for n in pending}
        # Slurm's own record of each, to tell a stuck state flag from a job still at work.
        shown = {n: subprocess.run(["scontrol", "-o", "show", "job", s["job_id"]], capture_output=True, text=True,
                                   timeout=30).stdout.strip() for n, s in pending.items() if s.get("job_id")}
        return f"states: { {n: s['state'] for n, s in last.items()} }\nscontrol: {shown}\n{logs}"

    return waiting.wait_for(what, poll_once, lambda: _progress(cwd, last), poll=poll, details=details)


def wait_final(cwd: Path, names: list[str], timeout: float = 240, on_poll=None) -> dict[str, dict]:
    """Poll `slurmtrain status` (one query for all) until every run is in a final state;
    the statuses by name. ``on_poll(statuses)`` runs after each poll (to act on a run
    once it is RUNNING, say). Fails only when the runs stop progressing."""
    # PREEMPTED is also Slurm's word for a job on its way back to the queue (`ended` says which)
    return wait_until(cwd, names, f"runs {names} to end",
                      lambda got: all(s["state"] in FINAL and (s["state"] != "PREEMPTED" or s.get("ended"))
                                      for s in got.values()),
                      timeout, on_poll)


def wait_for_file(cwd: Path, name: str, what: str, pred) -> object:
    """Poll ``pred()`` (about files of run ``name``) until it is truthy; fail only when the
    run stops progressing (its files and Slurm's state of it)."""
    return waiting.wait_for(what, pred, lambda: _progress(cwd, _statuses_here(cwd, [name])), poll=1,
                            details=lambda: cli(cwd, "logs", name).stdout[-3000:])


def batch_log(cwd: Path, name: str) -> str:
    """The run's batch log(s) (logs/job-*.out), as text."""
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir(cwd, name) / "logs").glob("job-*.out")))


def script_decided(cwd: Path, name: str) -> str | None:
    """The job script's last decision about a stop, once it made one: "requeue" (the
    `requeue` event, written before `scontrol requeue`) or "no requeue" (its
    "not requeueing" line in the batch log); None before. Proves that a requeue did not
    happen without waiting for it to not happen."""
    from slurmtrain import events

    if any(e.get("event") == "requeue" for e in events.read(run_dir(cwd, name))):
        return "requeue"
    return "no requeue" if "not requeueing" in batch_log(cwd, name) else None


def ranks(cwd: Path, name: str) -> list[dict]:
    path = cwd / "runs" / name / "ranks.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
