"""Restarts inside the job (resilience.restarts_in_job) on the sandbox: a rank of the
built-in trainer is SIGKILLed after a checkpoint (a GPU or NCCL error looks the same to
slurmtrain); the supervisor launches again in the same allocation, the trainer resumes
from its newest checkpoint, and the run ends with the weights of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain.runs import classify

from survival_util import TRAIN, assert_same_weights, describe, job_field, named, submit, wait_job_gone, wait_until

pytestmark = pytest.mark.slurm


def trainer_ranks(run: Path) -> list[int]:
    """The pids of the run's trainer processes (not the torchrun agents), on every node of
    the sandbox (one machine)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"slurmtrain.train" not in argv or b"torch.distributed.run" in argv:
                continue
            if f"SLURMTRAIN_RUN_DIR={run}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return sorted(found)


def test_a_killed_rank_is_restarted_in_the_job_and_ends_bitwise(workdir, runs_dir):
    steps = 60
    train = TRAIN + ["--train-steps", str(steps), "--save-steps", "10"]
    ref_dir = runs_dir / "uninterrupted"
    ref = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                            *train[1:], "--run-dir", str(ref_dir)], cwd=workdir,
                           env={**os.environ, "OMP_NUM_THREADS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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

    assert_same_weights(run, ref, ref_dir)
