"""Survival on a real Slurm (the sandbox), the ends Slurm decides: the time limit, a
failed node, and the requeue limit. Preemption and the user's own programs are in
test_survival.py; this file runs in the other Slurm lane (tests/conftest.py). The numbers
passed to the waits are how long each takes on a quiet machine: a wait fails only when
the run stops progressing (survival_util, tests/waiting.py).
"""

from __future__ import annotations

import subprocess

import pytest

from slurmtrain.runs import classify

from survival_util import (TRAIN, assert_nothing_lost, describe, events, job_field, named, slurm, submit,
                           take_all_nodes, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm


def test_time_limit_checkpoints_requeues_and_completes(workdir, runs_dir):
    # A 1-minute job with the warning 40 s before its end. Slurm sends it on its 30-second
    # tick, 12-35 s after the start, ~9-18 s of which is start-up: 250 steps (0.17 s each
    # on a quiet machine, slower beside other work) never finish in one start. Once the first warning has
    # stopped and requeued the run, the test raises the job's limit to 10 minutes, so the
    # next start finishes: with a 1-minute limit throughout a loaded machine gave each
    # start ~5 s of steps and the test took ten starts.
    run, job = submit(runs_dir, workdir, ["--time", "1", "--set", "resilience.signal_seconds=40",
                                          "--max-requeues", "40", "--name", "timelimit"],
                      TRAIN + ["--train-steps", "250", "--save-steps", "100"])
    wait_until(run, "the first time-limit stop and requeue", lambda: named(run, "requeue"), 60, job)
    slurm("scontrol", "update", f"JobId={job}", "TimeLimit=10")
    assert wait_job_gone(job, run, 120) == "COMPLETED", describe(run)
    ends = classify.ends(run)
    assert ends[-1].kind == classify.COMPLETED, describe(run)
    assert {o.kind for o in ends[:-1]} == {classify.TIME_LIMIT}, describe(run)
    assert len(ends) >= 2 and named(run, "stopped"), describe(run)
    assert all(e["signal"] == "USR2" for e in named(run, "signal")), describe(run)
    assert_nothing_lost(run)
    assert named(run, "finished")[0]["step"] == 250


def test_node_failure_requeues_and_resumes_from_checkpoint(workdir, runs_dir):
    run, job = submit(runs_dir, workdir, ["--name", "nodefail"],
                      TRAIN + ["--train-steps", "60", "--save-steps", "20"])
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved"), 180, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    down = "stnode2"
    subprocess.run(["scontrol", "update", f"nodename={down}", "state=down", "reason=survival-test"], check=True)
    try:
        wait_until(run, "Slurm's requeue", lambda: len(named(run, "started")) >= 2
                   or job_field(job, "Restarts") == "1", 120, job)
    finally:  # the sandbox's ReturnToService=2 may have done it already
        subprocess.run(["scontrol", "update", f"nodename={down}", "state=resume"], capture_output=True)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert job_field(job, "Restarts") == "1"
    ends = classify.ends(run)
    assert [o.kind for o in ends] == [classify.NODE_FAILURE, classify.COMPLETED], describe(run)
    resumed = named(run, "resumed")
    assert resumed and resumed[0]["step"] >= saved, describe(run)
    assert named(run, "finished")[0]["step"] == 60


def test_requeue_limit_stops_with_a_status_that_says_so(workdir, runs_dir):
    run, job = submit(runs_dir, workdir, ["--partition", "low", "--max-requeues", "1", "--name", "limit"],
                      TRAIN + ["--train-steps", "2000", "--save-steps", "20"])
    for k in (1, 2):
        wait_until(run, f"progress before preemption {k}",
                   lambda: len(named(run, "started")) == k and named(run, "checkpoint_saved")
                   and events(run)[-1]["event"] == "checkpoint_saved", 240, job)
        take_all_nodes(5)
    assert wait_job_gone(job, run, 180) == "FAILED", describe(run)
    assert job_field(job, "ExitCode").startswith("3:"), describe(run)
    outcome = classify.classify(run, "FAILED", 3)
    assert outcome.kind == classify.REQUEUE_LIMIT and "max_requeues=1" in outcome.detail, outcome
    assert named(run, "requeue_limit"), describe(run)
    assert any("requeue limit reached" in line for line in classify.history(run))
