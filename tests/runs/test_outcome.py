"""`slurmtrain status` and `runs` say how each run ended (classify), from recorded events.

``recorded/events/*.jsonl``: user_error, preempted_then_completed, requeue_limit and
watchdog are events.jsonl files the sandbox wrote (tests/survival); cancel_requested,
scancel and requeue_refused are written by hand in the same format (cancel_requested:
`slurmtrain cancel` with the script's stop handling trying a requeue afterwards; scancel:
the script's ``cancelled`` event, written on a SIGTERM that is not a time limit).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.runs import classify, track
from slurmtrain.runs.states import JobState

from runs_fakes import RECORDED, recorded_run


def scontrol(job_id: str, state: str, exit_code: int, restarts: int = 0) -> str:
    return (f"JobId={job_id} JobName=x JobState={state} Reason=None Requeue=1 Restarts={restarts} "
            f"ExitCode={exit_code}:0 RunTime=00:00:07 NodeList=stnode[1-2] NumNodes=2 Power=")


def slurm_forgets(fake_slurm) -> None:
    """Slurm no longer knows any job (and submitit's watcher forgets what it cached)."""
    from slurmtrain.runs import jobs

    fake_slurm(scontrol="", sacct=None)
    jobs.TrackedJob.watcher = jobs.Watcher()


def status(root, name: str) -> str:
    result = CliRunner().invoke(main, ["status", "--runs-dir", str(root), name])
    assert result.exit_code == 0, result.output
    return result.output


def test_user_error_shows_exit_code_and_outcome(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "user_error")
    fake_slurm(scontrol=scontrol(job, "FAILED", 1), sacct=None)
    out = status(tmp_path, run.name)
    assert "exit code  1" in out, out
    outcome = next(line for line in out.splitlines() if line.startswith("outcome"))
    assert "user error: the command failed with exit status 1" in outcome, out
    assert "RuntimeError: debug.fail_at_step = 5" in outcome and "at step 5" in outcome, out
    assert "training error at step 5" in out  # the history, in words
    # Slurm has forgotten the job: the same, from events.jsonl
    slurm_forgets(fake_slurm)
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.source, st.outcome) == (JobState.FAILED, 1, "events.jsonl",
                                                               classify.USER_ERROR)


def test_preempted_then_completed_history(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "preempted_then_completed")
    fake_slurm(scontrol=scontrol(job, "COMPLETED", 0, restarts=1), sacct=None)
    out = status(tmp_path, run.name)
    history = out[out.index("\nhistory\n"):].splitlines()[2:]
    said = [line.split("  ", 2)[-1].strip() for line in history]
    assert said == [
        "submitted as job 121",
        "job 121 started on stnode1 stnode2",
        "stopped after step 16 (checkpoint saved)",
        "preempted by Slurm (the tasks got SIGTERM)",
        "requeueing; the tasks ended with exit status 1",
        "job 121 started on stnode1 stnode2 (restart 1)",
        "resumed from the checkpoint of step 16",
        "finished at step 60",
        "the job finished (exit 0)",
    ], out
    assert "outcome    completed: the command finished (exit 0)" in out, out
    assert [o.kind for o in classify.ends(run.path)] == [classify.PREEMPTED, classify.COMPLETED]
    result = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), "--json", run.name])
    got = json.loads(result.output)
    assert got["outcome"] == classify.COMPLETED and len(got["events"]) == 10  # raw events kept


def test_requeue_limit(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "requeue_limit")
    fake_slurm(scontrol="", sacct=None)  # forgotten: from the events alone
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.restarts) == (JobState.FAILED, 3, 1)
    assert st.outcome == classify.REQUEUE_LIMIT and "max_requeues=1" in st.outcome_detail
    out = status(tmp_path, run.name)
    assert "outcome    requeue limit: requeue limit reached (max_requeues=1" in out, out
    assert "requeue limit reached (max_requeues=1): not requeued" in out  # history
    assert f"next       `slurmtrain resubmit {run.name} --runs-dir {tmp_path}` continues it from its last " \
           "checkpoint" in out, out


def test_a_clean_stop_at_the_requeue_limit_shows_no_program_error(tmp_path, fake_slurm):
    """Its ranks exited 75 (saved, then stopped) and torchrun reported that as a failure: no
    "program error", no forty lines of torchrun's report of each node."""
    run, job = recorded_run(tmp_path, "requeue_limit")
    fake_slurm(scontrol=scontrol(job, "FAILED", 3), sacct=None)
    report = (RECORDED / "torchrun_failure.txt").read_text().replace("exitcode  : 3", "exitcode  : 75")
    (run.path / "logs").mkdir(exist_ok=True)
    for node in ("stnode1", "stnode2"):
        (run.path / "logs" / f"{job}-{node}.out").write_text(f"checkpoint saved: step_53\n{report}")
    (run.path / "logs" / f"job-{job}.out").write_text(
        f"srun: error: stnode1: task 0: Exited with exit code 75\nsrun: error: stnode2: task 1: Exited with exit code 75\n")
    out = status(tmp_path, run.name)
    assert "program    exited 75: stopped after saving its checkpoint, as asked" in out, out
    assert "program error" not in out and "last lines of" not in out, out


def test_watchdog_names_the_node(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "watchdog")
    fake_slurm(scontrol=scontrol(job, "FAILED", 4), sacct=None)
    out = status(tmp_path, run.name)
    assert "outcome    watchdog: start-up watchdog: node(s) stnode2 did not join" in out, out
    slurm_forgets(fake_slurm)
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.outcome) == (JobState.FAILED, 4, classify.WATCHDOG)
    assert "stnode2" in st.outcome_detail


@pytest.mark.parametrize("case, words", [
    ("cancel_requested", "cancelled by `slurmtrain cancel`"),
    ("scancel", "cancelled (scancel"),
])
def test_cancelled(tmp_path, fake_slurm, case, words):
    """Cancelled, even where the script's stop handling then tried a requeue."""
    run, job = recorded_run(tmp_path, case)
    fake_slurm(scontrol=scontrol(job, "CANCELLED", 0), sacct=None)
    out = status(tmp_path, run.name)
    assert "CANCELLED" in out and f"outcome    cancelled: {words}" in out, out
    slurm_forgets(fake_slurm)
    (st,) = track.statuses([run])
    assert (st.state, st.source, st.outcome) == (JobState.CANCELLED, "events.jsonl", classify.CANCELLED)


def test_refused_requeue_is_an_end_once_slurm_forgets(tmp_path, fake_slurm):
    """requeue + requeue_failed: the script exited 0 (Slurm said COMPLETED); the outcome
    says the run stopped at the time limit and how to go on."""
    run, job = recorded_run(tmp_path, "requeue_refused")
    fake_slurm(scontrol="", sacct=None)
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.source) == (JobState.COMPLETED, 0, "events.jsonl")
    assert "records no end" not in st.note and "requeue_failed" in st.note
    assert st.outcome == classify.TIME_LIMIT
    assert "slurmtrain resubmit" in st.outcome_detail and "step 208" in st.outcome_detail


def test_requeued_job_slurm_forgot_says_so(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "requeue_refused")
    lines = (run.path / "events.jsonl").read_text().splitlines()[:-1]  # the requeue worked
    (run.path / "events.jsonl").write_text("\n".join(lines) + "\n")
    fake_slurm(scontrol="", sacct=None)
    (st,) = track.statuses([run])
    assert st.state is JobState.UNKNOWN and "requeued (`requeue`)" in st.note
    assert st.outcome == classify.TIME_LIMIT and "requeued" in st.outcome_detail


def test_resubmitted_job_waiting_is_running_not_the_old_end(tmp_path, fake_slurm):
    run, _ = recorded_run(tmp_path, "requeue_refused")
    from slurmtrain import events
    events.append(run.path, "resubmitted", job_id="140", previous_job_id="131")
    run.update_manifest(job_ids=["131", "140"])
    fake_slurm(scontrol=scontrol("140", "PENDING", 0), sacct=None)
    (st,) = track.statuses([run])
    assert st.state is JobState.PENDING and st.outcome == classify.RUNNING
    assert "the job before ended: time limit" in st.outcome_detail
    out = status(tmp_path, run.name)
    assert "outcome " not in out and "resubmitted as job 140 (after job 131)" in out, out
    # Slurm forgot the new job before it started: its state is not the old job's end
    slurm_forgets(fake_slurm)
    (st,) = track.statuses([run])
    assert st.state is JobState.UNKNOWN and "never started" in st.note


def test_runs_table_has_an_outcome_column(tmp_path, fake_slurm):
    fake_slurm(scontrol="", sacct=None)
    for case in ("user_error", "watchdog", "scancel"):
        recorded_run(tmp_path, case)
    result = CliRunner().invoke(main, ["runs", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split()[:5] == ["RUN", "JOB", "ID", "STATE", "OUTCOME"]
    got = {r.split()[0].rsplit("-", 2)[0]: r for r in rows if not r.startswith("*")}
    assert "FAILED*" in got["user-error"] and "user error" in got["user-error"]
    assert "watchdog" in got["watchdog"] and "cancelled" in got["scancel"]


def ended_run(tmp_path, monkeypatch, name: str, job: str, *evs):
    """A run whose job ``job`` started and wrote ``evs``, Slurm having forgotten it."""
    from slurmtrain import events
    from slurmtrain.runs import resubmit, rundir

    run = rundir.create(tmp_path, name)
    run.update_manifest(name=run.name, job_ids=[job], state="submitted", nodes=1)
    run.script.write_text("#!/bin/bash\n")
    for event, fields in (("started", {"job_id": job, "restart": 0}), *evs):
        events.append(run.path, event, **fields)
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    return run


def test_resubmit_of_a_completed_run_whose_recipe_now_asks_for_more_steps_says_how_to_go_on(tmp_path, monkeypatch):
    from slurmtrain.errors import UsageError
    from slurmtrain.runs import resubmit, rundir

    run = ended_run(tmp_path, monkeypatch, "long", "5", ("finished", {"step": 2200}),
                    ("finished", {"job_id": "5", "restart": 0, "exit_code": 0}))
    (run.path / rundir.RECIPE).write_text('[model]\npreset = "tiny"\n[train]\nsteps = 2300\n')
    with pytest.raises(UsageError) as err:
        resubmit.resubmit(run)
    assert str(err.value).endswith("its recipe.toml now asks for 2300 steps, past step 2200 where it ended: --force "
                                   "continues it from there"), err.value
    (run.path / rundir.RECIPE).write_text('[model]\npreset = "tiny"\n[train]\nsteps = 2200\n')
    with pytest.raises(UsageError, match=r"nothing to continue \(use --force"):
        resubmit.resubmit(run)
    # The job's own command sets the steps (submit --set train.steps=2200): the recipe's 2300
    # never reach it, and --force would end at once.
    (run.path / rundir.RECIPE).write_text('[model]\npreset = "tiny"\n[train]\nsteps = 2300\n')
    run.script.write_text("#!/bin/bash\nexec python3 -m slurmtrain.train --recipe recipe.toml --set train.steps=2200\n")
    with pytest.raises(UsageError) as err:
        resubmit.resubmit(run)
    assert str(err.value).endswith("its recipe.toml now asks for 2300 steps, but the job's command sets "
                                   "train.steps=2200 (job.sbatch), and it ended at step 2200: nothing to continue "
                                   "(submit a new run to train further)"), err.value


def test_resubmit_of_a_run_that_failed_after_saving_says_force_continues_it(tmp_path, monkeypatch):
    from slurmtrain.errors import UsageError
    from slurmtrain.runs import resubmit

    run = ended_run(tmp_path, monkeypatch, "broke", "6", ("checkpoint_saved", {"step": 114}),
                    ("failed", {"job_id": "6", "restart": 0, "exit_code": 2}))
    with pytest.raises(UsageError) as err:
        resubmit.resubmit(run)
    assert str(err.value).endswith("; fix what failed, then --force continues it from its newest checkpoint "
                                   "(step 114)"), err.value


def test_resubmit_of_a_run_whose_checkpoints_were_purged_is_refused_before_it_queues(tmp_path, monkeypatch):
    """train.checkpoint_dir on scratch, purged while the run waited: the trainer would refuse
    the start after the queue wait; resubmit refuses it at once, naming the link's target."""
    from slurmtrain.errors import UsageError
    from slurmtrain.runs import resubmit

    run = ended_run(tmp_path, monkeypatch, "scratchy", "7", ("checkpoint_saved", {"step": 40}),
                    ("signal", {"signal": "USR2", "cause": "time limit"}), ("stopped", {"step": 41}),
                    ("checkpoint_saved", {"step": 41}), ("requeue_failed", {"message": "x"}),
                    ("requeue", {"job_id": "7", "restart": 0, "exit_code": 75}))
    scratch = tmp_path / "scratch" / run.name
    scratch.mkdir(parents=True)
    (run.path / "checkpoints").symlink_to(scratch, target_is_directory=True)
    queued = []
    monkeypatch.setattr(resubmit, "submit_run", lambda *a, **kw: queued.append(a) or (_ for _ in ()).throw(
        RuntimeError("queued")))
    with pytest.raises(RuntimeError, match="queued"):  # the link's folder is there: on to sbatch
        resubmit.resubmit(run)
    scratch.rmdir()
    queued.clear()
    with pytest.raises(UsageError) as err:
        resubmit.resubmit(run)
    assert str(err.value) == (f"run {run.name}: its checkpoints link to {scratch} points to nothing now (a scratch "
                              "file system's purge?), though it saved checkpoints up to step 41; its job would refuse "
                              f"to start: restore them there, or remove the link {run.path / 'checkpoints'} to train "
                              "it again from step 0"), err.value
    assert not queued
