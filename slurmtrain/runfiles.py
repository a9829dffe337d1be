"""The names of a run directory's files that both sides write or read: the job on the nodes
(its supervisor, the trainer, a program through slurmtrain.stop) and the commands on the
login node (runs/rundir.py says what each holds)."""

from __future__ import annotations

import os
from pathlib import Path

MANIFEST = "manifest.json"     # what was submitted, from where, and what Slurm answered
SCRIPT = "job.sbatch"          # the exact script given to sbatch
METRICS_FILE = "metrics.jsonl"  # a line per logged step: watch, status and plot read it
CHECKPOINTS = "checkpoints"    # the trainer's saves; a link to them under train.checkpoint_dir


def gone_checkpoints(run_dir: Path) -> Path | None:
    """Where the run's ``checkpoints`` link points, when that folder is gone (a scratch file
    system's purge): a start would train again from step 0, so the trainer refuses it, and
    resubmit before the job waits in the queue."""
    link = Path(run_dir) / CHECKPOINTS
    return Path(os.readlink(link)) if link.is_symlink() and not link.exists() else None
