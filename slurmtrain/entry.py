"""The ``slurmtrain`` command. A command for a login node (``--remote``, or
SLURMTRAIN_REMOTE) goes there before the command line's modules load: from a laptop, a
call costs Python's start-up and the login node's answer, not click, jinja2 and the
profiles here (BENCHMARKS.md, "From a laptop"). Everything else, and ``plot`` (which needs
its parser), is the click group of :mod:`slurmtrain.cli`."""

from __future__ import annotations

import os
import sys


def _remote_of(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the remote, the command and its arguments) from the options before the command; no
    remote when another option comes first (--help, --version: the group's own)."""
    spec, i = os.environ.get("SLURMTRAIN_REMOTE") or None, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "--remote" and i + 1 < len(argv):
            spec, i = argv[i + 1], i + 2
        elif argv[i].startswith("--remote="):
            spec, i = argv[i].split("=", 1)[1], i + 1
        else:
            return None, argv
    return spec or None, argv[i:]


def main() -> None:
    spec, rest = _remote_of(sys.argv[1:])
    if spec and rest and rest[0] != "plot":
        from . import remote
        from .errors import SlurmtrainError
        try:
            sys.exit(remote.forward(spec, rest))
        except SlurmtrainError as err:
            print(f"slurmtrain: error: {err}", file=sys.stderr)
            sys.exit(err.exit_code)
    from .cli import main as cli
    cli()
