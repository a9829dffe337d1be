"""Slurm's answers about a job array, gathered into one JobInfo under the array's id.

recorded/array/scontrol_*.txt: `scontrol -o show job 74` on the sandbox (Slurm 22.05)
for `sbatch --hold --array=0-2 --nodes=1 --exclusive` on its 2 nodes, task 1 exiting 3:
held (one record, ArrayTaskId=0-2), running (tasks 0 and 1 under ids 75 and 76, task 2
pending under the array's own id 74), partly ended, ended. The sandbox runs without
accounting, so the sacct lines below are written by hand in sacct's format (JobID
`74_0`, a pending range `74_[1-2]`, JobIDRaw the task's own id).
"""

from __future__ import annotations

import subprocess

import pytest

from slurmtrain.errors import SlurmError
from slurmtrain.runs import slurmquery
from slurmtrain.runs.slurmquery import task_indices
from slurmtrain.runs.states import JobState, aggregate

from runs_fakes import RECORDED

ARRAY = RECORDED / "array"


def parsed(name: str) -> slurmquery.JobInfo:
    jobs = slurmquery.parse_scontrol((ARRAY / f"scontrol_{name}.txt").read_text())
    assert list(jobs) == ["74"]  # the tasks' own ids (75, 76) are no jobs of their own
    return jobs["74"]


def test_held_array_is_one_pending_range():
    info = parsed("held")
    assert (info.state, info.reason, info.nodes, info.nodelist) == (
        JobState.PENDING, "task 0-2: JobHeldUser", None, None)
    assert {t: i.state for t, i in info.task_infos().items()} == dict.fromkeys([0, 1, 2], JobState.PENDING)


def test_running_while_any_task_runs():
    info = parsed("running")
    assert (info.state, info.nodes, info.nodelist) == (JobState.RUNNING, 2, "stnode1,stnode2")
    tasks = info.task_infos()
    assert [(t, i.job_id, i.state) for t, i in tasks.items()] == [
        (0, "75", JobState.RUNNING), (1, "76", JobState.RUNNING), (2, "74", JobState.PENDING)]
    assert info.reason == "task 2: Resources"


def test_pending_after_some_tasks_ended():
    info = parsed("partly_ended")
    assert info.state is JobState.PENDING and info.exit_code is None
    assert {t: (i.state, i.exit_code) for t, i in info.task_infos().items()} == {
        0: (JobState.COMPLETED, 0), 1: (JobState.FAILED, 3), 2: (JobState.PENDING, 0)}


def test_ended_array_says_the_worst_task():
    info = parsed("ended")
    assert (info.state, info.exit_code, info.raw_state) == (JobState.FAILED, 3, "FAILED")
    assert info.reason == "task 1: NonZeroExitCode"


def test_scontrol_of_every_job_keeps_plain_jobs_apart():
    text = (RECORDED / "scontrol_sandbox_22.05.txt").read_text() + (ARRAY / "scontrol_running.txt").read_text()
    jobs = slurmquery.parse_scontrol(text)
    assert len(jobs) == 11 and jobs["74"].state is JobState.RUNNING and jobs["1"].tasks == ()


SACCT = """\
74|PENDING|0:0|1|None assigned|00:00:00|2026-11-22T16:30:01|Resources|74_[1-2]
75|RUNNING|0:0|1|stnode1|00:00:04|2026-11-22T16:30:01|None|74_0
75.batch|RUNNING|0:0|1|stnode1|00:00:04|2026-11-22T16:30:01||74_0.batch
"""
SACCT_ENDED = """\
75|COMPLETED|0:0|1|stnode1|00:00:06|2026-11-22T16:30:01|None|74_0
76|REQUEUED|0:0|1|stnode2|00:00:03|2026-11-22T16:30:01|None|74_1
76|FAILED|3:0|1|stnode2|00:00:06|2026-11-22T16:30:01|NonZeroExitCode|74_1
74|COMPLETED|0:0|1|stnode1|00:00:06|2026-11-22T16:30:01|None|74_2
"""


def test_sacct_gathers_tasks_and_counts_each_task_s_requeues():
    info = slurmquery.parse_sacct(SACCT)["74"]
    assert info.state is JobState.RUNNING and info.source == "sacct"
    assert {t: i.state for t, i in info.task_infos().items()} == {
        0: JobState.RUNNING, 1: JobState.PENDING, 2: JobState.PENDING}
    ended = slurmquery.parse_sacct(SACCT_ENDED)
    assert list(ended) == ["74"]
    info = ended["74"]
    assert (info.state, info.exit_code, info.restarts) == (JobState.FAILED, 3, 1)
    assert info.task_infos()[1].restarts == 1 and info.task_infos()[2].job_id == "74"


def test_query_finds_the_array_under_the_id_sbatch_printed(fake_slurm):
    fake_slurm(scontrol=(ARRAY / "scontrol_running.txt").read_text(), sacct=None)
    assert slurmquery.query(["74"])["74"].state is JobState.RUNNING
    fake = fake_slurm(sacct=SACCT_ENDED)
    assert slurmquery.query(["74"])["74"].state is JobState.FAILED and fake.count("scontrol") == 0


@pytest.mark.parametrize("text, indices", [("3", [3]), ("0-2", [0, 1, 2]), ("[1-2]", [1, 2]),
                                           ("[0,4-8:2%1]", [0, 4, 6, 8]), ("", [])])
def test_task_indices(text, indices):
    assert task_indices(text) == indices


def test_aggregate():
    S = JobState
    assert aggregate([S.COMPLETED, S.RUNNING, S.PENDING]) is S.RUNNING
    assert aggregate([S.COMPLETED, S.PENDING]) is S.PENDING
    assert aggregate([S.COMPLETED, S.COMPLETED]) is S.COMPLETED
    assert aggregate([S.COMPLETED, S.CANCELLED, S.FAILED]) is S.FAILED
    assert aggregate([S.COMPLETED, S.UNKNOWN]) is S.UNKNOWN
    assert aggregate([S.TIMEOUT, S.UNKNOWN]) is S.TIMEOUT


# ---- cancel: the array's id reaches every task ------------------------------------------

class ArraySlurm:
    """`scontrol show job 74` answering the recorded records; update and scancel recorded."""

    def __init__(self, recorded: str):
        self.text = (ARRAY / f"scontrol_{recorded}.txt").read_text()
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        assert kwargs.get("timeout")
        self.calls.append(list(argv))
        out = self.text if argv[0] == "scontrol" and "show" in argv else ""
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_cancel_marks_and_cancels_the_whole_array(monkeypatch):
    """Task 2 has the array's id and is pending; 0 and 1 run under their own ids: the
    array counts as running, and the array's id is what is marked and cancelled."""
    fake = ArraySlurm("running")
    monkeypatch.setattr(slurmquery.subprocess, "run", fake)
    slurmquery.cancel("74")
    assert fake.calls[1:] == [["scontrol", "update", "JobId=74", "Requeue=0"], ["scancel", "74"]]


def test_cancel_of_an_ended_array_changes_nothing(monkeypatch):
    fake = ArraySlurm("ended")
    monkeypatch.setattr(slurmquery.subprocess, "run", fake)
    with pytest.raises(SlurmError, match=r"job 74 already ended \(FAILED\); nothing to cancel"):
        slurmquery.cancel("74")
    assert len(fake.calls) == 1


def test_cancel_of_one_task_marks_and_cancels_that_task_alone(monkeypatch):
    """A sweep's point is its array task: `scontrol show job 74_1` answers that task's record
    (its JobId is its own id, 76)."""
    fake = ArraySlurm("running")
    fake.text = next(line for line in fake.text.splitlines() if "ArrayTaskId=1 " in line) + "\n"
    monkeypatch.setattr(slurmquery.subprocess, "run", fake)
    slurmquery.cancel("74_1")
    assert fake.calls[1:] == [["scontrol", "update", "JobId=74_1", "Requeue=0"], ["scancel", "74_1"]]


def test_cancel_of_an_array_some_of_whose_tasks_ended_goes_on(monkeypatch):
    """scontrol fails the mark of an array whose task 0 has ended, though tasks 1-2 took it."""
    fake = ArraySlurm("running")

    def run(argv, **kwargs):
        done = fake(argv, **kwargs)
        if "update" in argv:
            return subprocess.CompletedProcess(argv, 1, "", "74_0: Job has already finished\n74_1-2: No error\n")
        return done
    monkeypatch.setattr(slurmquery.subprocess, "run", run)
    slurmquery.cancel("74")
    assert fake.calls[-1] == ["scancel", "74"]
    assert slurmquery._only_ended_tasks("74_0: Job has already finished\n74_1-2: No error\n")
    assert not slurmquery._only_ended_tasks("74_1-2: Access/permission denied\n")
    assert not slurmquery._only_ended_tasks("74_0: Job has already finished\n74_1: Invalid job id specified\n")
