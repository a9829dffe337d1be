"""Run directories: ``runs/<name>-<stamp>/`` with the script, the profile, a manifest and logs.

Layout (the batch script writes the last three)::

    runs/train-20250101-120000/
      job.sbatch        the exact script given to sbatch
      profile.toml      the resolved profile (after extends and --set)
      wandb-run-id      the W&B run id every start resumes (with [tracking] wandb = true)
      manifest.json     what was submitted, from where, and what Slurm answered
      events.jsonl      submitted, started, finished, failed, ... (slurmtrain.events)
      logs/job-<jobid>.out           the batch script's output
      logs/<jobid>-<node>.out        each node's task output

An array job's tasks share the directory; their logs are named by the array's id and
the task (Slurm's ``%A_%a``): ``logs/job-<jobid>_<task>.out``, ``logs/<jobid>_<task>-<node>.out``.

Pure file handling: nothing here talks to Slurm.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import __version__, perms, recent, tracking
from ..errors import UsageError
from ..runfiles import MANIFEST, SCRIPT  # noqa: F401  (the names' home: both sides use them)
from . import environ

RECIPE = "recipe.toml"       # the built-in trainer's recipe as submitted (runs/submit.py)
PROFILE = "profile.toml"
LOGS = "logs"
POINTS = "points"  # a sweep's points, each a run directory of its own (slurmtrain/sweep.py)

_NODE_LOG = re.compile(r"(?P<job>\d+)(?:_(?P<task>\d+))?-(?P<node>.+)\.out")
_BATCH_LOG = re.compile(r"job-(?P<job>\d+)_(?P<task>\d+)\.out")


def log_label(task: int | None, name: str) -> str:
    """How `logs` and `status` name a log: the node (or ``batch``), ``task N/<name>`` for an array task's."""
    return name if task is None else f"task {task}/{name}"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def script(self) -> Path:
        return self.path / SCRIPT

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    def manifest(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / MANIFEST).read_text())
        except FileNotFoundError:
            return {}
        except json.JSONDecodeError as err:
            raise UsageError(f"{self.path / MANIFEST}: not valid JSON ({err})") from None

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into manifest.json; written to a temporary file, then renamed."""
        data = {**self.manifest(), **fields}
        tmp = self.path / f".{MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path / MANIFEST)
        return data

    @property
    def job_ids(self) -> list[str]:
        return [str(j) for j in self.manifest().get("job_ids", [])]

    @property
    def made_at(self) -> float | None:
        """When the run was made (its jobs were all submitted later): None if not recorded."""
        made = self.manifest()
        try:
            return datetime.fromisoformat(made.get("created_at") or made["submitted_at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def job_id(self) -> str | None:
        """The latest job id (a requeued job keeps its id, so there is usually one)."""
        ids = self.job_ids
        return ids[-1] if ids else None

    @property
    def array_size(self) -> int | None:
        """The number of tasks of the run's job array; None for a run that is no array."""
        size = self.manifest().get("array")
        return size if isinstance(size, int) else None

    @property
    def sweep_dir(self) -> Path | None:
        """The sweep this run is a point of (its array task writes the batch log there)."""
        sweep = self.manifest().get("sweep_dir")
        return Path(sweep) if sweep else None

    def batch_logs(self, job_id: str | None = None) -> dict[int | None, Path]:
        """Array task (None for a job that is no array) -> its batch log, written or not:
        every task of the run's array, and any other task's log found. A sweep's point: its
        own task's, in the sweep's logs."""
        job_id = job_id or self.job_id
        if not job_id:
            return {}
        if self.sweep_dir is not None:
            _, _, task = job_id.partition("_")
            return {int(task): self.sweep_dir / LOGS / f"job-{job_id}.out"} if task.isdigit() else {}
        if self.array_size is None:  # a script given to sbatch by hand: where its --output said (job/adopt.py)
            return {None: Path(self.manifest().get("batch_logs", {}).get(job_id) or self.logs / f"job-{job_id}.out")}
        found = {int(m["task"]): p for p in self._log_files()
                 if (m := _BATCH_LOG.fullmatch(p.name)) and m["job"] == job_id}
        expected = {t: self.logs / f"job-{job_id}_{t}.out" for t in range(self.array_size)}
        return dict(sorted({**expected, **found}.items()))

    def node_logs(self, job_id: str | None = None) -> dict[str, Path]:
        """Each node's task log for ``job_id`` (default: the latest job), by :func:`log_label`:
        the node's name, or ``task N/<node>`` for an array task's, in task order."""
        job_id = job_id or self.job_id
        out = {}
        if job_id:
            # A sweep's point knows its task's job as ARRAY_TASK; its logs are ARRAY_TASK-<node>.out.
            job, _, task = job_id.partition("_")
            logs = [(m, p) for p in self._log_files() if (m := _NODE_LOG.fullmatch(p.name)) and m["job"] == job
                    and (not task or m["task"] == task)]
            for m, p in sorted(logs, key=lambda mp: (int(mp[0]["task"] or -1), mp[0]["node"])):
                out[log_label(None if m["task"] is None else int(m["task"]), m["node"])] = p
        return out

    def _log_files(self) -> list[Path]:
        """The run's log files; a sweep's also every point's node logs (each point's task
        writes them in its own run directory, ``points/<label>/logs/<A>_<task>-<node>.out``)."""
        folders = [self.logs] + [self.path / POINTS / p["label"] / LOGS
                                 for p in (self.manifest().get("sweep") or {}).get("points", [])]
        return sorted(f for d in folders if d.is_dir() for f in d.iterdir())


def stamp(now: float | None = None) -> str:
    return datetime.fromtimestamp(now or time.time()).strftime("%Y%m%d-%H%M%S")


def create(runs_dir: str | os.PathLike, name: str) -> RunDir:
    """A new, empty ``<runs_dir>/<name>-<stamp>[-N]/logs``; never reuses an existing one.

    ``os.mkdir`` fails on an existing directory, so two submissions in the same second
    (tests, scripts) get ``-2``, ``-3``... instead of sharing a directory.
    """
    root = Path(runs_dir).expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    base = f"{name}-{stamp()}"
    for n in range(1, 1000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / LOGS).mkdir()
        recent.remember(path)
        return RunDir(path)
    raise UsageError(f"{root}: could not create a new run directory for {base}")


def is_run_dir(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def list_runs(runs_dir: str | os.PathLike) -> list[RunDir]:
    """Every run under ``runs_dir`` this user can read, oldest submission first (a teammate's
    private run in a shared runs directory is left out, not an error for every command:
    :func:`unreadable_runs` names them)."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    runs = [RunDir(p) for p in root.iterdir() if _readable(p) and is_run_dir(p)]
    return sorted(runs, key=lambda r: (r.manifest().get("submitted_at") or r.manifest().get("created_at") or "", r.name))


def _readable(path: Path) -> bool:
    """A directory whose files this user can read (its manifest too, where it has one)."""
    manifest = path / MANIFEST
    return path.is_dir() and perms.can(path, os.R_OK | os.X_OK) and \
        (not manifest.exists() or perms.can(manifest, os.R_OK))


def unreadable_runs(runs_dir: str | os.PathLike) -> list[Path]:
    """The directories under ``runs_dir`` that :func:`list_runs` left out as unreadable."""
    root = Path(runs_dir)
    return sorted(p for p in root.iterdir() if p.is_dir() and not _readable(p)) if root.is_dir() else []


def looks_like_run(path: Path) -> bool:
    """A submitted run (manifest.json), or a directory the trainer wrote to by itself."""
    return is_run_dir(path) or any((path / name).exists() for name in _RUN_FILES)


_RUN_FILES = ("metrics.jsonl", "events.jsonl", "checkpoints")


def _is_path(ref: str) -> bool:
    return os.sep in ref or ref.startswith(("~", "."))


def _task_job_ids(run: RunDir) -> dict[str, RunDir]:
    """The own job ids of a job array's tasks (each task's job script writes its own in
    `started`), each to the run it names: the run, or a sweep's point (its task wrote its
    events in the point's directory); empty for a run that is no array, without reading
    its events."""
    if run.array_size is None:
        return {}
    from .. import events  # only for arrays: most lookups never get here

    points = [RunDir(run.path / POINTS / p["label"]) for p in (run.manifest().get("sweep") or {}).get("points", [])]
    return {str(e["job_id"]): where for where in [run, *points] for e in events.read(where.path)
            if e.get("event") == "started" and "job_id" in e}


def resolve(ref: str, runs_dir: str | os.PathLike) -> RunDir:
    """RUN as the user typed it, the same for every command that takes one: a run
    directory (a path: any directory given as one), a run name under ``runs_dir``, a job
    id recorded in a manifest (or an array task's: ``<array id>_<task>``, or the task's
    own id), a job name (its latest run), or a unique prefix of a name.
    A name may also be a directory the trainer wrote to by itself (no manifest)."""
    path = Path(ref).expanduser()
    if _is_path(ref):
        if path.is_dir():
            return RunDir(path.absolute())
        point = re.fullmatch(rf"([^/]+)/{POINTS}/([^/]+)/?", ref)  # a sweep's point by the sweep's name
        if point and not path.is_absolute():
            sweep = resolve(point[1], runs_dir)
            if (sweep.path / POINTS / point[2]).is_dir():
                return RunDir(sweep.path / POINTS / point[2])
            labels = sorted(d.name for d in (sweep.path / POINTS).glob("*") if d.is_dir())
            raise UsageError(f"{ref}: run {sweep.name} has no point {point[2]!r}"
                             + (f" (its points: {', '.join(labels)})" if labels else " (it is no sweep)"))
        raise UsageError(f"{ref}: no such run directory")
    if is_run_dir(path):
        return RunDir(path.absolute())
    root = Path(runs_dir)
    if is_run_dir(root / ref):
        return RunDir((root / ref).absolute())
    found = _match(ref, list_runs(root), str(root))
    if found is not None:
        return found
    # Last, so that a run's name wins over a folder of the same name here (demo/, data/).
    for candidate in (root / ref, path):
        if candidate.is_dir() and looks_like_run(candidate):
            return RunDir(candidate.absolute())
    here = root.absolute()
    elsewhere = [RunDir(p) for p in recent.known() if p.parent != here]
    found = _match(ref, elsewhere, "the runs you submitted elsewhere")
    if found is not None:
        return found
    hidden = [d for d in unreadable_runs(root) if d.name.startswith(ref)]  # a teammate's private run
    if hidden:
        raise UsageError(f"run {ref!r}: {hidden[-1].name} under {root} is not readable by you "
                         f"({perms.whose(hidden[-1])})")
    raise UsageError(f"run {ref!r}: no such run directory, and no run under {root} (nor any you submitted "
                     "elsewhere) has that name or job id (see `slurmtrain runs --runs-dir DIR`)")


def _match(ref: str, runs: list[RunDir], where: str) -> RunDir | None:
    """Of ``runs`` (oldest first): the run of job id ``ref`` (an array task's too), else
    the latest of job name ``ref``, else the one name ``ref`` begins (UsageError where
    several do)."""
    task = re.fullmatch(r"(\d+)_\d+", ref)  # an array task as squeue shows it: <array id>_<task>
    job_id = task[1] if task else ref
    if job_id.isdigit():
        by_job = [r for r in runs if job_id in r.job_ids]
        if by_job:
            run = RunDir(by_job[-1].path.absolute())
            return (_point_of_task(run, ref) if task else None) or run
        for r in reversed(runs):  # a task's own id (sacct's JobIDRaw, scontrol's JobId)
            if (own := _task_job_ids(r).get(job_id)) is not None:
                return RunDir(own.path.absolute())
    by_name = [r for r in runs if r.name == ref] or [r for r in runs if r.manifest().get("job_name") == ref]
    if by_name:
        # the latest run of that name that Slurm took: a submission sbatch refused is a record,
        # not the run `status NAME` or `--after NAME` mean (unless it is the only one)
        taken = [r for r in by_name if r.manifest().get("state") != "refused"] or by_name
        return RunDir(taken[-1].path.absolute())
    by_prefix = [r for r in runs if r.name.startswith(ref)]
    if len(by_prefix) == 1:
        return RunDir(by_prefix[0].path.absolute())
    if len(by_prefix) > 1:
        names = ", ".join(r.name for r in by_prefix[-5:]) + (f", and {len(by_prefix) - 5} older" if len(by_prefix) > 5
                                                                else "")
        raise UsageError(f"run {ref!r} is ambiguous under {where}: {len(by_prefix)} runs match ({names}); "
                         "give the full name")
    return None


def _point_of_task(sweep: RunDir, ref: str) -> RunDir | None:
    """A sweep's point that array task ``ref`` (``<array id>_<task>``) ran: the task is the
    point, not the whole sweep (``cancel 2_1`` cancels that point alone)."""
    for point in (sweep.manifest().get("sweep") or {}).get("points", []):
        run = RunDir(sweep.path / POINTS / point["label"])
        if ref in run.job_ids:
            return run
    return None


def git_state(cwd: str | os.PathLike) -> dict[str, Any] | None:
    """The commit checked out in ``cwd`` and whether tracked files differ; None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(cwd), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(cwd), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git, or a repository too slow to ask: the manifest says so by omission
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None}


def initial_manifest(run: RunDir, *, loaded, job, cwd: str | os.PathLike) -> dict[str, Any]:
    """Everything known before sbatch answers."""
    p = loaded.profile
    now = time.time()
    return {
        "slurmtrain_version": __version__,
        "name": run.name,
        "job_name": job.job_name,
        "run_dir": str(run.path),
        "created_at": datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
        "submit_cwd": str(Path(cwd).absolute()),
        "profile": {"name": loaded.name, "source": str(loaded.source), "digest": loaded.digest()},
        "git": git_state(cwd),
        "command": list(job.command),
        "recipe": job.recipe,
        "launcher": p.launch.launcher,
        "nodes": p.slurm.nodes,
        "spare_nodes": p.slurm.spare_nodes,  # allocated beside `nodes`, idle until one is lost
        "array": job.array,  # tasks of a job array (each of `nodes` nodes); None: one job
        "exclude": list(job.exclude),  # nodes sbatch was told to leave out (the bad-node ledger's)
        "partition": p.slurm.partition,
        "environment": environ.digest(),  # what sbatch gives the job; resubmit compares (runs/environ.py)
        "state": "created",
        "job_ids": [],
        "submitted_at": None,
        # Draws the W&B run id now (wandb-run-id): every start of this run resumes it.
        "tracking": tracking.manifest_entry(p.tracking, job.job_name, run.path),
    }


def events_of(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A run's events in file order (the order eventlog reads them in); a sweep's are its
    own and every point's (each tagged with its task: ``SLURMTRAIN_ARRAY_TASK``), in time order."""
    from .. import events

    path = Path(path)
    evs = events.read(path)
    manifest = RunDir(path).manifest() if (path / MANIFEST).is_file() else {}
    if manifest.get("in_sweep"):
        # A point is one run, its array task's alone: read as a run of no array (its events
        # say the array's size, and a task 0 that may not be its own, which would read as
        # the sweep's other points waiting).
        return [{k: v for k, v in e.items() if k not in ("array_task", "array_tasks")} for e in evs]
    points = (manifest.get("sweep") or {}).get("points")
    if not points:
        return evs
    for point in points:
        evs += events.read(path / POINTS / point["label"])
    return sorted(evs, key=lambda e: e.get("time", 0))
