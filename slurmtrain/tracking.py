"""Experiment tracking across requeues: the profile's ``[tracking]`` keys on the CLI side.

Torch-free and wandb-free (``gen``/``submit``/``status`` import it). One W&B run per run
directory: its id is drawn when the run directory is created (``<run dir>/wandb-run-id``;
a script from ``gen`` draws it at its first start) and every start exports it with
``WANDB_RESUME=allow``, so the built-in trainer and any program calling ``wandb.init()``
continue the same run. Offline files live in ``<run dir>/wandb/`` (one
``offline-run-*-<id>`` folder per start, all the same run: ``wandb sync`` uploads them in
order of start time), TensorBoard events in ``<run dir>/tensorboard/``. The API key is
only ever passed through by name (``tracking.api_key_var``).
"""

from __future__ import annotations

import importlib.util
import shlex
import string
from pathlib import Path
from typing import Any

from .errors import ConfigError

RUN_ID_FILE = "wandb-run-id"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"  # W&B itself makes this folder under WANDB_DIR (the run directory)
# What the job exports for the trainer: which trackers to log to ("wandb,tensorboard").
TRACKERS_ENV = "SLURMTRAIN_TRACKERS"
_ALPHABET = string.ascii_lowercase + string.digits


def new_run_id() -> str:
    """Eight characters from W&B's own alphabet for run ids."""
    import secrets  # here: `gen` never draws an id, and secrets is a few ms to import

    return "".join(secrets.choice(_ALPHABET) for _ in range(8))


def fix_run_id(run_dir: str | Path) -> str:
    """The run's W&B id: read from the run directory, or drawn and stored there once."""
    path = Path(run_dir) / RUN_ID_FILE
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    run_id = new_run_id()
    path.write_text(run_id + "\n")
    return run_id


def trackers(tracking) -> list[str]:
    return [name for name, on in (("wandb", tracking.wandb), ("tensorboard", tracking.tensorboard)) if on]


def template_context(tracking, job_name: str) -> dict[str, Any] | None:
    """What templates/tracking.j2 needs; None when no tracker is asked for."""
    names = trackers(tracking)
    if not names:
        return None
    return {
        "trackers": ",".join(names),
        "wandb": tracking.wandb,
        "defaults": [("WANDB_PROJECT", tracking.project or job_name), ("WANDB_ENTITY", tracking.entity),
                     ("WANDB_NAME", tracking.name), ("WANDB_TAGS", ",".join(tracking.tags) or None),
                     ("WANDB_MODE", tracking.mode)],
        "api_key_var": tracking.api_key_var if tracking.mode == "online" else None,
    }


def manifest_entry(tracking, job_name: str, run_dir: Path) -> dict[str, Any] | None:
    """What ``status`` shows later, recorded when the run directory is created."""
    names = trackers(tracking)
    if not names:
        return None
    out: dict[str, Any] = {"trackers": names}
    if tracking.wandb:
        out["wandb"] = {"run_id": fix_run_id(run_dir), "project": tracking.project or job_name,
                        "entity": tracking.entity, "mode": tracking.mode}
    if tracking.tensorboard:
        out["tensorboard"] = str(run_dir / TENSORBOARD_DIR)
    return out


def point_entry(entry: dict[str, Any] | None, point_dir: Path) -> dict[str, Any] | None:
    """A sweep's point is a W&B run of its own (its task's start draws the id in its own run
    directory, as a script from `gen` does: drawn here first), in the sweep's project."""
    if not entry:
        return None
    out = dict(entry)
    if entry.get("wandb"):
        out["wandb"] = {**entry["wandb"], "run_id": fix_run_id(point_dir)}
    if entry.get("tensorboard"):
        out["tensorboard"] = str(Path(point_dir) / TENSORBOARD_DIR)
    return out


def _has_module(python: str | None, module: str) -> bool:
    if python is None:
        return importlib.util.find_spec(module) is not None
    import subprocess  # here: only submit asks another interpreter; `gen` never does

    try:
        proc = subprocess.run([python, "-c", f"import importlib.util, sys; "
                               f"sys.exit(importlib.util.find_spec({module!r}) is None)"],
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True  # an interpreter that only exists on the nodes: the job will say
    return proc.returncode == 0


def check_installed(loaded) -> None:
    """Refuse at submit time a tracker whose package the job's Python lacks (ConfigError,
    exit 2), rather than failing on the nodes. A container's Python cannot be asked here."""
    p = loaded.profile
    if p.container.runtime != "none":
        return
    for name in trackers(p.tracking):
        if not _has_module(p.launch.python, name):
            where = p.launch.python or "this Python"
            raise ConfigError(loaded.source, f"tracking.{name}",
                              f"{name} is not installed for {where}: pip install 'slurmtrain[track]' "
                              f"(or {name}), or set tracking.{name} = false")


def offline_dirs(run_dir: Path, run_id: str) -> list[Path]:
    """Every start's offline W&B folder of this run, oldest first."""
    return sorted((Path(run_dir) / WANDB_DIR).glob(f"offline-run-*-{run_id}"))


def sync_command(run_dir: Path, entry: dict[str, Any]) -> list[str] | None:
    """``wandb sync`` for the run's offline folders (all one run: W&B syncs them in order)."""
    wb = entry.get("wandb") or {}
    if wb.get("mode") != "offline":
        return None
    argv = ["wandb", "sync", "--id", wb["run_id"], "-p", wb["project"]]
    if wb.get("entity"):
        argv += ["-e", wb["entity"]]
    return argv + [str(d) for d in offline_dirs(run_dir, wb["run_id"])]


def short(manifest: dict[str, Any]) -> str | None:
    """One cell for ``runs``: the W&B link (online), ``wandb offline <id>``, ``tensorboard``."""
    entry = manifest.get("tracking") or {}
    wb, parts = entry.get("wandb"), []
    if wb and (manifest.get("sweep") or {}).get("points"):
        parts.append(f"wandb {wb.get('mode')}, a run per point")
    elif wb and wb.get("mode") == "online" and wb.get("entity"):
        parts.append(f"https://wandb.ai/{wb['entity']}/{wb['project']}/runs/{wb['run_id']}")
    elif wb:
        parts.append(f"wandb {wb.get('mode')} {wb['run_id']}")
    if entry.get("tensorboard"):
        parts.append("tensorboard")
    return ", ".join(parts) or None


def describe(run_dir: Path, manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows for ``status``: where the W&B run and the TensorBoard logs are."""
    entry = manifest.get("tracking")
    if not entry:
        return []
    rows = []
    wb = entry.get("wandb")
    points = (manifest.get("sweep") or {}).get("points")
    if points:  # each point its own run: `status SWEEP/points/LABEL` names it
        if wb:
            rows.append(("wandb", f"one {wb.get('mode')} W&B run per point ({len(points)}), project {wb['project']}: "
                                  f"`slurmtrain status {run_dir}/points/LABEL` names each"))
        if wb and wb.get("mode") == "offline":
            rows.append(("sync", f"slurmtrain sync {run_dir}   (every point's)"))
        if entry.get("tensorboard"):
            rows.append(("tb", f"tensorboard --logdir {run_dir}/points   (a log per point)"))
        return rows
    if wb and wb.get("mode") == "online":
        base = f"https://wandb.ai/{wb['entity']}" if wb.get("entity") else "https://wandb.ai/<your entity>"
        rows.append(("wandb", f"{base}/{wb['project']}/runs/{wb['run_id']}"))
    elif wb:
        found = offline_dirs(run_dir, wb["run_id"])
        rows.append(("wandb", f"offline run {wb['run_id']} (project {wb['project']}): {len(found)} folder(s) "
                              f"under {Path(run_dir) / WANDB_DIR}"))
        rows.append(("sync", f"slurmtrain sync {run_dir}   (or: "
                             f"{shlex.join(sync_command(run_dir, entry)[:-len(found) or None])} "
                             f"{Path(run_dir) / WANDB_DIR}/offline-run-*-{wb['run_id']})"))
    if entry.get("tensorboard"):
        rows.append(("tb", f"tensorboard --logdir {entry['tensorboard']}"))
    return rows
