"""`slurmtrain cancel` is all or nothing: the job ends CANCELLED for good, or nothing
changes (its requeue flag included) and the user sees Slurm's reason.

Slurm is faked at the subprocess boundary: each test says which command fails.
"""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.errors import SlurmError
from slurmtrain.runs import rundir, slurmquery


class CancelSlurm:
    """scontrol show/update and scancel for one job, remembering its Requeue flag."""

    def __init__(self, job_id: str = "31", state: str = "RUNNING", requeue: int = 1,
                 fail: str | None = None):
        self.job_id, self.state, self.requeue = job_id, state, requeue
        self.fail = fail            # "scancel", "update" or "show": that command fails
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        assert kwargs.get("timeout"), "every Slurm call needs a timeout"
        self.calls.append(list(argv))
        ok = lambda out="": subprocess.CompletedProcess(argv, 0, out, "")
        bad = lambda err: subprocess.CompletedProcess(argv, 1, "", err)
        if argv[:2] == ["scontrol", "update"]:
            if self.fail == "update":
                return bad("slurm_update error: Access/permission denied\n")
            self.requeue = int(argv[-1].split("=")[1])
            return ok()
        if argv[0] == "scontrol" and "show" in argv:
            if self.fail == "show":
                return bad("slurm_load_jobs error: Invalid job id specified\n")
            return ok(f"JobId={self.job_id} JobName=x JobState={self.state} Reason=None "
                      f"Requeue={self.requeue} Restarts=0 ExitCode=0:0\n")
        if argv[0] == "scancel":
            if self.fail == "scancel":
                return bad("scancel: error: Kill job error on job id 31: Access/permission denied\n")
            self.state = "CANCELLED"
            return ok()
        raise AssertionError(f"unexpected command {argv}")

    def tools(self) -> list[str]:
        return [" ".join(c[:2]) if c[0] == "scontrol" else c[0] for c in self.calls]


@pytest.fixture
def slurm(monkeypatch):
    def install(**kw) -> CancelSlurm:
        fake = CancelSlurm(**kw)
        monkeypatch.setattr(slurmquery.subprocess, "run", fake)
        return fake
    return install


def test_cancel_marks_not_requeueable_then_scancels(slurm):
    fake = slurm()
    slurmquery.cancel("31")
    assert fake.calls[-2:] == [["scontrol", "update", "JobId=31", "Requeue=0"], ["scancel", "31"]]
    assert fake.state == "CANCELLED" and fake.requeue == 0


def test_failed_scancel_restores_requeue_and_says_why(slurm):
    fake = slurm(fail="scancel")
    with pytest.raises(SlurmError, match="Access/permission denied") as err:
        slurmquery.cancel("31")
    assert "\n" not in str(err.value)
    assert fake.requeue == 1 and fake.state == "RUNNING"  # as it was: still requeueable
    assert fake.calls[-1] == ["scontrol", "update", "JobId=31", "Requeue=1"]


def test_failed_mark_changes_nothing(slurm):
    fake = slurm(fail="update")
    with pytest.raises(SlurmError, match="permission denied"):
        slurmquery.cancel("31")
    assert "scancel" not in fake.tools() and fake.state == "RUNNING"


def test_job_without_requeue_is_left_without(slurm):
    """A profile with requeue = false: nothing to mark, nothing to restore."""
    fake = slurm(requeue=0, fail="scancel")
    with pytest.raises(SlurmError):
        slurmquery.cancel("31")
    assert fake.tools() == ["scontrol --oneliner", "scancel"] and fake.requeue == 0


def test_ended_job_is_not_touched(slurm):
    fake = slurm(state="COMPLETED")
    with pytest.raises(SlurmError, match="already ended"):
        slurmquery.cancel("31")
    assert fake.tools() == ["scontrol --oneliner"]


def _run(tmp_path, job_id="31"):
    run = rundir.create(tmp_path, "c")
    run.update_manifest(name=run.name, job_name="c", job_ids=[job_id], state="submitted")
    return run


def test_cli_records_cancel_requested_only_after_the_cancel(tmp_path, slurm):
    run = _run(tmp_path)
    slurm(fail="scancel")
    result = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), run.name])
    assert result.exit_code == 1
    assert result.output.startswith("slurmtrain: error: scancel failed") and result.output.count("\n") == 1
    assert "Access/permission denied" in result.output
    assert events.read(run.path) == []

    slurm()
    result = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), run.name])
    assert result.exit_code == 0, result.output
    assert [e["event"] for e in events.read(run.path)] == ["cancel_requested"]
