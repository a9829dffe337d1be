"""Pipeline stages composed with FSDP2, end to end on CPU (gloo, real processes under
torchrun): the loss at every step agrees with a one-stage run's for each schedule, a resume
on the same layout is exact, and a checkpoint resumes on another layout.

The model is the tiny preset with 4 blocks, deep enough for 2 stages x 2 chunks per rank
(interleaved 1F1B); the recipe is trainer_util's (20 steps, global batch 8, micro-batch 2).
"""

from __future__ import annotations

import shutil

import pytest

from trainer_util import events, losses, rank_exit_codes, records, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")

DEEP = ["--set", "model.n_layers=4"]


def pipeline(schedule: str, stages: int = 2, per_rank: int = 1) -> list[str]:
    return DEEP + ["--set", f"pipeline.stages={stages}", "--set", f"pipeline.schedule={schedule}",
                   "--set", f"pipeline.stages_per_rank={per_rank}"]


def run(work, name: str, extra: list[str], nproc: int, expect: int = 0):
    proc = train(["--recipe", str(work / "recipe.toml"), "--run-dir", name, *extra], work,
                 nproc=nproc)
    if expect == 0:
        assert proc.returncode == 0, show(proc)
    else:
        assert expect in rank_exit_codes(proc) <= {expect, -15}, show(proc)
    return work / name, proc


def assert_close(got: dict[int, float], ref: dict[int, float], steps) -> None:
    for step in steps:
        assert got[step] == pytest.approx(ref[step], rel=1e-5), (step, got[step], ref[step])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("pipeline")
    setup_run(work, steps=20)
    return work


@pytest.fixture(scope="module")
def reference(work):
    """One stage, one process: the loss every layout must reproduce."""
    run_dir, _ = run(work, "ref", DEEP, nproc=1)
    return losses(run_dir)


@pytest.fixture(scope="module")
def straight_1f1b(work):
    """2 stages x 1 data-parallel rank, 1F1B, 20 steps."""
    return run(work, "pp2-1f1b", pipeline("1f1b"), nproc=2)


def test_1f1b_on_2_stages_agrees_with_one_stage(reference, straight_1f1b):
    from slurmtrain.train.checkpoint import load_consolidated
    run_dir, proc = straight_1f1b
    assert sorted(losses(run_dir)) == list(range(1, 21))
    assert_close(losses(run_dir), reference, range(1, 21))
    assert "pipeline: stage 0 (on pipeline rank 0) holds embedding, blocks 0-1" in proc.stdout
    assert "pipeline: stage 1 (on pipeline rank 1) holds blocks 2-3, final norm and output" \
        in proc.stdout
    # micro-batches: global 8 / (micro-batch 2 x 1 data-parallel rank) = 4; 1 / (4 + 1)
    assert {r["bubble_theoretical"] for r in records(run_dir) if "loss" in r} == {0.2}
    assert all(0 <= r["bubble"] < 1 for r in records(run_dir) if "loss" in r)  # measured
    # The whole model's names, whatever the layout: export and other layouts read it.
    from slurmtrain.train.hf import export_hf, read_hf_state_dict
    args, state = load_consolidated(run_dir)
    assert "layers.3.attention.wq.weight" in state and "tok_embeddings.weight" in state
    export_hf(state, args, run_dir / "hf")  # what `slurmtrain export RUN --hf OUT` does
    back = read_hf_state_dict(run_dir / "hf", args)
    assert sorted(back) == sorted(state) and all(torch.equal(back[k], state[k]) for k in state)


def test_interleaved_1f1b_agrees_with_one_stage(work, reference):
    run_dir, proc = run(work, "pp2x2chunks", pipeline("interleaved-1f1b", per_rank=2), nproc=2)
    assert "pipeline: stage 2 (on pipeline rank 0) holds block 2" in proc.stdout
    assert_close(losses(run_dir), reference, range(1, 21))


def test_resume_on_the_same_layout_is_exact(work, straight_1f1b):
    from slurmtrain.train.checkpoint import load_consolidated
    ref_dir, _ = straight_1f1b
    run_dir, _ = run(work, "pp2-resumed", pipeline("1f1b") + ["--set", "debug.stop_at_step=10"],
                     nproc=2, expect=75)
    run(work, "pp2-resumed", pipeline("1f1b"), nproc=2)
    assert ("resumed", 10) in events(run_dir)
    assert losses(run_dir) == losses(ref_dir)  # bitwise
    _, ref = load_consolidated(ref_dir)
    _, got = load_consolidated(run_dir)
    assert sorted(got) == sorted(ref)
    for name in ref:
        assert torch.equal(got[name], ref[name]), name


def test_gpipe_2x2_agrees_and_resumes_on_other_layouts(work, reference):
    """10 steps at 2 stages x 2 data-parallel ranks (GPipe), then 10 more at 1 stage x 2
    ranks and at 2 stages x 1 rank (1F1B): a run requeued onto fewer nodes."""
    saved, _ = run(work, "pp2dp2", pipeline("gpipe") + ["--set", "debug.stop_at_step=10"],
                   nproc=4, expect=75)
    assert_close(losses(saved), reference, range(1, 11))
    for name, extra in (("to-1x2", DEEP), ("to-2x1", pipeline("1f1b"))):
        shutil.copytree(saved, work / name)
        run_dir, _ = run(work, name, extra, nproc=2)
        assert ("resumed", 10) in events(run_dir)
        assert_close(losses(run_dir), reference, range(1, 21))
