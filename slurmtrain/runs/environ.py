"""The submitting shell's environment, which sbatch gives the job (``--export=ALL``): a
digest of it kept in the manifest at submit, and what a resubmission's shell changed.

A program that reads its settings from the environment (``OUT=... STEPS=... slurmtrain
submit ...``) is resubmitted with the environment of whatever shell runs ``resubmit``: a
different output folder there silently resumes some other run's checkpoints. Only a
digest of each value is kept (sha256), never the value: the environment holds secrets.
Torch-free.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Mapping

# What differs between two shells of the same user by nature: the terminal, the session,
# the directory, Slurm's own variables inside a job, the laptop's ssh.
_VOLATILE = re.compile(r"(_|PWD|OLDPWD|SHLVL|COLUMNS|LINES|PS[1-4]|PROMPT_COMMAND|MAIL|HOSTNAME|STY|WINDOW|"
                       r"LS_COLORS|COLORTERM|GPG_TTY|KRB5CCNAME|HIST\w*|TERM\w*|SSH_\w+|XDG_\w+|TMUX\w*|DISPLAY|"
                       r"DBUS_\w+|SLURM_\w+|SLURMD_\w+|SLURMTRAIN_SLURM_TRACE|OMPI_\w+|PMI\w*|VSCODE_\w+|"
                       r"PYENV_DIR|CONDA_PROMPT_MODIFIER|"  # pyenv sets PYENV_DIR to the directory it runs in
                       r"HOME|USER|LOGNAME)")  # the same for one user; a teammate's resubmit has their own


def _kept(recorded: Mapping[str, str]) -> dict[str, str]:
    """A recorded digest without what is volatile now (a run's manifest from before a name
    joined _VOLATILE still holds it)."""
    return {n: v for n, v in recorded.items() if not _VOLATILE.fullmatch(n)}


def digest(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Each variable a job would get, by name: the first 16 hex digits of its value's sha256."""
    return {name: hashlib.sha256(value.encode(errors="replace")).hexdigest()[:16]
            for name, value in sorted(env.items()) if not _VOLATILE.fullmatch(name)}


def drift(recorded: Mapping[str, str] | None, env: Mapping[str, str] = os.environ) -> str | None:
    """What this shell changed of the environment recorded at submit, in words; None when
    nothing did (or nothing was recorded: a run submitted before the digest was kept)."""
    if not recorded:
        return None
    recorded, now = _kept(recorded), digest(env)
    unset = sorted(recorded.keys() - now.keys())
    changed = sorted(n for n in recorded.keys() & now.keys() if recorded[n] != now[n])
    new = sorted(now.keys() - recorded.keys())
    parts = [f"{what}: {_names(names)}" for what, names in (("unset here", unset), ("changed", changed),
                                                             ("new here", new)) if names]
    return "; ".join(parts) or None


def unset_here(recorded: Mapping[str, str] | None, env: Mapping[str, str] = os.environ) -> list[str]:
    """The variables the run was submitted with that this shell does not set."""
    return sorted(_kept(recorded or {}).keys() - digest(env).keys())


def refuse_unset(run_name: str, recorded: Mapping[str, str] | None) -> str | None:
    """Words refusing a resubmission from a shell without variables the run was submitted
    with (a program that reads its settings from them would run without, silently); None
    where none is missing."""
    unset = unset_here(recorded)
    if not unset:
        return None
    return (f"run {run_name} was submitted with {_names(unset)} set, which this shell does not set, and sbatch "
            "gives the job this shell's environment: a program that reads them would run without them; "
            "resubmit from a shell that sets them, or add --this-environment to go on without them")


def _names(names: list[str], most: int = 8) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
