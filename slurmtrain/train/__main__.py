"""``python -m slurmtrain.train``: train a Llama model from a recipe with FSDP2.

One process (CPU or one GPU)::

    python -m slurmtrain.train --recipe tiny-demo

One node, 8 GPUs::

    torchrun --nproc-per-node 8 -m slurmtrain.train --recipe llama3-8b --data-path corpus/

Several nodes: ``slurmtrain submit`` renders a job script that starts torchrun on each.

Exit status: 0 finished; 75 stopped after a checkpoint (preemption; requeue and it resumes
by itself); 2 bad input (one line on stderr from rank 0); 1 the training itself failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from .. import stop as early_stop
from ..errors import SlurmtrainError
from ..recipes.trainer_args import parse_args, recipe_sets
from ..eventlog import Ev

if __name__ == "__main__":
    # Before torch loads (seconds): a stop signal in that window sets a flag the training
    # loop finds at its first step boundary, instead of ending the process (workers get
    # the signal's default action) before any checkpoint could be written.
    early_stop.install()

def default_run_dir(recipe: str) -> Path:
    env = os.environ.get("SLURMTRAIN_RUN_DIR")
    return Path(env) if env else Path("runs") / f"train-{Path(recipe).stem}"


def main(argv: list[str] | None = None) -> int:
    from .distributed import env_rank
    args = parse_args(argv)
    rank0 = env_rank() == 0
    logging.basicConfig(level=logging.INFO if rank0 else logging.WARNING,
                        format="%(asctime)s [rank%(rank)s] %(levelname)s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stdout, force=True)
    _tag_records(env_rank())
    try:
        return _run(args)
    except SlurmtrainError as err:
        if rank0:  # every rank finds the same problem; one line is enough
            print(f"slurmtrain: error: {err}", file=sys.stderr, flush=True)
        else:
            # torchrun ends every rank as soon as one exits: let rank 0 be that one, so its
            # message is printed once rather than cut off (torchrun stops this rank right
            # after). Still here later: rank 0 did not share the problem, so say it here.
            # SIGTERM ends this rank again (the early stop handler only sets a flag); one that
            # came already was torchrun's, after rank 0 left with its message.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if early_stop.reason() == "SIGTERM":
                return err.exit_code
            time.sleep(10)
            print(f"slurmtrain: error: rank {env_rank()}: {err}", file=sys.stderr, flush=True)
        return err.exit_code


def _run(args: argparse.Namespace) -> int:
    from ..recipes.recipe import load_recipe_sources, notes
    from .distributed import env_rank
    recipe, sources = load_recipe_sources(args.recipe, recipe_sets(args))
    if env_rank() == 0:  # said by submit too; here for a trainer started by hand
        for note in notes(recipe, sources):
            print(f"slurmtrain: warning: {note}", file=sys.stderr, flush=True)
    run_dir = (Path(args.run_dir) if args.run_dir else default_run_dir(args.recipe)).absolute()

    from .. import events
    from . import trainer
    from .distributed import close_world, env_world_size, init_world
    from .tracking import close_trackers
    trainer.preflight(recipe, sources, env_world_size())
    _checkpoint_home(run_dir, recipe.train.checkpoint_dir, make=env_rank() == 0)
    _check_writable(run_dir)
    world = init_world()
    clean = False
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        t = trainer.build(recipe, sources, world, run_dir, args.init_ckpt)
        try:
            code = t.train()
        except Exception as err:
            if world.rank == 0:  # the traceback follows on stderr; the event says where
                events.append(run_dir, Ev.TRAIN_ERROR, step=t.step + 1,
                              error=f"{type(err).__name__}: {err}")
            raise
        clean = True
        return code
    finally:
        close_trackers()  # W&B writes the end of its run here: the exit below skips atexit
        # After an error, no barrier: the peers may sit in a collective or a pipeline
        # send that will never match it, and the run would hang until gloo's timeout.
        close_world(together=clean)


def _check_writable(run_dir: Path) -> None:
    """The checkpoints folder can be made and written, known before the first step: found
    at the first save, it was a traceback after all the steps up to it. Nothing is made
    here (a start that fails leaves nothing a corrected one would trip over)."""
    from ..errors import UsageError
    from .checkpoint import checkpoints_dir
    folder = checkpoints_dir(run_dir)
    there = next((d for d in (folder, *folder.parents) if d.exists()), None)
    why = None
    if there is not None and not there.is_dir():
        why = f"{there} is a file, not a folder"
    elif there is not None and not os.access(there, os.W_OK | os.X_OK):
        why = f"{there} is not writable here"
    if why:
        raise UsageError(f"{folder}: the checkpoints cannot be written there ({why}); give --run-dir a folder "
                         "this job can write")


def checkpoint_home(run_dir: Path, where: str) -> Path:
    """train.checkpoint_dir's folder for the run: <checkpoint_dir>/<run name> (a sweep's
    point: <sweep>-<point>, its run directory being <sweep>/points/<point>)."""
    from ..errors import UsageError
    name = f"{run_dir.parent.parent.name}-{run_dir.name}" if run_dir.parent.name == "points" else run_dir.name
    expanded = os.path.expanduser(os.path.expandvars(where))
    if "$" in expanded:
        raise UsageError(f"train.checkpoint_dir = {where!r}: {expanded} names a variable that is not set on "
                         "this node")
    if not os.path.isabs(expanded):
        raise UsageError(f"train.checkpoint_dir = {where!r}: give an absolute path (or one from $VARIABLE or ~): "
                         "the trainer may start in another folder than you submitted from")
    return Path(expanded) / name


def _checkpoint_home(run_dir: Path, where: str, make: bool) -> None:
    """train.checkpoint_dir: the run directory's ``checkpoints`` a link to the run's folder
    there, so that resume, pruning, status and export find the checkpoints where they always
    look. ``make``: rank 0 makes the folder and the link."""
    from ..errors import UsageError
    from .checkpoint import checkpoints_dir
    if not where:
        return
    home, link = checkpoint_home(run_dir, where), checkpoints_dir(run_dir)
    _check_home(run_dir, where, home, link)
    if not make or link.is_symlink():
        return
    owner = home / ".slurmtrain-run"  # two runs sent to one folder would prune each other's saves
    try:
        home.mkdir(parents=True, exist_ok=True)
        if owner.exists() and owner.read_text().strip() != str(run_dir):
            raise UsageError(f"train.checkpoint_dir: {home} holds the checkpoints of {owner.read_text().strip()}; "
                             "give this run another name or another train.checkpoint_dir")
        owner.write_text(f"{run_dir}\n")
        run_dir.mkdir(parents=True, exist_ok=True)
        if link.is_dir():
            link.rmdir()  # empty (checked)
        link.symlink_to(home, target_is_directory=True)
    except OSError as err:
        raise UsageError(f"train.checkpoint_dir: cannot make {home} and link it from {link}: "
                         f"{err.strerror or err}") from None


def _check_home(run_dir: Path, where: str, home: Path, link: Path) -> None:
    """Refused before the first step: the run's checkpoints somewhere else already (moving
    them is the user's call: they may be terabytes), their folder gone (a scratch purge: the
    run would train again from step 0, silently), or a folder that would hold the link itself."""
    from ..errors import UsageError
    key = f"train.checkpoint_dir = {where!r}" + (f" (here {home.parent})" if where != str(home.parent) else "")
    if home.resolve() == run_dir.resolve() or home.resolve() in run_dir.resolve().parents:
        raise UsageError(f"{key}: the run's checkpoint folder {home} would be the run directory or hold it; "
                         "give checkpoints a folder of their own")
    if link.is_symlink():
        if link.resolve() != home.resolve():
            raise UsageError(f"{link} links to {os.readlink(link)}, but {key} puts this run's checkpoints in "
                             f"{home}: move them there and remove the link, or set it back as it was")
        if not link.exists():
            from .. import eventlog, events
            saved = eventlog.best_saved_step(events.read(run_dir))
            raise UsageError(f"{link} links to {home}, which is gone (a scratch file system's purge?)"
                             + (f", though this run saved checkpoints up to step {saved}" if saved is not None else "")
                             + f": restore them there, or remove the link {link} to train this run again from step 0")
    elif link.is_dir() and any(link.iterdir()):
        raise UsageError(f"{link} holds this run's checkpoints, but {key} puts them in {home}: move them there "
                         f"(and remove the empty {link}), or leave train.checkpoint_dir out")


def _tag_records(rank: int) -> None:
    old = logging.getLogRecordFactory()

    def factory(*a, **kw):
        record = old(*a, **kw)
        record.rank = rank
        return record
    logging.setLogRecordFactory(factory)


if __name__ == "__main__":
    code = main()
    # Everything is saved and the group is closed. Skip the interpreter's teardown: C++
    # destructors of gloo/DCP threads racing it were seen to abort ("terminate called
    # without an active exception") after a finished run, turning success into exit -6.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
