"""The root ``slurmtrain`` command group and the one place library errors become messages.

Command modules attach themselves with ``@main.command()``/``@main.group()``; the group
imports a module when one of its commands is asked for (:data:`COMMANDS`), so ``slurmtrain
gen`` does not pay for the imports of submit, status or doctor. They must stay light to
import too: torch and submitit are imported inside the commands that need them, never at
module level, so ``slurmtrain gen`` starts fast on a login node.
"""

from __future__ import annotations

import importlib
import sys

import click

from .. import __version__
from ..errors import SlurmtrainError


# The module of slurmtrain.cli that registers each command. tests/gen/test_cli_gen.py
# checks it against what the modules register.
COMMANDS = {
    "gen": "gen", "profiles": "gen",
    "sandbox": "sandbox",
    "submit": "submit", "resubmit": "submit",
    "runs": "runs", "status": "runs", "sync": "runs", "logs": "runs", "cancel": "runs",
    "watch": "progress", "plot": "progress",
    "models": "trainer", "demo-corpus": "trainer", "export": "trainer",
    "tokenize": "data",
    "doctor": "doctor", "nodes": "doctor",
}


class _Group(click.Group):
    """Imports a command's module when the command is asked for; turns the project's own
    errors into one line on stderr and their exit status."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            # A name no module holds: load them all, so click's "did you mean" knows every command.
            wanted = [COMMANDS[cmd_name]] if cmd_name in COMMANDS else sorted(set(COMMANDS.values()))
            for module in wanted:
                importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

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
        except KeyboardInterrupt:  # Ctrl-C in `logs -f`, `watch`: quietly, as a shell reports it (not "Aborted!")
            sys.exit(130)
        except BrokenPipeError:  # `slurmtrain logs RUN | head`: the reader left
            sys.stderr.close()
            sys.exit(1)
        except OSError as err:  # a path the user gave that cannot be written or read: one line, not a traceback
            where = f"{err.filename}: " if err.filename else ""
            why = ""
            if isinstance(err, PermissionError) and err.filename:  # whose it is: a teammate's, most often
                from .. import perms
                why = f" ({perms.explain(err.filename)})"
            click.echo(f"slurmtrain: error: {where}{err.strerror or err}{why}", err=True)
            sys.exit(1)


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
