"""Restarts inside the job (resilience.restarts_in_job) on the sandbox: what is not
restarted. The restarts themselves, a rank SIGKILLed after a checkpoint (a GPU or NCCL error
looks the same to slurmtrain) or SIGSTOPped (a hang: its peers wait in a collective for
ever), each ending with the weights of an uninterrupted run, are shown for the built-in
trainer by test_four_faults_e2e.py (both in one run) and by the container lane
(tests/containers/test_apptainer.py: each in a job of its own, the hang's stacks checked,
py-spy through srun on the other node), and for a Hugging Face Trainer script by
test_hf_in_job_restart.py."""

from __future__ import annotations

import pytest

from slurmtrain.runs import classify

from survival_util import TRAIN, describe, job_field, named, submit, wait_job_gone

pytestmark = pytest.mark.slurm


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
