"""A job script given to sbatch by hand (``slurmtrain gen ... > job.sbatch; sbatch job.sbatch``)
is a run too: the script writes its run directory (``runs/<job name>-<job id>``) with events
and node logs, but no ``slurmtrain submit`` wrote its manifest, so ``runs``, ``status``,
``logs``, ``cancel`` and ``resubmit`` would not know it. Its first start writes what they
need: a manifest from Slurm's view of the job (``submitted_by: sbatch``), the script as Slurm
keeps it (``scontrol write batch_script``: ``resubmit`` submits it again), and the run's line
in the user's list of runs (slurmtrain/recent.py), so it is found from any directory.

A job array's tasks each write a run directory of their own; they are left as they are.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from .. import __version__, events, recent
from ..eventlog import Ev
from ..runfiles import MANIFEST, SCRIPT
from .config import Job
from .slurm import Slurm


def adopt(run_dir: Path, job: Job, slurm: Slurm, batch_log: Path | None, env: dict[str, str]) -> bool:
    """Write the manifest of a run submitted by hand; False where there is one already (a
    submitted run, or a later start), for an array task, for a run directory the script
    did not name itself (``<job name>-<job id>``), or where it cannot be written."""
    if job.array_task is not None or (run_dir / MANIFEST).exists() or not run_dir.name.endswith(f"-{job.job_id}"):
        return False
    shown = slurm.show_job() or {}
    submitted = _iso(shown.get("SubmitTime"))  # where the run's wait in the queue began (goodput)
    manifest = {
        "slurmtrain_version": __version__,
        "name": run_dir.name,
        "job_name": env.get("SLURM_JOB_NAME") or shown.get("JobName"),
        "run_dir": str(run_dir),
        "created_at": submitted or _iso_now(),
        "submitted_by": "sbatch",
        "submit_cwd": env.get("SLURM_SUBMIT_DIR") or shown.get("WorkDir"),
        "nodes": _int(env.get("SLURM_JOB_NUM_NODES") or shown.get("NumNodes", "").split("-")[0]),
        "partition": env.get("SLURM_JOB_PARTITION") or shown.get("Partition"),
        "array": None,
        "state": "submitted",
        "job_ids": [job.job_id],
        "submitted_at": submitted or _iso_now(),
        "batch_logs": {job.job_id: str(batch_log)} if batch_log else {},  # where sbatch's --output put it
    }
    try:
        with open(run_dir / MANIFEST, "x") as f:  # two starts racing: the first writes it
            json.dump(manifest, f, indent=2)
    except OSError:
        return False
    events.append(run_dir, Ev.SUBMITTED, datetime.fromisoformat(submitted).timestamp() if submitted else None,
                  job_id=job.job_id, by="sbatch")
    script = run_dir / SCRIPT
    if not script.exists() and not slurm.call("scontrol", "write", "batch_script", job.ref, str(script)).ok:
        script.unlink(missing_ok=True)  # resubmit says the script is missing, rather than run half of one
    recent.remember(run_dir)
    return True


def _iso(slurm_time: str | None) -> str | None:
    """Slurm's local ``2026-11-27T21:18:30`` as an ISO time with its offset; None if not one."""
    try:
        return datetime.fromisoformat(slurm_time or "").astimezone().isoformat(timespec="seconds")
    except ValueError:
        return None


def _iso_now() -> str:
    return datetime.fromtimestamp(time.time()).astimezone().isoformat(timespec="seconds")


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None
