"""The built-in trainer's W&B and TensorBoard logging, one run across every restart.

Rank 0 only. Which trackers comes from ``SLURMTRAIN_TRACKERS`` (the job script exports it
from the profile's ``[tracking]``), the W&B id, project and mode from the ``WANDB_*``
variables the same script exports (see :mod:`slurmtrain.tracking`).

**Steps across a resume.** Every record the trainer writes to ``metrics.jsonl`` goes to
the trackers too, with the training step as the step. A restart resumes from its last
checkpoint, which may be older than the last step already logged (a kill, a node failure):
the steps between are trained again. W&B refuses a step lower than one it has (and an
offline run cannot ask the server where it stood), so the rule, the same for TensorBoard,
is: *a step at or below the highest step in metrics.jsonl before this start is not sent
again*; the first values logged for it stay. Each step reaches a tracker once, in order.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
from pathlib import Path
from typing import Any

from .. import tracking
from ..runs.progress import last_step

log = logging.getLogger("slurmtrain.train")


def last_logged_step(run_dir: Path) -> int:
    """The highest step in metrics.jsonl (0: none): every tracker already has it."""
    return last_step(run_dir)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run_config(run_dir: Path, recipe_dict: dict[str, Any]) -> dict[str, Any]:
    """The W&B config: the resolved recipe, the profile and the run manifest (git revision,
    profile digest, slurmtrain version, nodes). Names of secrets only, never values."""
    from .._toml import tomllib

    config: dict[str, Any] = {"recipe": recipe_dict}
    profile = Path(run_dir) / "profile.toml"
    if profile.is_file():
        try:
            config["profile"] = tomllib.loads(profile.read_text())
        except (tomllib.TOMLDecodeError, OSError):
            pass
    manifest = _read_json(Path(run_dir) / "manifest.json")
    keep = ("name", "slurmtrain_version", "git", "profile", "nodes", "partition", "launcher",
            "created_at", "job_name")
    config["manifest"] = {k: manifest[k] for k in keep if k in manifest}
    config["manifest"]["nodelist"] = os.environ.get("SLURM_JOB_NODELIST")
    config["manifest"]["job_id"] = os.environ.get("SLURM_JOB_ID")
    return config


class Trackers:
    """Sends metrics records to the open trackers, skipping steps already logged."""

    def __init__(self, run_dir: Path, names: list[str], after_step: int, config: dict[str, Any]):
        self.after_step = after_step
        self.wandb_run = self.writer = None
        if "wandb" in names:
            try:
                self.wandb_run = _open_wandb(run_dir, config)
            except Exception as err:  # online without network, a bad key: keep training
                log.warning("tracking: W&B did not start (%s: %s); training without it",
                            type(err).__name__, err)
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(log_dir=str(Path(run_dir) / tracking.TENSORBOARD_DIR))
        _OPEN.append(self)
        atexit.register(self.close)
        if after_step:
            log.info("tracking: steps up to %d were logged before this start; logging from step %d",
                     after_step, after_step + 1)

    def log(self, record: dict[str, Any]) -> None:
        step = record.get("step")
        if not isinstance(step, int) or step <= self.after_step:
            return
        values = {k: v for k, v in record.items()
                  if k not in ("step", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.wandb_run is not None:
            self.wandb_run.log(values, step=step)
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()  # a kill keeps what was logged: the next start skips it

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


_OPEN: list[Trackers] = []


def close_trackers() -> None:
    """Close every open tracker: the trainer's entry point ends with ``os._exit``, which
    skips atexit, and W&B writes the end of the run (the last history row) on close."""
    while _OPEN:
        _OPEN.pop().close()


def _open_wandb(run_dir: Path, config: dict[str, Any]):
    import wandb

    env = os.environ
    return wandb.init(
        id=env.get("WANDB_RUN_ID") or tracking.fix_run_id(run_dir),
        resume=env.get("WANDB_RESUME") or "allow",
        dir=env.get("WANDB_DIR") or str(run_dir),
        project=env.get("WANDB_PROJECT") or Path(run_dir).name,
        mode=env.get("WANDB_MODE") or "offline",
        config=config,
        # The trainer's output stays as it is (the job's logs hold it); W&B gets the metrics.
        settings=wandb.Settings(console="off"),
    )


def open_trackers(run_dir: Path, recipe_dict: dict[str, Any], rank0: bool) -> Trackers | None:
    """The trackers the job asked for (``SLURMTRAIN_TRACKERS``), or None. A package missing
    here (``submit`` checks for it) costs the tracking, not the training: a warning."""
    names = [n for n in os.environ.get(tracking.TRACKERS_ENV, "").split(",") if n]
    if not rank0 or not names:
        return None
    usable = []
    for name in names:
        try:
            __import__(name)
            usable.append(name)
        except ImportError:
            log.warning("tracking: %s is not installed here; not logging to it", name)
    if not usable:
        return None
    return Trackers(run_dir, usable, last_logged_step(run_dir), run_config(run_dir, recipe_dict))
