"""No host synchronisation inside a training step (issue 13, point 2).

A real trainer runs 7 steps (log steps 3, 6 and 7) under a counting hook around the calls
that on a GPU make the CPU wait for the device (``Tensor.item``, ``.cpu``, ``.tolist``,
``float(t)``, ``bool(t)``..., see ``slurmtrain.train.syncwatch``): one process (the
unsharded path), and two gloo ranks (FSDP2, the stop flag's all-reduce). Non-log steps,
stop check included, must reach none of them from slurmtrain code; log steps do (the loss
and grad norm are read there), which shows the hook sees them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from trainer_util import one_rank, setup_run  # noqa: E402

STEPS, LOG_STEPS = 7, 3


def watched_train(base: Path, world) -> tuple[int, dict[int, list[str]], list[str]]:
    """Build and train in ``base`` (recipe already there); returns the exit code, the sync
    sites each step reached (its log call left out) and those of the log calls."""
    from slurmtrain.train import trainer as trainer_mod
    from slurmtrain.recipes.recipe import load_recipe_sources
    from slurmtrain.train.syncwatch import SyncWatch

    recipe, sources = load_recipe_sources(str(base / "recipe.toml"), [
        ("train.log_steps", LOG_STEPS, "test"), ("train.eval_steps", 0, "test")])
    t = trainer_mod.build(recipe, sources, world, base / "run", None)
    (base / "run").mkdir(exist_ok=True)
    starts: list[int] = []
    log_calls: list[str] = []
    with SyncWatch() as watch:
        real_step, real_log, real_save = t._train_step, t._log, t.ckpt.save

        def step_hook():
            # Everything from this step's start to the next one's counts for this step
            # (the stop check after the step included), except its log call.
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
    steps = {i + 1: watch.calls[a:b] for i, (a, b) in enumerate(zip(starts, ends))}
    return exit_code, steps, log_calls


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    # Rank 0 looks for a stop file every step: the path is set (and absent) so that the
    # check runs as it does under Slurm.
    tmp = tmp_path_factory.mktemp("sync")
    with one_rank(tmp) as world:
        setup_run(tmp, steps=STEPS)
        return watched_train(tmp, world)


def check(exit_code: int, step_calls: dict, log_calls: list[str]) -> None:
    assert exit_code == 0
    assert [int(s) for s in step_calls] == list(range(1, STEPS + 1))
    syncing = {s: c for s, c in step_calls.items() if c}
    assert syncing == {}, f"steps that read a tensor back to the host: {syncing}"
    # The log steps read loss and grad norm: if the hook saw nothing there, it could not
    # see a sync in a step either.
    assert any("trainer.py" in c and "Tensor.item" in c for c in log_calls), log_calls


@pytest.mark.slow
def test_one_process_steps_do_not_sync(watched_run):
    check(*watched_run)


def _rank(rank: int, base: str) -> None:
    import torch
    import torch.distributed as dist

    from slurmtrain.train.distributed import close_world, init_world

    torch.set_num_threads(1)
    base_path = Path(base)
    os.environ["SLURMTRAIN_STOP_FILE"] = str(base_path / ".stop-absent")
    dist.init_process_group("gloo", init_method=f"file://{base_path / 'store'}", rank=rank,
                            world_size=2)
    os.chdir(base_path)
    world = init_world()  # takes the group made above
    try:
        result = watched_train(base_path, world)
    finally:
        close_world()
    (base_path / f"rank{rank}.json").write_text(json.dumps(result))


@pytest.mark.slow
def test_two_rank_fsdp_steps_do_not_sync(tmp_path):
    """FSDP2 over two gloo ranks, and the stop flag all-reduced every step: the flag is a
    CPU tensor (syncwatch knows that read; test_stop.py checks it stays on the CPU)."""
    import torch.multiprocessing as mp

    setup_run(tmp_path, steps=STEPS)
    ctx = mp.start_processes(_rank, args=(str(tmp_path),), nprocs=2, join=False,
                             start_method="spawn")
    while not ctx.join(timeout=120):
        pass
    for rank in (0, 1):
        check(*json.loads((tmp_path / f"rank{rank}.json").read_text()))
