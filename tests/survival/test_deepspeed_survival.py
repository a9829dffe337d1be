"""The DeepSpeed engine under the deepspeed launcher on the sandbox: 2 nodes, preempted
once, requeued, resumed, completed with the same final loss as an uninterrupted run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import waiting
from slurmtrain.runs import classify

from survival_util import TRAIN, describe, events, named, submit, take_all_nodes, wait_job_gone, wait_until

pytestmark = pytest.mark.slurm
pytest.importorskip("deepspeed")

DS = ["--set", "train.engine=deepspeed", "--set", "deepspeed.config=zero2"]


def test_deepspeed_launcher_run_survives_preemption(workdir, runs_dir):
    steps = 60  # preempted after the checkpoint at 20
    train = TRAIN + DS + ["--train-steps", str(steps), "--save-steps", "20"]
    ref_dir = runs_dir / "uninterrupted"
    ref = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node", "2", *train[1:], "--run-dir", str(ref_dir)],
                           cwd=workdir, env={**os.environ, "OMP_NUM_THREADS": "1"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run, job = submit(runs_dir, workdir, ["--partition", "low", "--name", "ds-preempt",
                                          "--nodes", "2", "--launcher", "deepspeed",
                                          "--set", "launch.rdzv_port=29820"], train)
    wait_until(run, "training progress before preemption",
               lambda: named(run, "checkpoint_saved")
               and events(run)[-1]["event"] == "checkpoint_saved", 240, job)
    take_all_nodes(5)
    wait_until(run, "requeue after preemption", lambda: named(run, "requeue"), 120, job)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    kinds = [o.kind for o in classify.ends(run)]
    assert kinds == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    assert named(run, "stopped") and named(run, "resumed"), describe(run)
    assert named(run, "finished")[0]["step"] == steps

    _, err = waiting.communicate(ref, "the uninterrupted reference run", [ref_dir])
    assert ref.returncode == 0, err[-3000:]
    import json
    last = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (ref_dir / "metrics.jsonl").read_text().splitlines()]
    loss = {r["step"]: r["loss"] for r in last if "loss" in r}
    ref_loss = {r["step"]: r["loss"] for r in want if "loss" in r}
    assert loss[steps] == ref_loss[steps], (loss, ref_loss)
