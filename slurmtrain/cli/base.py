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
            if ctx.params.get("remote"):
                from .remote import forward
                # Click 8 keeps the command's name apart from its arguments; 9 will not.
                rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
                if rest:
                    sys.exit(forward(ctx.params["remote"], rest, self.get_command(ctx, "plot")))
            return super().invoke(ctx)
        except SlurmtrainError as err:
            click.echo(f"slurmtrain: error: {err}", err=True)
            sys.exit(err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmtrain")
@click.option("--remote", metavar="NAME|[USER@]HOST[:PORT]", envvar="SLURMTRAIN_REMOTE",
              help="Run the command on this login node over ssh: a remote named in "
                   "~/.config/slurmtrain/remotes.toml, or a host (env: SLURMTRAIN_REMOTE).")
def main(remote: str | None) -> None:
    """Multi-node LLM training on Slurm from one command.

    Render a job script from a cluster profile (gen), submit and track it
    (submit, runs, status, logs, cancel), try it on a one-machine Slurm
    cluster (sandbox), and train Llama-family models with the built-in
    trainer (python -m slurmtrain.train). From a laptop, --remote runs each
    command on the cluster's login node over ssh (docs/remote.md).
    """
