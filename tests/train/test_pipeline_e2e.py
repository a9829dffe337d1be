"""Pipeline stages composed with FSDP2, end to end on CPU (gloo, real processes with
torchrun's environment): the loss at every step agrees with a one-stage run's for each schedule at 2 stages
x 1 and x 2 data-parallel ranks, a resume on the same layout is exact, and a checkpoint
resumes on another layout. All of them share one one-stage reference run.

The model is the tiny preset with 4 blocks, deep enough for 2 stages x 2 chunks per rank
(interleaved 1F1B); the recipe is trainer_util's (20 steps, global batch 8, micro-batch 2,
evaluation at steps 10 and 20) with 3 evaluation batches: 6 held-out sequences per rank,
which the 4 micro-batches of a 2-stage x 1-rank step do not divide (the pipeline pads them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainer_util import events, losses, rank_exit_codes, records, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")

DEEP = ["--set", "model.n_layers=4", "--set", "train.eval_batches=3"]


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


def eval_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["eval_loss"] for r in records(run_dir) if "eval_loss" in r}


def assert_measured_bubble(run_dir: Path) -> None:
    steps = [r for r in records(run_dir) if "loss" in r]
    assert steps and all(0 <= r["bubble"] < 1 for r in steps), [r.get("bubble") for r in steps]


def copy_at_step(src: Path, dst: Path, step: int) -> Path:
    """``src`` as it stood after ``step``: its checkpoint of that step, its metrics and events
    up to it (a run whose job ended there)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("hf"))
    for d in (dst / "checkpoints").glob("step_*"):
        if int(d.name.split("_")[1]) > step:
            shutil.rmtree(d)
    for name in ("metrics.jsonl", "events.jsonl"):
        kept = [line for line in (dst / name).read_text().splitlines()
                if json.loads(line).get("step", 0) <= step]
        (dst / name).write_text("".join(line + "\n" for line in kept))
    return dst


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("pipeline")
    setup_run(work, steps=20)
    return work


@pytest.fixture(scope="module")
def reference_dir(work):
    """One stage, one process: the loss every layout must reproduce."""
    run_dir, _ = run(work, "ref", DEEP, nproc=1)
    return run_dir


@pytest.fixture(scope="module")
def reference(reference_dir):
    return losses(reference_dir)


@pytest.fixture(scope="module")
def straight_1f1b(work):
    """2 stages x 1 data-parallel rank, 1F1B, 20 steps."""
    return run(work, "pp2-1f1b", pipeline("1f1b"), nproc=2)


def test_1f1b_on_2_stages_agrees_with_one_stage(reference, reference_dir, straight_1f1b):
    from slurmtrain.train.engines import load_consolidated
    run_dir, proc = straight_1f1b
    assert sorted(losses(run_dir)) == list(range(1, 21))
    assert_close(losses(run_dir), reference, range(1, 21))
    # Evaluation on 6 held-out sequences in 4 micro-batches: padded to 8, and the padding
    # does not count: the same eval loss as one stage's on the same 6 sequences.
    assert "evaluation: 6 held-out sequences per data-parallel rank padded to 8" in proc.stdout
    assert sorted(eval_losses(run_dir)) == [10, 20]
    assert_close(eval_losses(run_dir), eval_losses(reference_dir), (10, 20))
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


@pytest.mark.parametrize("schedule, per_rank", [("gpipe", 1), ("interleaved-1f1b", 2)])
def test_other_schedules_on_2_stages_agree_with_one_stage(work, reference, reference_dir,
                                                         schedule, per_rank):
    """2 processes; interleaved: 2 stages x 2 chunks per rank, one block each."""
    run_dir, proc = run(work, f"pp2-{schedule}", pipeline(schedule, per_rank=per_rank), nproc=2)
    if per_rank == 2:
        assert "pipeline: stage 2 (on pipeline rank 0) holds block 2" in proc.stdout
    assert_close(losses(run_dir), reference, range(1, 21))
    assert_close(eval_losses(run_dir), eval_losses(reference_dir), (10, 20))
    assert_measured_bubble(run_dir)


@pytest.mark.parametrize("schedule, per_rank", [("1f1b", 1), ("interleaved-1f1b", 2)])
def test_schedules_on_2_stages_x_2_ranks_agree_with_one_stage(work, reference, schedule,
                                                              per_rank):
    """4 processes (2 micro-batches of 2 per data-parallel rank); GPipe at 2 x 2: below."""
    run_dir, _ = run(work, f"pp2dp2-{schedule}", pipeline(schedule, per_rank=per_rank), nproc=4)
    assert_close(losses(run_dir), reference, range(1, 21))
    assert_measured_bubble(run_dir)


def test_init_ckpt_on_2_stages_agrees_with_one_stage(work, reference_dir, reference):
    """--init-ckpt from a Hugging Face checkpoint (the reference run's final weights): 2
    stages x 2 data-parallel ranks (each stage sharded by FSDP2) start from the weights one
    stage starts from."""
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.hf import export_hf
    args, state = load_consolidated(reference_dir)
    export_hf(state, args, work / "ref-hf")
    init = ["--init-ckpt", str(work / "ref-hf"), "--set", "train.steps=2"]
    one, _ = run(work, "init-1", DEEP + init, nproc=1)
    two, proc = run(work, "init-pp2dp2", pipeline("1f1b") + init, nproc=4)
    assert "initial weights from" in proc.stdout
    assert_close(losses(two), losses(one), (1, 2))
    assert losses(two)[1] < 0.9 * reference[1]  # trained weights, not a fresh init


def test_resume_on_the_same_layout_is_exact(work, straight_1f1b):
    from slurmtrain.train.engines import load_consolidated
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
    """20 steps at 2 stages x 2 data-parallel ranks (GPipe), a checkpoint kept at step 10;
    from that checkpoint, 10 more at 1 stage x 2 ranks and at 2 stages x 1 rank (1F1B): a
    run requeued onto fewer nodes."""
    saved, _ = run(work, "pp2dp2", pipeline("gpipe") + ["--set", "train.save_steps=10"],
                   nproc=4)
    assert_close(losses(saved), reference, range(1, 21))
    assert (saved / "checkpoints" / "step_10").is_dir()
    for name, extra in (("to-1x2", DEEP), ("to-2x1", pipeline("1f1b"))):
        copy_at_step(saved, work / name, 10)
        run_dir, _ = run(work, name, extra, nproc=2)
        assert ("resumed", 10) in events(run_dir)
        assert_close(losses(run_dir), reference, range(1, 21))
