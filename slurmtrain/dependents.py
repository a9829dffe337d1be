"""Who waits for a run (a chain: runs/chain.py): ``<run>/dependents.jsonl``, one line per
run submitted ``--after`` it. Below ``runs/`` and ``job/``, which both use it: the submit
adds a line; the job's supervisor, when the run ends in a way that can never satisfy an
``afterok`` (failed, cancelled, stopped for good), records that in each waiting run, whose
job Slurm then cancels (``--kill-on-invalid-dep=yes``). Torch-free."""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import events
from .eventlog import Ev

FILE = "dependents.jsonl"


def add(upstream: str | os.PathLike, run_name: str, run_path: str, kind: str) -> None:
    line = json.dumps({"run": run_name, "path": run_path, "kind": kind}) + "\n"
    with open(Path(upstream) / FILE, "a") as fh:  # one short line: appends do not interleave
        fh.write(line)


def waiting(upstream: str | os.PathLike) -> list[dict]:
    try:
        text = (Path(upstream) / FILE).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short
    return out


def record_never(run_path: str | os.PathLike, after: list[str], detail: str) -> bool:
    """The ``dependency_never_satisfied`` event in the waiting run ``run_path``, once."""
    if any(e.get("event") == Ev.DEPENDENCY_NEVER_SATISFIED for e in events.read(run_path)):
        return False
    events.append(run_path, Ev.DEPENDENCY_NEVER_SATISFIED, after=after, detail=detail)
    return True


def never(upstream: str | os.PathLike, job_ref: str, outcome: str) -> list[str]:
    """``upstream`` ended as ``outcome`` (not a completion): every run waiting for it to
    complete is told; returns their names."""
    name = Path(upstream).name
    told = []
    for dep in waiting(upstream):
        if dep.get("kind") == "afterok" and Path(dep.get("path", "")).is_dir():
            if record_never(dep["path"], [name], f"{name} (job {job_ref}) ended: {outcome}"):
                told.append(dep["run"])
    return told
