"""Survival on a real Slurm (the sandbox): a preemption during a background save, user error, programs of the
user's own (one of them with a 40 s save, preempted together), the start-up watchdog,
and a run Slurm does not requeue. A preemption resumed bitwise is in
test_four_faults_e2e.py, test_sweeps.py and the container lane. Time limit, node failure and the requeue limit are in
test_survival_limits.py (the other Slurm lane: tests/conftest.py).

Jobs go through `slurmtrain submit` exactly as a user's would; the tests read the run's
events.jsonl, Slurm's own record of the job, and the checkpoints. Slurm holds a requeued
job for about two minutes before it may start again; the Slurm lane releases it after
5 s (tests/slurm_hold.py) so that each test takes a minute or two. The
numbers passed to the waits are how long each takes on a quiet machine: a wait fails
only when the run stops progressing (survival_util, tests/waiting.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from slurmtrain.runs import classify

from survival_util import (HERE, TORCHRUN, TRAIN, Reference, assert_nothing_lost, cancel, describe, job_field, named,
                           run_cli, slurm, submit, take_all_nodes, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm


def saving_in_background(run: Path, step: int) -> bool:
    """The trainer's slow background save of ``step`` (debug.slow_save_at_step) has begun."""
    mark = f"debug.slow_save_at_step={step}"
    return any(mark in log.read_text(errors="replace") for log in (run / "logs").glob("*.out"))


def test_a_preemption_during_a_background_save_waits_for_it_and_resumes_bitwise(workdir, runs_dir):
    # The save of step 20 is in the background for 15 s (a slow file system); the
    # preemption comes then: the trainer waits for it to be complete, saves where it stopped
    # and leaves; the next start resumes there.
    train = TRAIN + ["--train-steps", "40", "--save-steps", "10"]
    reference = Reference(workdir, train, "background-save-reference")
    run, job = submit(runs_dir, workdir, ["--partition", "low", "--name", "bgsave"],
                      train + ["--set", "debug.slow_save_at_step=20"])
    wait_until(run, "the background save of step 20", lambda: saving_in_background(run, 20), 240, job)
    take_all_nodes(5)
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    # Rank 0's log of the first start, in order: the stop came while step 20 was being
    # written; that save was complete, then the step it stopped at.
    stopped = named(run, "stopped")[0]["step"]
    [said] = [log.read_text().split("stop requested")[1] for log in (run / "logs").glob("*.out")
              if "[rank0] INFO stop requested" in log.read_text()]
    saved = re.findall(r"\[rank0\] INFO checkpoint saved: \S+/(step_\d+) ", said)
    assert saved[:2] == ["step_20", f"step_{stopped}"], said
    saves = {e["step"]: e for e in named(run, "checkpoint_saved")}
    assert saves[20]["seconds"] >= 15 and saves[20]["stall"] < 5, saves[20]  # in the background
    assert [o.kind for o in classify.ends(run)] == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    assert_nothing_lost(run)
    reference.assert_same_weights(run)


def test_user_error_fails_without_requeue(workdir, runs_dir):
    run, job = submit(runs_dir, workdir, ["--name", "usererror"],
                      TRAIN + ["--train-steps", "50", "--set", "debug.fail_at_step=5"])
    assert wait_job_gone(job, run, 180) == "FAILED", describe(run)
    assert job_field(job, "Restarts") == "0"
    assert not named(run, "requeue")
    outcome = classify.classify(run, "FAILED", int(job_field(job, "ExitCode").split(":")[0]))
    assert outcome.kind == classify.USER_ERROR, outcome
    assert "debug.fail_at_step = 5" in outcome.detail and "not requeued" in outcome.detail, outcome
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir).stdout
    assert "FAILED" in status, status


@pytest.fixture(scope="module")
def foreign_preempted(_sandbox_session, workdir):
    """Two programs of the user's own (foreign_train.py) in `low`, preempted by one job
    on `high` once both are stepping: a quick save, and a save of 40 s that must fit the
    GraceTime of 60 (torchrun gives its workers the profile's stop window, not its own
    30 s). Each runs to its end: (run directory, Slurm's final state, steps) by name."""
    runs_dir = workdir / "runs" / "foreign-preempted"
    runs_dir.mkdir(parents=True)
    steps = {"foreign": 60, "slowsave": 60}
    runs = {
        "foreign": submit(runs_dir, workdir, [*TORCHRUN, "--partition", "low", "--name", "foreign"],
                          ["python3", str(HERE / "foreign_train.py"), "--steps", str(steps["foreign"])]),
        "slowsave": submit(runs_dir, workdir, [*TORCHRUN, "--partition", "low", "--name", "slowsave",
                                               "--set", "launch.rdzv_port=29763"],
                           ["python3", str(HERE / "foreign_train.py"), "--steps", str(steps["slowsave"]),
                            "--save-seconds", "40"]),
    }
    try:
        # Stepping, so their handlers are in place: a program killed while it starts has
        # saved nothing and is not requeued (docs/survival.md), not what these tests are about.
        for name, (run, job) in runs.items():
            wait_until(run, f"{name}: a few steps", lambda: (run / "foreign_steps").exists()
                       and int((run / "foreign_steps").read_text() or 0) >= 3, 180, job)
        take_all_nodes(5)
        states = {name: wait_job_gone(job, run, 420) for name, (run, job) in runs.items()}
        yield {name: (run, states[name], steps[name]) for name, (run, _) in runs.items()}
    finally:
        for _, job in runs.values():
            cancel(job)


def _assert_foreign_resumed(run, state: str, steps: int) -> list[dict]:
    assert state == "COMPLETED", describe(run)
    stopped, resumed = named(run, "stopped"), named(run, "resumed")
    assert stopped and resumed and resumed[0]["step"] == stopped[0]["step"], describe(run)
    finished = [e for e in named(run, "finished") if "sum" in e]
    assert finished and finished[0]["sum"] == steps * (steps + 1) // 2, describe(run)
    assert [o.kind for o in classify.ends(run)] == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    return stopped


def test_foreign_command_checkpoints_and_continues_across_preemption(foreign_preempted):
    run, state, steps = foreign_preempted["foreign"]
    _assert_foreign_resumed(run, state, steps)
    assert (run / "foreign_state.json").exists()


def test_a_checkpoint_of_40_s_survives_preemption_under_torchrun(foreign_preempted):
    run, state, steps = foreign_preempted["slowsave"]
    stopped = _assert_foreign_resumed(run, state, steps)
    assert stopped[0]["save_seconds"] >= 40, describe(run)


def test_watchdog_names_the_node_that_never_joined(workdir, runs_dir):
    hang = '[ "$SLURMD_NODENAME" != stnode2 ] || sleep 1000'
    run, job = submit(runs_dir, workdir, ["--name", "watchdog", "--set", "resilience.rendezvous_timeout=20",
                                          "--set", f"launch.setup=['{hang}']"],
                      TRAIN + ["--train-steps", "50"])
    try:
        state = wait_job_gone(job, run, 120)
    finally:
        cancel(job)
    assert state == "FAILED" and job_field(job, "ExitCode").startswith("4:"), describe(run)
    assert [e["missing"] for e in named(run, "watchdog_timeout")] == ["stnode2"], describe(run)
    log = (run / "logs" / f"job-{job}.out").read_text()
    assert "node(s) stnode2 did not join within 20 s" in log, log
    started = named(run, "started")[0]["time"]
    assert named(run, "watchdog_timeout")[0]["time"] - started < 60, describe(run)
    assert classify.classify(run, "FAILED", 4).kind == classify.WATCHDOG


def test_resubmit_watch_continues_a_run_slurm_does_not_requeue(workdir, runs_dir):
    # Requeue disabled: the stop ends the job (its `scontrol requeue` is refused) and
    # `slurmtrain resubmit --watch` continues the run in new jobs until it completes.
    run, job = submit(runs_dir, workdir, ["--set", "resilience.requeue=false", "--name", "resubmit"],
                      TRAIN + ["--train-steps", "80", "--save-steps", "20"])
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved"), 180)
    slurm("scancel", "--batch", "--signal=USR2", job)  # Slurm's warning signal, by hand: a stop asked for
    wait_until(run, "the refused requeue", lambda: named(run, "requeue_failed"), 120)
    assert wait_job_gone(job, run, 60) == "COMPLETED", describe(run)
    assert "someone asked for the stop" in classify.classify(run).detail, describe(run)

    # In the background, as a user who logs out would (the foreground watch: the stranded-job tests).
    from slurmtrain.runs import watcher
    from slurmtrain.runs.rundir import RunDir
    started = run_cli(["resubmit", "--runs-dir", str(runs_dir), "--watch", "--detach", "--poll", "2", run.name],
                      cwd=workdir)
    assert started.stdout.startswith(f"watching run {run.name} in the background: pid "), started.stdout
    wait_until(run, "the watch's end", lambda: watcher.holder(RunDir(run)) is None, 300)
    said = (run / watcher.LOG).read_text()
    assert f"run {run.name}: completed: the command finished (exit 0)" in said.splitlines()[-1], \
        f"{said}\n{describe(run)}"
    resubmitted = named(run, "resubmitted")
    assert [e["previous_job_id"] for e in resubmitted][:1] == [job], describe(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["job_ids"] == [job] + [e["job_id"] for e in resubmitted]
    assert_nothing_lost(run)
    assert named(run, "finished")[0]["step"] == 80
    again = run_cli(["resubmit", "--runs-dir", str(runs_dir), run.name], cwd=workdir, check=False)
    assert again.returncode == 2 and "nothing to continue" in again.stderr, again.stderr
