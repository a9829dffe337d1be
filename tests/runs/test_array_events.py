"""A job array's events interleave in one events.jsonl: eventlog follows each task by
itself (a task's started..finished is never another's) and combines them; `status`
(classify, track) says RUNNING while any task runs, COMPLETED only when every task
completed, else the worst end naming the task; what the supervisor asks of a task
(finished, saved) reads only that task's lines."""

from __future__ import annotations

import re

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtrain import eventlog, events
from slurmtrain.cli import main
from slurmtrain.errors import UsageError
from slurmtrain.runs import classify, rundir, track
from slurmtrain.runs.states import JobState


K = eventlog
T = 1_800_000_000.0


def script(name, task, job_id, restart=0, **fields):
    """A line the job script of array 12's task ``task`` (its own id ``job_id``) writes."""
    return {"event": name, "job_id": job_id, "restart": restart, "array_job_id": "12", "array_task": task, **fields}


SUBMITTED = {"event": "submitted", "job_id": "12", "array_tasks": 2}
START0 = script("started", 0, "13", nodes="stnode1", array_tasks=2)
START1 = script("started", 1, "12", nodes="stnode2", array_tasks=2)
DONE0 = script("finished", 0, "13", exit_code=0)
DONE1 = script("finished", 1, "12", exit_code=0)
FAILED1 = script("failed", 1, "12", exit_code=3)


def timed(*evs):
    return [{"time": T + i, **e} for i, e in enumerate(evs)]


def write_run(root: Path, evs: list[dict], array: int | None = 2) -> rundir.RunDir:
    run = rundir.create(root, "tok")
    run.update_manifest(name=run.name, job_ids=["12"], state="submitted", nodes=1, array=array,
                        submitted_at="2026-11-21T13:02:23")
    (run.path / events.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in timed(*evs)))
    return run


def test_interleaved_tasks_are_split_by_task():
    """Task 1 starts after task 0 and ends first, failing: the failure is task 1's; task 0
    still runs. Split as one sequence, task 0's start would have looked failed."""
    evs = timed(SUBMITTED, START0, START1, FAILED1)
    per_task = K.tasks(evs)
    assert [[e["event"] for e in evs] for evs in per_task.values()] == [["submitted", "started"],
                                                                         ["submitted", "started", "failed"]]
    now = K.latest(evs)
    assert (now.kind, now.final) == (K.RUNNING, False)
    assert now.detail == "array of 2 tasks: task 0 running; task 1 user error"
    assert [o.kind for o in K.ends(evs)] == [K.RUNNING, K.USER_ERROR]  # in the order they started


def test_the_array_completes_only_when_every_task_has():
    assert K.latest(timed(SUBMITTED)).detail == "array of 2 tasks: tasks 0, 1 waiting"
    assert K.latest(timed(SUBMITTED, START0, DONE0)).detail == "array of 2 tasks: task 0 completed; task 1 waiting"
    done = K.latest(timed(SUBMITTED, START0, START1, DONE1, DONE0))
    assert (done.kind, done.final, done.detail) == (K.COMPLETED, True, "all 2 tasks of the array completed")


def test_the_worst_end_names_its_task():
    end = K.latest(timed(SUBMITTED, START0, START1, FAILED1, DONE0))
    assert (end.kind, end.final) == (K.USER_ERROR, True)
    assert end.detail == ("task 1 of 2: the command failed with exit status 3; not requeued "
                          "(task 0 completed)")
    assert end.event["array_task"] == 1
    # a cancel of the whole array (the CLI's event, of no task) ends every running task
    cancel = {"event": "cancel_requested", "job_id": "12"}
    end = K.latest(timed(SUBMITTED, START0, DONE0, START1, cancel))
    assert (end.kind, end.detail.split(":")[0]) == (K.CANCELLED, "task 1 of 2")


def test_tasks_that_ended_alike_name_no_one_tasks_checkpoint():
    """A cancelled sweep: each point saved its own steps; one point's is not the array's."""
    saved0, saved1 = script("checkpoint_saved", 0, "13", step=40), script("checkpoint_saved", 1, "12", step=70)
    cancel = {"event": "cancel_requested", "job_id": "12"}
    end = K.latest(timed(SUBMITTED, START0, START1, saved0, saved1, cancel))
    assert end.kind == K.CANCELLED and end.step is None and "last checkpoint" not in end.detail, end
    alone = K.latest(timed(SUBMITTED, START0, START1, saved1, FAILED1, DONE0))
    assert alone.detail.startswith("task 1 of 2: ") and alone.step == 70  # one task: its own step stands


def test_a_requeued_task_is_followed_through_its_restart():
    evs = timed(SUBMITTED, START0, START1,
                script("signal", 0, "13", signal="TERM"), script("requeue", 0, "13", exit_code=143),
                DONE1)
    assert K.latest(evs).detail == "array of 2 tasks: task 0 preempted, requeued; task 1 completed"
    evs += timed(script("started", 0, "13", restart=1, nodes="stnode1", array_tasks=2),
                 script("restarted", 0, "13", restart=1), script("finished", 0, "13", restart=1, exit_code=0))
    assert K.latest(evs).kind == K.COMPLETED
    assert [o.kind for o in K.ends(evs)] == [K.PREEMPTED, K.COMPLETED, K.COMPLETED]


def test_a_run_that_is_no_array_reads_as_before():
    evs = timed({"event": "submitted", "job_id": "7"}, {"event": "started", "job_id": "7", "restart": 0},
                {"event": "finished", "job_id": "7", "restart": 0, "exit_code": 0})
    assert K.tasks(evs) == {} and K.array_size(evs) is None
    assert K.latest(evs).detail == "the command finished (exit 0)"


def test_history_names_each_task(tmp_path):
    run = write_run(tmp_path, [SUBMITTED, START0, START1, FAILED1, DONE0])
    said = [line.split("  ", 1)[1] for line in classify.history(run.path)]
    assert said == ["submitted as array job 12 of 2 tasks", "task 0: job 12_0 started on stnode1",
                    "task 1: job 12_1 started on stnode2",
                    "task 1: failed with exit status 3: not requeued", "task 0: the job finished (exit 0)"]


# ---- status: Slurm's answer per task, or the events once Slurm forgot ---------------

def forget_jobs(fake_slurm, scontrol: str = "") -> None:
    from slurmtrain.runs import jobs

    fake_slurm(scontrol=scontrol, sacct=None)
    jobs.TrackedJob.watcher = jobs.Watcher()


def test_status_from_events_once_slurm_forgot(tmp_path, fake_slurm):
    forget_jobs(fake_slurm)
    run = write_run(tmp_path, [SUBMITTED, START0, START1, FAILED1, DONE0])
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.source) == (JobState.FAILED, 3, "events.jsonl")
    assert [(t.task, t.state, t.job_id, t.exit_code) for t in st.tasks] == [
        (0, JobState.COMPLETED, "13", 0), (1, JobState.FAILED, "12", 3)]
    assert st.outcome == K.USER_ERROR and st.outcome_detail.startswith("task 1 of 2: ")
    assert "task 0 COMPLETED; task 1 FAILED" in st.note
    # a task that never started: not complete
    run = write_run(tmp_path, [SUBMITTED, START0, DONE0])
    (st,) = track.statuses([run])
    assert st.state is JobState.UNKNOWN and "task 1 no end recorded" in st.note


def scontrol_line(job_id: str, task: str, state: str, exit_code: str = "0:0") -> str:
    return (f"JobId={job_id} ArrayJobId=12 ArrayTaskId={task} ArrayTaskThrottle=0 JobName=tok JobState={state} "
            f"Reason=None Requeue=1 Restarts=0 ExitCode={exit_code} RunTime=00:00:05 NodeList=stnode1 NumNodes=1")


def test_status_takes_a_task_slurm_forgot_from_its_events(tmp_path, fake_slurm):
    """Task 0 failed long enough ago for Slurm to forget it; task 1 completed just now:
    the run failed, though every task Slurm still knows completed."""
    forget_jobs(fake_slurm, scontrol_line("12", "1", "COMPLETED"))
    run = write_run(tmp_path, [SUBMITTED, START0, script("failed", 0, "13", exit_code=1), START1, DONE1])
    (st,) = track.statuses([run])
    assert (st.state, st.exit_code, st.source) == (JobState.FAILED, 1, "scontrol")
    assert [(t.task, t.state, t.source) for t in st.tasks] == [(0, JobState.FAILED, "events.jsonl"),
                                                               (1, JobState.COMPLETED, "scontrol")]


def test_status_says_running_while_a_task_runs(tmp_path, fake_slurm):
    forget_jobs(fake_slurm, "\n".join([scontrol_line("13", "0", "COMPLETED"), scontrol_line("12", "1", "RUNNING")]))
    run = write_run(tmp_path, [SUBMITTED, START0, START1, DONE0])
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert "state      RUNNING  (from scontrol)" in out, out
    assert "tasks      task 0  COMPLETED  stnode1  (job 13, exit code 0)" in out, out
    assert "           task 1  RUNNING  stnode2" not in out and "           task 1  RUNNING  stnode1  (job 12)" in out


def test_a_task_names_its_run_as_squeue_shows_it_or_by_its_own_id(tmp_path):
    """`status 12_0` (squeue's JOBID of task 0) and `status 13` (task 0's own id, in its
    batch log and sacct's JobIDRaw) find the array's run, like `status 12`."""
    run = write_run(tmp_path, [SUBMITTED, START0, START1])
    for ref in ("12", "12_0", "12_1", "13"):
        assert rundir.resolve(ref, tmp_path).path == run.path.absolute(), ref
    with pytest.raises(UsageError, match="no run under"):
        rundir.resolve("14", tmp_path)  # no task of it started with that id


# sacct's answer for array 12 before any task started, recorded on the sandbox (Slurm
# 22.05 with slurmdbd): one plain line, no task in it; then the tasks' own lines.
SACCT_PENDING_ARRAY = "12|PENDING|0:0|0|stnode1|00:00:01|2026-11-22T19:50:37|None|12\n"


def test_a_pending_array_in_sacct_is_pending_not_unknown(tmp_path, fake_slurm):
    """slurmdbd lists a pending array as one plain job for its first seconds: each task
    that has not started is pending, one whose job script already wrote `started` is
    running, one that ended says so. Before, every task read UNKNOWN from its events and
    so did the array (a status poll on a loaded CI run)."""
    fake_slurm(sacct=SACCT_PENDING_ARRAY)
    run = write_run(tmp_path, [SUBMITTED])
    (st,) = track.statuses([run])
    assert st.state is JobState.PENDING and st.outcome == K.RUNNING, (st.state, st.outcome)
    assert [(t.task, t.state, t.source) for t in st.tasks] == [(0, JobState.PENDING, "sacct"),
                                                               (1, JobState.PENDING, "sacct")]
    run = write_run(tmp_path, [SUBMITTED, START0, DONE0, START1])
    (st,) = track.statuses([run])
    assert st.state is JobState.RUNNING, st
    assert [(t.task, t.state) for t in st.tasks] == [(0, JobState.COMPLETED), (1, JobState.RUNNING)]


def test_a_task_missing_beside_listed_ones_is_pending_until_it_started(tmp_path, fake_slurm):
    fake_slurm(scontrol=scontrol_line("13", "0", "RUNNING"), sacct=None)
    run = write_run(tmp_path, [SUBMITTED, START0])
    (st,) = track.statuses([run])
    assert [(t.task, t.state) for t in st.tasks] == [(0, JobState.RUNNING), (1, JobState.PENDING)]
    # started, no end, and no longer listed while others are: nobody knows
    run = write_run(tmp_path, [SUBMITTED, START0, START1])
    (st,) = track.statuses([run])
    assert [(t.task, t.state) for t in st.tasks] == [(0, JobState.RUNNING), (1, JobState.UNKNOWN)]


# ---- what the supervisor asks, task by task ---------------------------------------------

def test_the_array_script_asks_of_its_own_task():
    evs = [START0, START1, {"event": "checkpoint_saved", "step": 3, "array_task": 1},
           {"event": "finished", "step": 9, "array_task": 0}]
    assert (K.finished_since_start(evs, 0), K.saved_in_run(evs, 0)) == (True, False)
    assert (K.finished_since_start(evs, 1), K.saved_in_run(evs, 1)) == (False, True)
    # read as one sequence, task 1 would take task 0's `finished` for its program's
    assert K.finished_since_start(evs) is True


def test_a_resubmission_of_some_tasks_keeps_the_others_as_they_ended(tmp_path, fake_slurm):
    """`resubmit SWEEP` sends only task 1 again (job 20, `tasks: [1]`): task 0 completed in
    job 12 and stays so, whether Slurm still knows job 20 or has forgotten it too."""
    resent = [{"event": "submitted", "job_id": "20", "array_tasks": 2, "tasks": [1]},
              {"event": "started", "job_id": "20", "restart": 0, "array_job_id": "20", "array_task": 1,
               "nodes": "stnode2", "array_tasks": 2}]
    evs = [SUBMITTED, START0, START1, FAILED1, DONE0, *resent]
    forget_jobs(fake_slurm, scontrol_line("20", "1", "RUNNING").replace("ArrayJobId=12", "ArrayJobId=20"))
    run = write_run(tmp_path, evs)
    run.update_manifest(job_ids=["12", "20"])
    (st,) = track.statuses([run])
    assert [(t.task, t.state) for t in st.tasks] == [(0, JobState.COMPLETED), (1, JobState.RUNNING)], st.tasks
    assert st.state is JobState.RUNNING
    forget_jobs(fake_slurm)
    (run.path / events.EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in timed(
        *evs, {"event": "finished", "job_id": "20", "restart": 0, "array_job_id": "20", "array_task": 1,
               "exit_code": 0})))
    (st,) = track.statuses([run])
    assert [(t.task, t.state, t.job_id) for t in st.tasks] == [(0, JobState.COMPLETED, "13"),
                                                               (1, JobState.COMPLETED, "20")], st.tasks
    assert (st.state, st.source) == (JobState.COMPLETED, "events.jsonl")


def test_periodic_checkpoints_in_a_row_are_one_line_of_history_each_tasks_own(tmp_path):
    """A long run saves hundreds: each task's checkpoints in a row, nothing else of its own
    said between them, are one line where the last was; two are shown as they are."""
    saves = [{"event": "checkpoint_saved", "step": s, "array_job_id": "12", "array_task": t, "job_id": f"1{t}"}
             for s in (10, 20, 30, 40, 50, 60, 70, 80) for t in (0, 1)]
    late = [{"event": "checkpoint_saved", "step": s, "array_job_id": "12", "array_task": 0, "job_id": "10"}
            for s in (90, 100)]
    run = write_run(tmp_path, [SUBMITTED, START0, START1, *saves, FAILED1, *late, DONE0])
    said = [re.sub(r"since \d\d:\d\d:\d\d", "since T", line.split("  ", 1)[1]) for line in classify.history(run.path)]
    assert said == ["submitted as array job 12 of 2 tasks", "task 0: job 12_0 started on stnode1",
                    "task 1: job 12_1 started on stnode2",
                    "task 1: checkpoints saved at steps 10, 20, 30, …, 70, 80 (8 since T)",
                    "task 1: failed with exit status 3: not requeued",
                    "task 0: checkpoints saved at steps 10, 20, 30, …, 90, 100 (10 since T)",
                    "task 0: the job finished (exit 0)"], said
    two = write_run(tmp_path / "two", [SUBMITTED, START0, *late, DONE0])
    assert [line.split("  ", 1)[1] for line in classify.history(two.path)][2:4] == [
        "task 0: checkpoint saved at step 90", "task 0: checkpoint saved at step 100"]


def test_history_says_the_programs_error_a_run_failed_with(tmp_path):
    failed = {"event": "failed", "job_id": "12", "restart": 0, "exit_code": 1,
              "error": "RuntimeError: boom on rank 2 at step 15"}
    run = write_run(tmp_path, [{"event": "submitted", "job_id": "12"}, failed])
    assert classify.history(run.path)[-1].split("  ", 1)[1] == (
        "failed with exit status 1 (RuntimeError: boom on rank 2 at step 15): not requeued")


def test_a_sweep_points_own_status_is_its_tasks_alone(tmp_path):
    """Point 1 of two was preempted with no requeue left: its outcome is the requeue limit
    (resubmit continues it), not Slurm's FAILED as a user error because the other point
    read as waiting."""
    point = rundir.create(tmp_path / "sw" / "points", "lr=3e-3")
    point.update_manifest(name="lr=3e-3", in_sweep="sw", array_task=1, job_ids=["12_1"], state="submitted")
    tag = {"array_task": 1, "array_job_id": "12", "job_id": "14", "array_tasks": 2}
    for name, fields in (("started", {"restart": 0, "nodes": "stnode1"}), ("checkpoint_saved", {"step": 149}),
                         ("stopped", {"step": 149}), ("preempted", {"restart": 0, "exit_code": 1}),
                         ("requeue_limit", {"restart": 0, "max_requeues": 0})):
        events.append(point.path, name, **tag, **fields)
    got = classify.classify(point.path, "FAILED", 3)
    assert (got.kind, got.step) == ("requeue limit", 149), got


def test_watch_of_a_sweeps_point_ends_when_the_point_does(tmp_path):
    """Its events carry the array's size: read as the array's, the other point looked queued
    and `watch POINT` never ended."""
    from slurmtrain.runs import progress

    sweep = rundir.create(tmp_path, "sw")
    sweep.update_manifest(recipe="tiny-demo", array=2)
    point = rundir.RunDir(sweep.path / "points" / "lr=3e-3")
    point.path.mkdir(parents=True)
    point.update_manifest(name="lr=3e-3", in_sweep=sweep.name, sweep_dir=str(sweep.path), array_task=1,
                          job_ids=["12_1"], state="submitted")
    tag = {"array_task": 1, "array_job_id": "12", "job_id": "14", "array_tasks": 2}
    for name, fields in (("started", {"restart": 0, "nodes": "stnode1"}), ("finished", {"step": 20}),
                         ("finished", {"restart": 0, "exit_code": 0})):
        events.append(point.path, name, **tag, **fields)
    snap = progress.snapshot(point.path)
    assert (snap.ended, snap.finished, snap.trainer) == ("completed", True, True)
    # its history names its task's job as its status and squeue do (it said "job 12")
    assert classify.history(point.path)[0].endswith("job 12_1 started on stnode1"), classify.history(point.path)


def test_a_point_is_resubmitted_while_the_sweeps_other_points_are_still_queued(tmp_path, fake_slurm, monkeypatch):
    from slurmtrain.runs import resubmit as resub

    sweep = rundir.create(tmp_path, "sw")
    labels = ["lr=1e-3", "lr=3e-3"]
    sweep.update_manifest(job_ids=["12"], state="submitted", array=2,
                          sweep={"keys": ["train.lr"], "max_parallel": 1,
                                 "points": [{"task": i, "label": label, "values": {}} for i, label in enumerate(labels)]})
    sweep.script.write_text("#!/bin/bash\n")
    for i, label in enumerate(labels):
        point = rundir.RunDir(sweep.path / "points" / label)
        point.path.mkdir(parents=True)
        point.update_manifest(name=label, in_sweep=sweep.name, sweep_dir=str(sweep.path), array_task=i,
                              job_ids=[f"12_{i}"], state="submitted")
    tag = {"array_task": 0, "array_job_id": "12", "job_id": "13", "array_tasks": 2}
    for name, fields in (("started", {"restart": 0}), ("checkpoint_saved", {"step": 149}), ("stopped", {"step": 149}),
                         ("preempted", {"restart": 0, "exit_code": 1}), ("requeue_limit", {"restart": 0})):
        events.append(sweep.path / "points" / labels[0], name, **tag, **fields)
    fake_slurm(scontrol=scontrol_line("13", "0", "FAILED", "3:0") + "\n" + scontrol_line("12", "1", "PENDING"))
    sent = []
    monkeypatch.setattr(resub, "submit_run", lambda run, args, tasks: sent.append((args, tasks)) or
                        type("Done", (), {"job_id": "20"})())
    resub.resubmit(rundir.RunDir(sweep.path / "points" / labels[0]))
    assert [tasks for _, tasks in sent] == [(0,)] and "--array=0%1" in sent[0][0], sent  # --max-parallel kept
    with pytest.raises(UsageError, match=r"its task 12_1 is still PENDING"):
        resub.resubmit(rundir.RunDir(sweep.path / "points" / labels[1]))


def test_a_sweeps_point_is_found_by_its_tasks_own_job_id(tmp_path):
    """`status 14`, task 1's own id (sacct's JobIDRaw, its batch log's name): the point's
    task wrote its events in the point's directory, so the sweep's own events have none
    of it and the id was unknown; it names the point, as `status 12_1` does."""
    sweep = rundir.create(tmp_path, "sw")
    sweep.update_manifest(recipe="tiny-demo", array=2, job_ids=["12"], state="submitted",
                          sweep={"points": [{"label": "lr=1e-3"}, {"label": "lr=3e-3"}]})
    for task, label, own in ((0, "lr=1e-3", "13"), (1, "lr=3e-3", "14")):
        point = rundir.RunDir(sweep.path / "points" / label)
        (point.path / "logs").mkdir(parents=True)
        point.update_manifest(name=label, in_sweep=sweep.name, sweep_dir=str(sweep.path), array_task=task,
                              job_ids=[f"12_{task}"], state="submitted")
        events.append(point.path, "started", array_task=task, array_job_id="12", job_id=own, restart=0,
                      array_tasks=2, nodes="stnode1")
    assert rundir.resolve("14", tmp_path).path == (sweep.path / "points" / "lr=3e-3").absolute()
    assert rundir.resolve("13", tmp_path).path == (sweep.path / "points" / "lr=1e-3").absolute()
    assert rundir.resolve("12_1", tmp_path).path == (sweep.path / "points" / "lr=3e-3").absolute()
    assert rundir.resolve("12", tmp_path).path == sweep.path.absolute()


def test_resubmit_force_of_a_completed_point_says_completed_points_are_not_run_again(tmp_path, fake_slurm):
    """With --force already given, the refusal said "a point that failed by its own error
    needs --force"."""
    from slurmtrain.runs import resubmit as resub

    sweep = rundir.create(tmp_path, "sw")
    sweep.update_manifest(job_ids=["12"], state="submitted", array=1,
                          sweep={"keys": ["train.lr"], "points": [{"task": 0, "label": "lr=1e-3", "values": {}}]})
    sweep.script.write_text("#!/bin/bash\n")
    point = rundir.RunDir(sweep.path / "points" / "lr=1e-3")
    point.path.mkdir(parents=True)
    point.update_manifest(name="lr=1e-3", in_sweep=sweep.name, sweep_dir=str(sweep.path), array_task=0,
                          job_ids=["12_0"], state="submitted")
    tag = {"array_task": 0, "array_job_id": "12", "job_id": "13", "array_tasks": 1}
    for name, fields in (("started", {"restart": 0}), ("finished", {"step": 20}), ("finished", {"exit_code": 0})):
        events.append(point.path, name, **tag, **fields)
    fake_slurm(scontrol=scontrol_line("13", "0", "COMPLETED", "0:0"))
    with pytest.raises(UsageError, match=r"no point to continue \(lr=1e-3: completed\); a completed point is not "
                                         r"run again"):
        resub.resubmit(point, force=True)
    with pytest.raises(UsageError, match=r"needs --force"):
        resub.resubmit(point)
