"""``slurmtrain --remote NAME COMMAND ...``: COMMAND run on a login node (slurmtrain.remote).

``plot`` writes its picture there and brings it back here: it needs the command's own
parser. Every other command goes through :func:`slurmtrain.remote.forward`, which
``slurmtrain.entry`` calls before this package loads.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click

from ..errors import UsageError


def forward(spec: str, argv: list[str], plot_command: click.Command) -> int:
    """ARGV (a command and its arguments) run on the login node SPEC; its exit status.
    ``plot_command``: the local ``plot``, whose parser finds the picture's path."""
    from .. import remote as rm
    if argv and argv[0] == "plot":
        return _plot(rm.Ssh(rm.load(spec)), argv, plot_command)
    return rm.forward(spec, argv)


def _plot(ssh, argv: list[str], plot_command: click.Command) -> int:
    """The picture is written in the remote's directory, copied here, and removed there."""
    from .. import remote as rm
    ctx = plot_command.make_context("plot", list(argv[1:]), resilient_parsing=True)
    out = ctx.params.get("out")
    ssh.connect()
    if out is None or {"-h", "--help"} & set(argv):
        return ssh.run(rm.remote_script(ssh.remote, argv))
    there = f".slurmtrain-plot-{uuid.uuid4().hex}.png"
    done = ssh.capture(rm.remote_script(ssh.remote, [*argv, "-o", there]))  # the last -o wins
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        return done.returncode
    d = rm.rpath(ssh.remote.dir)
    got = ssh.capture(f"cd -- {d} && cat -- {there} && rm -f -- {there}", binary=True)
    if got.returncode != 0 or not got.stdout:
        raise UsageError(f"cannot bring the picture back from {ssh.remote.where}: "
                         f"{got.stderr.decode(errors='replace').strip()}")
    Path(out).write_bytes(got.stdout)
    sys.stdout.write(done.stdout.replace(there, str(out)))
    return 0
