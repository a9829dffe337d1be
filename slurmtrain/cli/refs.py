"""How every run command names a run: a RUN argument and ``--runs-dir``.

status, logs, cancel, resubmit, watch, plot and export all resolve RUN through one
function, :func:`slurmtrain.runs.rundir.resolve`, so each accepts the same forms.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

RUN_FORMS = ("RUN is a run directory, a run name under --runs-dir or a unique prefix of one, "
             "a job id (an array task's too: ARRAY_TASK as squeue shows it), or a job name (its latest run).")

runs_dir_option = click.option(
    "--runs-dir", default="runs", show_default=True, envvar="SLURMTRAIN_RUNS_DIR",
    type=click.Path(file_okay=False),
    help="Directory holding the run directories (env: SLURMTRAIN_RUNS_DIR).")


def resolve_run(ref: str | None, runs_dir: str):
    """The run directory RUN names (UsageError, exit 2, when none or several do); no RUN:
    the latest run under ``runs_dir``."""
    from ..errors import UsageError
    from ..runs import rundir

    if ref is None:
        found = rundir.list_runs(runs_dir)
        if not found and _runs_dir_defaulted():  # from another directory: the latest submitted anywhere
            from .. import recent
            elsewhere = [rundir.RunDir(p) for p in recent.known()]
            if elsewhere:
                chosen = _latest_training(elsewhere)
                click.echo(f"slurmtrain: no runs under {os.path.abspath(runs_dir)}: the latest you submitted, "
                           f"from {chosen.path.parent}", err=True)
                return chosen
        if not found:
            raise UsageError(f"no runs under {os.path.abspath(runs_dir)}; name a run or a job id, or give "
                             "--runs-dir")
        return _latest_training(found)
    return rundir.resolve(ref, runs_dir)


def _runs_dir_defaulted() -> bool:
    """--runs-dir neither given nor set by SLURMTRAIN_RUNS_DIR: ./runs by default only."""
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("runs_dir") if ctx is not None else None
    return source in (None, click.core.ParameterSource.DEFAULT)


def _latest_training(found):
    """`doctor` keeps its checks' jobs as runs too, and a job sbatch refused is kept as a
    run to say why: the latest run meant is a training that was submitted; in a runs
    directory a team shares, one of this user's (the latest is a teammate's as often)."""
    from .. import perms
    from ..doctor.run import DOCTOR_JOB_NAME
    trained = [r for r in found if r.manifest().get("job_name") != DOCTOR_JOB_NAME
               and r.manifest().get("state") != "refused"] or found
    me = perms.me()
    return ([r for r in trained if perms.owner(r.path) == me] or trained)[-1]


def after_options(f):
    """--after/--after-ok/--after-any RUN (repeatable): a chain (runs/chain.py)."""
    decorators = [
        click.option("--after", "after", multiple=True, metavar="RUN",
                     help="Start once RUN's job has completed (Slurm's afterok; an array: all its tasks). "
                          "Repeatable: after all of them. A RUN that fails cancels this job instead of "
                          "leaving it pending."),
        click.option("--after-ok", "after_ok", multiple=True, metavar="RUN", help="The same as --after."),
        click.option("--after-any", "after_any", multiple=True, metavar="RUN",
                     help="Start once RUN's job has ended, however it ended (Slurm's afterany)."),
    ]
    for d in reversed(decorators):
        f = d(f)
    return f


def chain_of(runs_dir: str, after: tuple[str, ...], after_ok: tuple[str, ...], after_any: tuple[str, ...]):
    """The runs to wait for (UsageError, exit 2, naming the option and RUN when one cannot be
    waited for); notes for runs that already ended go to stderr."""
    from ..runs import chain, track

    pairs = ([("after", r) for r in after] + [("after_ok", r) for r in after_ok]
             + [("after_any", r) for r in after_any])
    if not pairs:
        return []
    afters, notes = chain.resolve(pairs, runs_dir, lambda run: track.statuses([run], with_events=True)[0])
    for note in notes:
        click.echo(note, err=True)
    return afters


def named_again(found, ref: str | None, runs_dir: str) -> str:
    """`` RUN`` for a printed hint's next command about ``found``: as the user named it, else
    its name under ``runs_dir``, else its path (the latest run found elsewhere, a point)."""
    if ref is not None:
        return f" {shlex.quote(ref)}"
    if found.path.parent.resolve() == Path(runs_dir).resolve():
        return f" {shlex.quote(found.name)}"
    return f" {shlex.quote(str(found.path))}"


def follow_up(runs_dir: str) -> tuple[str, str]:
    """How a printed hint writes the next command: (``slurmtrain``, `` --runs-dir DIR`` where
    not the default); on a login node that a laptop's ``--remote NAME`` reached (the remote
    sets SLURMTRAIN_VIA_REMOTE), ``slurmtrain --remote NAME`` and no runs directory: the
    laptop's commands find the remote's own."""
    via = os.environ.get("SLURMTRAIN_VIA_REMOTE")
    if via:
        return f"slurmtrain --remote {shlex.quote(via)}", ""
    return "slurmtrain", "" if runs_dir == "runs" else f" --runs-dir {shlex.quote(str(runs_dir))}"
