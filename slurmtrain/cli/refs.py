"""How every run command names a run: a RUN argument and ``--runs-dir``.

status, logs, cancel, resubmit, watch, plot and export all resolve RUN through one
function, :func:`slurmtrain.runs.rundir.resolve`, so each accepts the same forms.
"""

from __future__ import annotations

import click

RUN_FORMS = ("RUN is a run directory, a run name under --runs-dir or a unique prefix of one, "
             "a job id (an array task's too: ARRAY_TASK as squeue shows it), or a job name (its latest run).")

runs_dir_option = click.option(
    "--runs-dir", default="runs", show_default=True, envvar="SLURMTRAIN_RUNS_DIR",
    type=click.Path(file_okay=False),
    help="Directory holding the run directories (env: SLURMTRAIN_RUNS_DIR).")


def resolve_run(ref: str, runs_dir: str):
    """The run directory RUN names (UsageError, exit 2, when none or several do)."""
    from ..runs import rundir

    return rundir.resolve(ref, runs_dir)
