"""A pipelined run of the built-in trainer on the sandbox: 2 nodes, one pipeline stage
each, submitted with `slurmtrain submit`, preempted, requeued, and finished with the same
loss and weights as a run never interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import waiting
from slurmtrain.runs import classify

from survival_util import (TRAIN, describe, named, submit, take_all_nodes, wait_job_gone,
                           wait_until)

pytestmark = pytest.mark.slurm


def final_loss(run_dir) -> float:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if '"loss"' in line][-1]


def test_two_stage_pipeline_survives_preemption(workdir, runs_dir):
    steps = 60
    train = TRAIN + ["--train-steps", str(steps), "--save-steps", "20",
                     "--set", "pipeline.stages=2"]
    ref_dir = runs_dir / "uninterrupted"
    ref = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                            *train[1:], "--run-dir", str(ref_dir)], cwd=workdir,
                           env={**os.environ, "OMP_NUM_THREADS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run, job = submit(runs_dir, workdir, ["--partition", "low", "--name", "pipeline"], train)
    wait_until(run, "training progress before preemption",
               lambda: named(run, "checkpoint_saved")
               and named(run, "checkpoint_saved")[-1]["step"] < steps, 240, job)
    take_all_nodes(5)
    wait_until(run, "requeue after preemption", lambda: named(run, "requeue"), 120, job)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    kinds = [o.kind for o in classify.ends(run)]
    assert kinds == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    assert named(run, "resumed") and named(run, "finished")[0]["step"] == steps

    _, err = waiting.communicate(ref, "the uninterrupted reference run", [ref_dir])
    assert ref.returncode == 0, err[-3000:]
    assert final_loss(run) == final_loss(ref_dir)
    from slurmtrain.train.engines import load_consolidated
    _, got = load_consolidated(run)
    _, want = load_consolidated(ref_dir)
    assert got.keys() == want.keys()
    different = [k for k in want if not got[k].equal(want[k])]
    assert not different, f"parameters differ from the uninterrupted run: {different}"
