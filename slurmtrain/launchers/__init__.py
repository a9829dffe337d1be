"""Launchers: how a job starts its program on the nodes. One module each (its name, how
many Slurm tasks a node runs, the words it execs, the shape of its srun, what it needs
in its environment), and this registry, which everything else takes the list from: the
profile's check of ``launch.launcher``, the CLI's choices, render.py and the templates,
the job's supervisor (job/step.py) and doctor.

Adding a fifth: its module (a :class:`Launcher`), a template fragment if its job script
needs lines of its own (``script_fragment``), and its line in :data:`LAUNCHERS`
(tests/gen/test_launcher_registry.py adds one from a test).
"""

from __future__ import annotations

import difflib

from .base import Launcher, Words  # noqa: F401 (what a launcher module builds)


def _builtin() -> dict[str, Launcher]:
    from . import deepspeed, srun, srun_loop, torchrun
    # In the order the profile's error message and the CLI's help list them.
    return {m.LAUNCHER.name: m.LAUNCHER for m in (torchrun, srun_loop, deepspeed, srun)}


LAUNCHERS: dict[str, Launcher] = _builtin()


def names() -> tuple[str, ...]:
    return tuple(LAUNCHERS)


def get(name: str) -> Launcher:
    return LAUNCHERS[name]


def check(value: object) -> str | None:
    """The profile's check of a launcher's name (``launch.launcher``, ``allowed_launchers``)."""
    if value in LAUNCHERS:
        return None
    found = f"string {value!r}" if isinstance(value, str) else f"{type(value).__name__} {value!r}"
    close = difflib.get_close_matches(str(value), list(LAUNCHERS), n=1, cutoff=0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f"expected one of {', '.join(repr(n) for n in LAUNCHERS)}, got {found}{hint}"


def doc() -> str:
    """The profile key's documentation: each launcher in a few words."""
    return "; ".join(f"{n}: {spec.doc}" for n, spec in LAUNCHERS.items())
