"""No host synchronisation inside a training step (issue 13, point 2).

A real one-process trainer runs 7 steps (log steps 3, 6 and 7) under a counting hook
around the calls that on a GPU make the CPU wait for the device (``Tensor.item``,
``.cpu``, ``.tolist``, ``float(t)``, ``bool(t)``..., see ``slurmtrain.train.syncwatch``).
Non-log steps, stop check included, must reach none of them from slurmtrain code; log
steps do (the loss and grad norm are read there), which shows the hook sees them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from trainer_util import setup_run  # noqa: E402

STEPS, LOG_STEPS = 7, 3


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    import os

    from slurmtrain.train import trainer as trainer_mod
    from slurmtrain.train.distributed import close_world, init_world
    from slurmtrain.train.recipe import load_recipe_sources
    from slurmtrain.train.syncwatch import SyncWatch

    tmp = tmp_path_factory.mktemp("sync")
    saved_env = {k: os.environ.pop(k, None) for k in ("RANK", "WORLD_SIZE")}
    # Rank 0 looks for a stop file every step: the path is set (and absent) so that the
    # check runs as it does under Slurm.
    os.environ["SLURMTRAIN_STOP_FILE"] = str(tmp / ".stop-absent")
    cwd = os.getcwd()
    os.chdir(tmp)
    world = init_world()
    log_calls: list[str] = []
    try:
        recipe_path = setup_run(tmp, steps=STEPS)
        recipe, sources = load_recipe_sources(str(recipe_path), [
            ("train.log_steps", LOG_STEPS, "test"), ("train.eval_steps", 0, "test")])
        t = trainer_mod.build(recipe, sources, world, tmp / "run", None)
        (tmp / "run").mkdir(exist_ok=True)
        with SyncWatch() as watch:
            real_step, real_log, real_save = t._train_step, t._log, t.ckpt.save

            starts: list[int] = []

            def step_hook():
                # Everything from this step's start to the next one's counts for this
                # step (the stop check after the step included), except its log call.
                starts.append(len(watch.calls))
                watch.armed = True
                return real_step()

            def log_hook(*args, **kwargs):
                before = len(watch.calls)
                real_log(*args, **kwargs)
                log_calls.extend(watch.calls[before:])
                del watch.calls[before:]

            def save_hook(step):
                watch.armed = False  # the final checkpoint is not a step
                real_save(step)

            t._train_step, t._log, t.ckpt.save = step_hook, log_hook, save_hook
            exit_code = t.train()
        ends = starts[1:] + [len(watch.calls)]
        step_calls = {i + 1: watch.calls[a:b] for i, (a, b) in enumerate(zip(starts, ends))}
    finally:
        close_world()
        os.chdir(cwd)
        os.environ.pop("SLURMTRAIN_STOP_FILE", None)
        for k, v in saved_env.items():
            if v is not None:
                os.environ[k] = v
    return exit_code, step_calls, log_calls


@pytest.mark.slow
def test_non_log_steps_do_not_sync(watched_run):
    exit_code, step_calls, _ = watched_run
    assert exit_code == 0
    assert list(step_calls) == list(range(1, STEPS + 1))
    syncing = {s: c for s, c in step_calls.items() if c}
    assert syncing == {}, f"steps that read a tensor back to the host: {syncing}"


@pytest.mark.slow
def test_the_hook_sees_the_log_steps_reads(watched_run):
    """The log steps read loss and grad norm: if the hook saw nothing there, it could not
    see a sync in a step either."""
    _, _, log_calls = watched_run
    assert any("trainer.py" in c and "Tensor.item" in c for c in log_calls), log_calls
