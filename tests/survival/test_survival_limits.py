"""Survival on a real Slurm (the sandbox), the ends Slurm decides: a failed node and the
requeue limit. The time limit is tests/e2e/test_slurm_versions.py's (both Slurm versions,
the supervisor's whole path with a program of its own) and test_user_programs.py's (a
Hugging Face Trainer); the built-in trainer meets a time limit's signal as any stop
(tests/stop, the preemption tests). Preemption and the user's own programs are in
test_survival.py; this file runs in the other Slurm lane (tests/conftest.py). The numbers
passed to the waits are how long each takes on a quiet machine: a wait fails only when
the run stops progressing (survival_util, tests/waiting.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmtrain.runs import classify

from survival_util import (TRAIN, describe, events, job_field, kill_machine, named, rank_pids, run_cli, slurm,
                           submit, take_all_nodes, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm


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


def test_a_lost_node_the_partition_cannot_spare_is_waited_for_and_the_run_completes(sandbox, workdir, runs_dir):
    """The 2-node sandbox: the node that is not the batch host dies mid-run (its slurmd, step
    daemon and ranks killed). The supervisor finds it dead; a requeue without it could never
    start (2 nodes asked, 1 left: Slurm would hold the job PENDING for ever, BadConstraints),
    so the requeue keeps it within reach and says so. Once the node is back in service the
    job starts on both nodes again and completes from the newest save."""
    from slurmtrain import sandbox as lib

    run, job = submit(runs_dir, workdir, ["--name", "waits-for"], TRAIN + ["--train-steps", "60", "--save-steps", "20"])
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved") and len(rank_pids(run)) == 2, 180, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    host = job_field(job, "BatchHost")
    node = next(n for n in ("stnode1", "stnode2") if n != host)
    kill_machine(node, Path(sandbox.state_dir))
    try:
        wait_until(run, "the requeue", lambda: named(run, "requeue"), 180, job)
    finally:
        lib.revive()  # the node's slurmd again: Slurm takes it back in service
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    [requeue] = named(run, "requeue")
    assert (requeue["waits_for"], requeue["exclude"]) == (node, ""), requeue
    log = "".join(p.read_text() for p in sorted((run / "logs").glob("job-*.out")))
    assert f"not leaving out {node}: partition debug has 2 node(s) for a job of 2" in log, log[-3000:]
    assert job_field(job, "Restarts") == "1" and (job_field(job, "ExcNodeList") or "(null)") == "(null)"
    assert [e["nodes"] for e in named(run, "started")] == ["stnode1 stnode2"] * 2, describe(run)
    assert named(run, "resumed")[0]["step"] >= saved, describe(run)
    status = run_cli(["status", str(run)], cwd=workdir).stdout
    assert f"requeueing, to start when {node} is back in service (too few nodes without it)" in status, status


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


def _saved_in_start(run: Path, k: int) -> bool:
    """A checkpoint since the run's ``k``-th start."""
    evs, starts = events(run), 0
    for e in evs:
        starts += e.get("event") == "started"
        if starts == k and e.get("event") == "checkpoint_saved":
            return True
    return False


def test_time_limit_stops_after_new_checkpoints_do_not_count_toward_the_limit(workdir, runs_dir):
    """max_requeues = 1 and the time limit's warning twice (USR2 to the batch shell, as Slurm
    sends it), each after a checkpoint newer than any before: a run longer than its time limit.
    Both requeues go through and neither counts; the run completes."""
    run, job = submit(runs_dir, workdir, ["--max-requeues", "1", "--name", "long-run"],
                      TRAIN + ["--train-steps", "120", "--save-steps", "20"])
    for k in (1, 2):
        wait_until(run, f"a checkpoint in start {k}", lambda: len(named(run, "started")) == k
                   and _saved_in_start(run, k), 240, job)
        slurm("scancel", "--batch", "--signal=USR2", job)
        wait_until(run, f"requeue {k}", lambda: len(named(run, "requeue")) == k, 120, job)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)
    assert [e.get("counted") for e in named(run, "requeue")] == [False, False], describe(run)
    assert job_field(job, "Restarts") == "2" and not named(run, "requeue_limit")
    assert named(run, "finished")[0]["step"] == 120
    log = "".join(p.read_text() for p in sorted((run / "logs").glob("job-*.out")))
    assert log.count("not counted toward max_requeues: this start saved a newer checkpoint") == 2, log[-3000:]
    status = run_cli(["status", str(run)], cwd=workdir).stdout
    assert ("requeues   2 (0 counted of max_requeues 1; 2 after starts that saved a newer checkpoint, not counted)"
            in status), status
    history = "\n".join(classify.history(run))
    assert history.count("requeueing (not counted toward max_requeues: the start saved a newer checkpoint)") == 2, history
