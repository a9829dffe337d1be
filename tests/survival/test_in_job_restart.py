"""Restarts inside the job (resilience.restarts_in_job) on the sandbox. A rank of the
built-in trainer is SIGKILLed after a checkpoint (a GPU or NCCL error looks the same to
slurmtrain), or SIGSTOPped (a hang: its peers wait in a collective for ever); the
supervisor launches again in the same allocation, the trainer resumes from its newest
checkpoint, and the run ends with the weights of an uninterrupted run (one reference run,
started once beside the two jobs)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from slurmtrain.runs import classify

from survival_util import (TRAIN, Reference, describe, job_field, named, rank_of, rank_pids, submit, wait_job_gone,
                           wait_until)

pytestmark = pytest.mark.slurm


def trainer_ranks(run: Path) -> list[int]:
    """The pids of the run's trainer processes (not the torchrun agents)."""
    return rank_pids(run, "slurmtrain.train")


STEPS = 60
TRAIN_60 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "10"]


@pytest.fixture(scope="module")
def reference(workdir):
    ref = Reference(workdir, TRAIN_60, "in-job-restart-reference")
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def test_a_killed_rank_is_restarted_in_the_job_and_ends_bitwise(workdir, runs_dir, reference):
    steps, train = STEPS, TRAIN_60
    run, job = submit(runs_dir, workdir, ["--name", "rankkill"], train)
    wait_until(run, "a checkpoint, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(trainer_ranks(run)) == 2, 240, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    os.kill(trainer_ranks(run)[-1], signal.SIGKILL)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    assert job_field(job, "Restarts") == "0"  # never went back to the queue
    assert len(named(run, "started")) == 1 and [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    resumed = named(run, "resumed")
    assert resumed and resumed[-1]["step"] >= saved, describe(run)
    assert named(run, "finished")[0]["step"] == steps
    assert [o.kind for o in classify.ends(run)] == [classify.COMPLETED], describe(run)
    assert any("started again in the job" in line for line in classify.history(run))
    reference.assert_same_weights(run)


def test_a_stopped_rank_is_a_hang_named_with_every_stack_and_restarted_in_the_job(workdir, runs_dir, reference):
    """SIGSTOP: the rank neither fails nor reports; its peer blocks in the next all-reduce.
    The hang is seen within hang_timeout + 15 s of the last heartbeat, every rank's stack is
    recorded (py-spy, through srun on the other node), the stopped rank and its node are
    named, and the launch starts again in the job."""
    run, job = submit(runs_dir, workdir, ["--name", "hang", "--set", "resilience.hang_timeout=20"], TRAIN_60)
    wait_until(run, "a checkpoint, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(trainer_ranks(run)) == 2, 240, job)
    victim = trainer_ranks(run)[-1]
    rank, node = rank_of(victim)
    os.kill(victim, signal.SIGSTOP)
    try:
        wait_until(run, "the hang to be seen", lambda: named(run, "hang"), 60, job)
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    [hang] = named(run, "hang")
    assert hang["seconds"] <= 20 + 15, hang  # counted from the last heartbeat, by the supervisor itself
    assert rank in hang["ranks"].split() and node in hang["nodes"].split(), (hang, rank, node)
    stacks = sorted(Path(hang["stacks"]).iterdir())
    assert [p.name.split("-")[0] for p in stacks] == ["rank0", "rank1"], stacks
    for p in stacks:
        assert "Thread" in p.read_text(), f"{p.name}: {p.read_text()}"
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert job_field(job, "Restarts") == "0"
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert named(run, "finished")[0]["step"] == STEPS
    assert any(line.endswith(f"stacks in {hang['stacks']}") for line in classify.history(run))
    reference.assert_same_weights(run)


def test_the_same_error_at_the_same_step_is_a_program_error_not_restarted_in_a_loop(workdir, runs_dir):
    """An exception at step 25 on every start: the first failure follows a new checkpoint
    (step 20), so the launch starts again once; the same error at the same step again is
    the program's: "failed" with its error line, no second restart, no requeue."""
    run, job = submit(runs_dir, workdir, ["--name", "progerror"],
                      TRAIN + ["--train-steps", "60", "--save-steps", "10", "--set", "debug.fail_at_step=25"])
    assert wait_job_gone(job, run, 300) == "FAILED", describe(run)
    assert job_field(job, "Restarts") == "0"
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert [e["step"] for e in named(run, "resumed")] == [20]
    assert [e["step"] for e in named(run, "train_error")] == [25, 25]
    assert not named(run, "requeue")
    [end] = classify.ends(run)
    assert end.kind == classify.USER_ERROR, describe(run)
    assert "debug.fail_at_step = 25: failing on purpose, at step 25" in end.detail and "not requeued" in end.detail
