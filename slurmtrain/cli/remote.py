"""``slurmtrain --remote NAME COMMAND ...``: COMMAND run on a login node (slurmtrain.remote).

Most commands go as they are; ``submit`` first sends the code (the current directory) and
runs in its snapshot; ``plot`` writes its picture there and brings it back here.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click

from ..errors import UsageError

HERE_ONLY = {"sandbox": "the sandbox is a cluster on this machine"}
FOLLOWING = {"logs", "watch"}  # a terminal for them, so that Ctrl-C ends them there too


def forward(spec: str, argv: list[str], plot_command: click.Command) -> int:
    """ARGV (a command and its arguments) run on the login node SPEC; its exit status.
    ``plot_command``: the local ``plot``, whose parser finds the picture's path."""
    from .. import remote as rm
    r = rm.load(spec)
    command = argv[0] if argv else ""
    if command in HERE_ONLY:
        raise UsageError(f"{command} does not take --remote: {HERE_ONLY[command]}")
    ssh = rm.Ssh(r)
    if command == "plot":
        return _plot(ssh, argv, plot_command)
    code = None
    if command == "submit" and not {"-h", "--help"} & set(argv):
        up = rm.plan_upload(Path.cwd(), r)
        ssh.connect()
        rm.upload(ssh, up)  # said after it is whole: a failure is then its own line only
        click.echo(f"slurmtrain: code: {up.source} ({up.files} files, {rm.size_text(up.size)}) "
                   f"-> {r.where}:{r.dir}/{up.path}", err=True)
        code = up.path
    ssh.connect()
    tty = command in FOLLOWING and sys.stdout.isatty() and sys.stdin.isatty()
    return ssh.run(rm.remote_script(r, argv, code=code), tty=tty)


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
