"""Check a job of the built-in trainer before it is queued (``gen`` and ``submit``).

A job that cannot start (an unknown preset or key, a global batch that does not divide
over the profile's ranks, a corpus, tokenizer or ``--init-ckpt`` missing where the job
will start) would otherwise wait for an allocation and then fail on its nodes. These are
the trainer's own checks (:mod:`.recipe`, :mod:`.inputs`), made with what the profile
says about the job: its world size and the directory it starts in. Torch-free.

Paths are not checked for a job that runs in a container (the program sees the
container's filesystem) or that names a variable only the job's environment defines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, UsageError
from ..profile import LoadedProfile
from ..render import JobSpec

if TYPE_CHECKING:  # argparse itself loads with the trainer's parser, for a trainer job only
    import argparse

TRAINER = "slurmtrain.train"


def check_job(loaded: LoadedProfile, job: JobSpec, submit_dir: Path | None = None,
              files_later: bool = False) -> list[str]:
    """Raise ConfigError/UsageError (exit 2) if ``job`` runs the built-in trainer and would
    fail at its start; do nothing for any other program. ``files_later``: the job waits for
    other runs (a chain), which may write its corpus or checkpoint: their paths are not
    checked here, the trainer checks them when it starts. Returns the recipe's warnings
    (:func:`.recipe.notes`), each once."""
    args = trainer_args(job)
    if args is None:
        return []
    # Here, not at the top: `gen` of any other program imports none of the recipe's checks.
    from .inputs import check_files, check_pipeline, expand, is_relative
    from .recipe import load_recipe_sources, notes
    p = loaded.profile
    start, where = start_dir(loaded, (submit_dir or Path.cwd()).absolute())
    env = {**os.environ, **p.env.vars}
    ref = args.recipe
    if _is_path(ref) and is_relative(ref, env):
        if start is None:
            return []  # a recipe file inside the container: only the job can read it
        ref = str(expand(ref, start, env))
    from ..render import procs_per_node  # the one definition of the job's processes per node
    from .trainer_args import recipe_sets
    procs = procs_per_node(p)
    said: list[str] = []
    for point in job.sweep or (None,):  # every point of a sweep is a recipe of its own
        recipe, sources = load_recipe_sources(ref, recipe_sets(args) + _point_sets(point))
        said += [n for n in notes(recipe, sources) if n not in said]
        _check_checkpoint_dir(recipe.train.checkpoint_dir, sources.of("train.checkpoint_dir"), env)
        try:
            check_pipeline(recipe, sources, p.slurm.nodes * procs,
                           f"{p.slurm.nodes} nodes x {procs} processes per node, from profile {loaded.name}")
        except ConfigError as err:  # a rule across keys: the point's values may be the ones at fault
            if point is None:
                raise
            values = " ".join(f"{k}={v}" for k, v in point.values)
            raise ConfigError(f"sweep point {values}", "", str(err)) from None
    if args.run_dir:
        said.append(f"--run-dir {args.run_dir}: the trainer writes its checkpoints, metrics and events there, not in "
                    "the run's directory, so `status`, `watch`, `plot`, `goodput` and `export` of this run see none "
                    "of them; leave --run-dir out and the job gives the trainer the run's directory")
    if start is None or files_later:
        return said
    check_files(recipe, sources, start, where, env)
    if args.init_ckpt and _knowable(args.init_ckpt, env):
        ckpt = expand(args.init_ckpt, start, env)
        if not ckpt.is_dir():
            hint = f" ({where})" if is_relative(args.init_ckpt, env) else ""
            raise ConfigError("--init-ckpt", "", f"no such folder: {ckpt}{hint}")
    return said


def _check_checkpoint_dir(where: str, source: str, env: dict[str, str]) -> None:
    """A relative train.checkpoint_dir is refused here, not at the job's start (the trainer's
    own check: it may start in another folder than the submit's)."""
    from .inputs import is_relative
    if where and _knowable(where, env) and is_relative(where, env):
        raise ConfigError(source, "train.checkpoint_dir", f"{where!r} is relative: give an absolute path (or one "
                          "from $VARIABLE or ~, as the node sees it), where the checkpoints go")


def _point_sets(point) -> list[tuple[str, object, str]]:
    """A sweep point's values as ``--set`` triples, named by the option that gave them."""
    from ..schema import parse_set
    if point is None:
        return []
    return [(*parse_set(f"{key}={value}"), f"{point.origin}: {key} = {value}" if point.origin else
             f"--sweep {key}={value}") for key, value in point.values]


def trainer_args(job: JobSpec) -> argparse.Namespace | None:
    """The trainer's options when ``job`` runs it (``--recipe``, or a command with
    ``-m slurmtrain.train``); None for any other program."""
    if not job.command:
        argv = ["--recipe", job.recipe, *(w for kv in job.recipe_sets for w in ("--set", kv))] if job.recipe else None
    else:
        words = list(job.command)
        argv = next((words[i + 2:] for i in range(len(words) - 1)
                     if words[i] in ("-m", "--module") and words[i + 1] == TRAINER), None)
    if argv is None:
        return None
    from .trainer_args import build_parser
    parser = build_parser()

    def refuse(message: str):  # argparse would print its usage and exit
        raise UsageError(f"{TRAINER} in the command: {message} (see python -m {TRAINER} --help)")
    parser.error = refuse
    return parser.parse_args(argv)


def start_dir(loaded: LoadedProfile, submit_dir: Path) -> tuple[Path | None, str]:
    """Where the job starts, as seen from here, and words saying so; None where this
    machine cannot see it (a container, a variable only the job defines)."""
    p = loaded.profile
    if p.container.runtime != "none":
        return None, ""
    workdir = p.launch.workdir
    if not workdir:
        return submit_dir, f"relative to {submit_dir}, the submit directory, where the job starts"
    env = {**os.environ, **p.env.vars}
    from .inputs import expand
    if not _knowable(workdir, env):
        return None, ""
    path = expand(workdir, submit_dir, env)
    return path, f"relative to {path}, where the job starts: launch.workdir of profile {loaded.name}"


def _is_path(ref: str) -> bool:
    """As :func:`.recipe.recipe_path` tells a recipe file from a built-in recipe's name."""
    return ref.endswith(".toml") or os.sep in ref


def _knowable(path: str, env: dict[str, str]) -> bool:
    from .inputs import knowable
    return knowable(path, env)
