"""The root ``slurmtrain`` command group and the one place library errors become messages.

Command modules attach themselves with ``@main.command()``/``@main.group()``. They must
stay light to import: torch and submitit are imported inside the commands that need
them, never at module level, so ``slurmtrain gen`` starts fast on a login node.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import SlurmtrainError


class _Group(click.Group):
    """Turns the project's own errors into one line on stderr and their exit status."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SlurmtrainError as err:
            click.echo(f"slurmtrain: error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmtrain")
def main() -> None:
    """Multi-node LLM training on Slurm from one command.

    Render a job script from a cluster profile (gen), submit and track it
    (submit, runs, status, logs, cancel), try it on a one-machine Slurm
    cluster (sandbox), and train Llama-family models with the built-in
    trainer (python -m slurmtrain.train).
    """
