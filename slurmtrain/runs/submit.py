"""Submit a job: create its run directory, write the exact script, sbatch it through submitit.

Rendering stays pure (:func:`slurmtrain.render.render`); this is where effects happen.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

from .. import events, slurmversion, tracking
from ..errors import SlurmError, UsageError
from ..slurmtext import where_to_set_slurm_conf
from ..profile import LoadedProfile
from ..render import JobSpec, check_job_name, render
from . import rundir, slurmquery
from .rundir import POINTS, PROFILE, RECIPE, RunDir
from ..eventlog import Ev


@dataclasses.dataclass(frozen=True)
class Submitted:
    run: RunDir
    job_id: str
    tasks: tuple[int, ...] | None = None  # a sweep's points submitted (by task), when not all


def prepare(loaded: LoadedProfile, job: JobSpec, runs_dir: str | os.PathLike,
            cwd: str | os.PathLike | None = None, use_ledger: bool = True) -> RunDir:
    """A new run directory holding job.sbatch, profile.toml and the manifest (state "created").
    The bad-node ledger's nodes (``<runs_dir>/bad-nodes.jsonl``) are excluded unless
    ``use_ledger`` is false (doctor: it is how a node gets checked again)."""
    cwd = Path(cwd or Path.cwd())
    check_job_name(job.job_name)  # a '/' in it would make another directory, or fail in mkdir
    if use_ledger:
        from .. import ledger
        job = dataclasses.replace(job, exclude=tuple(sorted(set(job.exclude) | set(
            ledger.excluded(runs_dir, loaded.profile.resilience.bad_node_hours)))))
    run = rundir.create(runs_dir, job.job_name)
    try:
        job = dataclasses.replace(job, run_dir=str(run.path))
        if job.recipe and not job.command:
            job = _keep_recipe(run, job)
        script = render(loaded, job)
    except Exception:
        shutil.rmtree(run.path, ignore_errors=True)  # ours, just made, holding only logs/
        raise
    run.script.write_text(script)
    (run.path / PROFILE).write_text(loaded.to_toml())
    run.update_manifest(**rundir.initial_manifest(run, loaded=loaded, job=job, cwd=cwd))
    if job.sweep:
        _sweep_dirs(run, job)
    if job.exclude:
        events.append(run.path, Ev.NODES_EXCLUDED, nodes=" ".join(job.exclude), source="bad-node ledger")
    return run


def _keep_recipe(run: RunDir, job: JobSpec) -> JobSpec:
    """The recipe as submitted, kept in the run directory: every start of the run (a requeue,
    a resubmission) reads that copy, so the file edited meanwhile does not change, or break,
    what the run trains. Its relative data paths stay the submit directory's (--chdir)."""
    from ..recipes.recipe import extends, load_recipe, recipe_path
    kept, source = run.path / RECIPE, recipe_path(job.recipe)
    if extends(job.recipe):  # the chain merged: a parent named by a relative path is not beside the copy
        from ..schema import to_toml
        kept.write_text(f"# {source}, with the recipes it extends merged in, as submitted\n"
                        + to_toml(load_recipe(job.recipe)))
    else:
        shutil.copyfile(source, kept)
    return dataclasses.replace(job, recipe=str(kept))


def _check_array_size(job: JobSpec, config: str) -> None:
    """An array of more tasks than the cluster's MaxArraySize (in ``config``, the text of
    ``scontrol show config``) allows is refused here (exit 2), before anything is made,
    rather than by sbatch."""
    if not job.array:
        return
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit() and job.array > int(value.strip()):
            what = f"a sweep of {len(job.sweep)} points" if job.sweep else f"a job array of {job.array} tasks"
            raise UsageError(f"{what}: more than the cluster's MaxArraySize = {value.strip()} "
                             "(scontrol show config); split it, or ask the site to raise it")


def _sweep_dirs(run: RunDir, job: JobSpec) -> None:
    """The sweep's points in the manifest, and each point's run directory (``points/<label>``),
    where its task writes: a manifest that names the point and the sweep."""
    points = [{"task": i, "label": p.label, "values": p.as_dict()} for i, p in enumerate(job.sweep)]
    run.update_manifest(sweep={"keys": list(job.sweep[0].as_dict()), "points": points,
                               "max_parallel": job.max_parallel})
    entry = run.manifest().get("tracking")
    for point in points:
        sub = RunDir(run.path / POINTS / point["label"])
        (sub.path / "logs").mkdir(parents=True, exist_ok=True)
        sub.update_manifest(name=point["label"], job_name=f"{job.job_name}[{point['label']}]", run_dir=str(sub.path),
                            in_sweep=run.name, sweep_dir=str(run.path), array_task=point["task"],
                            values=point["values"], state="created", job_ids=[],
                            tracking=tracking.point_entry(entry, sub.path))


def submit_run(run: RunDir, sbatch_args: tuple[str, ...] = (), config: str | None = None,
               tasks: tuple[int, ...] | None = None) -> Submitted:
    """sbatch ``run``'s job.sbatch (with ``sbatch_args`` before it); a refusal is recorded
    in the run directory and re-raised. ``config``: ``scontrol show config`` already asked.
    ``tasks``: a sweep's points submitted (sbatch_args has their --array), None for all."""
    from .jobs import ScriptExecutor  # submitit: imported only when submitting

    try:
        tracked = ScriptExecutor(run.path, run.script, sbatch_args).submit_script()
    except SlurmError as err:
        message = str(err)
        run.update_manifest(state="refused", refusal=message)
        left_out = excluded_nodes(run) if any(t in message for t in _TOO_BIG) else ""
        events.append(run.path, Ev.SUBMIT_REFUSED, message=message, **({"excluded": left_out} if left_out else {}))
        raise SlurmError(f"sbatch refused the job: {message} (recorded in {run.path}){_size_hint(run, message)}"
                         f"{_config_hint(message)}{_ledger_hint(run)}{_extra_hint(run, message)}") from None
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    # The controller's version at each submission: a run outlives an upgrade of its cluster.
    version = slurmversion.from_config(config) if config else slurmversion.of_cluster()
    run.update_manifest(state="submitted", job_ids=run.job_ids + [tracked.job_id], submitted_at=now,
                        **({"slurm_version": slurmversion.text(version)} if version else {}))
    size = run.array_size  # an array's tasks: eventlog follows each, waiting ones too
    events.append(run.path, Ev.SUBMITTED, job_id=tracked.job_id, **({"array_tasks": size} if size else {}),
                  **({"tasks": list(tasks)} if tasks is not None else {}))
    for point in (run.manifest().get("sweep") or {}).get("points", []):
        if tasks is None or point["task"] in tasks:
            sub = RunDir(run.path / POINTS / point["label"])
            sub.update_manifest(state="submitted", submitted_at=now,
                                job_ids=sub.job_ids + [f"{tracked.job_id}_{point['task']}"])
    return Submitted(run, tracked.job_id, tasks)


def excluded_nodes(run: RunDir) -> str:
    """The nodes the run's job leaves out (the manifest's ``exclude``), comma-separated; "" if none."""
    return ",".join(run.manifest().get("exclude") or [])


# sbatch's words for a job larger than its partition (nodes, CPUs, GPUs).
_TOO_BIG = ("Node count specification invalid", "More processors requested than permitted",
            "Requested node configuration is not available", "Invalid generic resource")


def _extra_hint(run: RunDir, message: str) -> str:
    """An option sbatch does not know, from the profile's slurm.extra: which key to fix."""
    found = re.search(r"unrecognized option '([^'=]+)", message)
    if not found:
        return ""
    extra = [line for line in run.script.read_text(errors="replace").splitlines()
             if line.startswith(f"#SBATCH {found[1]}")]
    return f"; {found[1]} comes from the profile's slurm.extra (--set slurm.extra=[...] or its file)" if extra else ""


def _config_hint(message: str) -> str:
    """sbatch found no slurm.conf (none in /etc/slurm, SLURM_CONF unset): a shell that has
    not taken the sandbox's environment, most often."""
    if "Could not establish a configuration source" not in message and "resolve_ctls_from_dns_srv" not in message:
        return ""
    set_to = os.environ.get("SLURM_CONF")
    return ("; sbatch found no Slurm configuration" + (f" (SLURM_CONF={set_to})" if set_to else " (SLURM_CONF is unset)")
            + f": {where_to_set_slurm_conf()}")


def _size_hint(run: RunDir, message: str) -> str:
    """For a job larger than its partition: what the partition has, as sinfo says."""
    if not any(words in message for words in _TOO_BIG):
        return ""
    partition = run.manifest().get("partition")
    try:
        proc = slurmquery.run_slurm(["sinfo", "-h", "-o", "%P|%D|%c|%G", *(["-p", partition] if partition else [])])
    except SlurmError:
        return ""
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]
    row = next((r for r in rows if r[0].endswith("*")), rows[0]) if rows and proc.returncode == 0 else None
    if row is None:
        return ""
    gres = "no GPUs (GRES)" if row[3] in ("(null)", "") else f"GRES {row[3]}"
    nodes, spares = run.manifest().get("nodes") or 0, run.manifest().get("spare_nodes") or 0
    asked = f"{nodes + spares} node(s) ({nodes} + {spares} spare(s): slurm.spare_nodes)" if spares else f"{nodes} node(s)"
    return (f"; partition {row[0].rstrip('*')} has {row[1]} node(s) of {row[2]} CPUs, {gres}; the job asks for "
            f"{asked} (sinfo)")


def _ledger_hint(run: RunDir) -> str:
    nodes = excluded_nodes(run)
    return (f"; the bad-node ledger excluded {nodes}: too few nodes left? `slurmtrain nodes` lists them, "
            "`slurmtrain nodes forget NODE` clears one") if nodes else ""


def submit(loaded: LoadedProfile, job: JobSpec, runs_dir: str | os.PathLike,
           cwd: str | os.PathLike | None = None, after: list | None = None) -> Submitted:
    """Prepare a run directory and sbatch its script; ``after`` (``chain.After``): the runs
    whose jobs it waits for (runs/chain.py)."""
    from . import chain

    config = slurmversion.config_text() if job.array else None  # one ask: the array's limit and the version
    _check_array_size(job, config or "")
    chain.refuse_unrecordable(after or [])
    run = prepare(loaded, job, runs_dir, cwd)
    done = submit_run(run, chain.sbatch_args(after or []), config)
    chain.record(run, after or [])
    return done
