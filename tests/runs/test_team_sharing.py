"""A runs directory a team shares (slurmtrain/perms.py): a teammate's run this user cannot
write is refused before anything is queued, a private one is left out of the listing, two
resubmits of one run go one after the other, another user's job is named as theirs.

The tests act as another user (``nobody``) by their effective ids, on files owned by a
uid no one has (a teammate): as root, every access is allowed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtrain import events, perms
from slurmtrain.cli import main
from slurmtrain.errors import SlurmError, UsageError
from slurmtrain.runs import chain, rundir, slurmquery

TEAMMATE = 4242  # a uid with no name here: "uid 4242's"
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


@pytest.fixture
def shared():
    """A runs directory outside pytest's (whose root-only parents another user cannot pass)."""
    d = Path(tempfile.mkdtemp(prefix="team-", dir="/var/tmp"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d)


@contextlib.contextmanager
def acting_as(uid: int):
    os.setegid(uid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def teammates_run(root: Path, name: str, job_id: str = "7") -> rundir.RunDir:
    """A run a teammate made under umask 022: its folder group-writable (setgid, as a team
    sets it up), its events.jsonl only the teammate's."""
    run = rundir.create(root, name)
    run.update_manifest(name=run.name, job_ids=[job_id], state="submitted", nodes=1)
    run.script.write_text("#!/bin/bash\n")
    events.append(run.path, "submitted", job_id=job_id)
    events.append(run.path, "started", job_id=job_id, restart=0, nodes="stnode1")
    events.append(run.path, "preempted", job_id=job_id, exit_code=1)
    events.append(run.path, "requeue_limit", job_id=job_id, max_requeues=0)  # not requeued
    for p in [run.path, *run.path.rglob("*")]:
        os.chown(p, TEAMMATE, TEAMMATE)
        p.chmod(0o777 if p.is_dir() else 0o644)
    return run


def preempted_run(root: Path, fake_slurm) -> rundir.RunDir:
    """A run of this user's whose job 7 was preempted and not requeued: resubmit continues it."""
    run = rundir.create(root, "r")
    run.update_manifest(name=run.name, job_ids=["7"], state="submitted", nodes=1)
    run.script.write_text("#!/bin/bash\n")
    events.append(run.path, "started", job_id="7", restart=0, nodes="stnode1")
    events.append(run.path, "preempted", job_id="7", exit_code=1)
    events.append(run.path, "requeue_limit", job_id="7", max_requeues=0)  # the script said: not requeued
    fake_slurm(scontrol="JobId=7 JobState=PREEMPTED Reason=None Requeue=1 Restarts=0 ExitCode=0:15 NumNodes=1")
    return run


def test_whose_names_the_owner_the_group_the_mode_and_the_fix(shared):
    f = shared / "events.jsonl"
    f.write_text("")
    os.chown(f, TEAMMATE, TEAMMATE)
    f.chmod(0o644)
    with acting_as(NOBODY):
        assert perms.unwritable([shared / "absent", shared, f]) == f
        said = perms.refusal(f, "resubmitting run r")
    assert said.startswith(f"{f}: not writable by you (it is uid {TEAMMATE}'s, group gid {TEAMMATE}, -rw-r--r--; "
                           "you are nobody; a runs directory a team shares needs group write"), said
    assert "nothing was done" in said
    assert perms.whose(shared / "not" / "there").startswith(f"its folder {shared} is root's")


def test_a_teammates_run_is_refused_before_sbatch_and_nothing_is_queued(shared, fake_slurm, monkeypatch):
    from slurmtrain.runs import resubmit as resub

    run = teammates_run(shared, "alice-d")
    fake_slurm(scontrol="JobId=7 JobState=PREEMPTED Reason=None Requeue=1 Restarts=0 ExitCode=0:15 NumNodes=1")
    queued = []
    monkeypatch.setattr(resub, "submit_run", lambda *a, **k: queued.append(a))
    before = (run.path / "events.jsonl").read_text()
    with acting_as(NOBODY), pytest.raises(UsageError) as err:
        resub.resubmit(run)
    assert str(err.value).startswith(f"{run.path / 'events.jsonl'}: not writable by you (it is uid {TEAMMATE}'s"), err
    assert queued == [] and (run.path / "events.jsonl").read_text() == before
    # a job still running is said first: that refusal needs no write
    fake_slurm(scontrol="JobId=7 JobState=RUNNING Reason=None Requeue=1 Restarts=0 ExitCode=0:0 NumNodes=1")
    run.path.chmod(0o755)  # not even the lock file can be made
    with acting_as(NOBODY), pytest.raises(UsageError, match=r"job 7 is still RUNNING"):
        resub.resubmit(run)


def test_two_resubmits_of_one_run_go_one_after_the_other(tmp_path, fake_slurm, monkeypatch):
    """The second waits for the first's check and sbatch (and then sees its job queued)."""
    from slurmtrain.runs import resubmit as resub

    run = preempted_run(tmp_path, fake_slurm)
    queued = []
    monkeypatch.setattr(resub, "submit_run", lambda *a, **k: queued.append(a) or type("D", (), {"job_id": "8"})())
    with resub._one_at_a_time(run):  # the first resubmit, between its check and its sbatch
        second = threading.Thread(target=resub.resubmit, args=(run,))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and queued == []
    second.join(timeout=30)
    assert not second.is_alive() and len(queued) == 1


def test_a_private_run_in_a_shared_runs_directory_is_left_out_not_an_error(shared, fake_slurm):
    mine = rundir.create(shared, "bob-run")
    mine.update_manifest(name=mine.name, job_ids=["9"], state="submitted", nodes=1,
                         submitted_at="2026-11-28T04:00:00")
    private = rundir.create(shared, "private")
    private.update_manifest(name=private.name, job_ids=["8"], state="submitted", nodes=1)
    for p in [private.path, *private.path.rglob("*")]:
        os.chown(p, TEAMMATE, TEAMMATE)
    private.path.chmod(0o700)
    fake_slurm(scontrol="JobId=9 JobState=RUNNING Reason=None Requeue=1 Restarts=0 ExitCode=0:0 NumNodes=1")
    with acting_as(NOBODY):
        found = rundir.list_runs(shared)
        listed = CliRunner().invoke(main, ["runs", "--runs-dir", str(shared)])
        status = CliRunner().invoke(main, ["status", "--runs-dir", str(shared)])
    assert [r.name for r in found] == [mine.name]
    assert listed.exit_code == 0 and mine.name in listed.output, listed.output
    assert "USER" not in listed.output  # one person's runs: no column for it
    assert f"1 folder(s) under {shared} you cannot read, left out: {private.name} (it is uid {TEAMMATE}'s" \
        in listed.output, listed.output
    assert status.exit_code == 0 and mine.name in status.output, status.output
    with acting_as(NOBODY):
        by_name = CliRunner().invoke(main, ["status", "--runs-dir", str(shared), "priv"])
    assert by_name.exit_code == 2 and f"run 'priv': {private.name} under {shared} is not readable by you (it is " \
        f"uid {TEAMMATE}'s" in by_name.output, by_name.output


def test_a_run_after_a_teammates_run_it_cannot_tell_is_refused_before_it_is_made(shared):
    upstream = teammates_run(shared, "alice-e")
    (upstream.path / "dependents.jsonl").write_text("")
    os.chown(upstream.path / "dependents.jsonl", TEAMMATE, TEAMMATE)
    after = chain.After(run=upstream.name, path=str(upstream.path), job_id="7", kind="afterok")
    with acting_as(NOBODY), pytest.raises(UsageError, match="dependents.jsonl: not writable by you"):
        chain.refuse_unrecordable([after])


def test_cancelling_a_teammates_job_names_its_owner(fake_slurm, monkeypatch):
    fake = fake_slurm(scontrol="JobId=1002 UserId=alice(1001) JobState=RUNNING Reason=None Requeue=1 Restarts=0 "
                               "ExitCode=0:0 NumNodes=1")
    real = fake.__call__

    def refuse_update(argv, **kwargs):
        if argv[:2] == ["scontrol", "update"]:
            import subprocess
            return subprocess.CompletedProcess(argv, 1, "", "Invalid user id for job 1002\n")
        return real(argv, **kwargs)
    monkeypatch.setattr(slurmquery.subprocess, "run", refuse_update)
    with pytest.raises(SlurmError) as err:
        slurmquery.cancel("1002")
    assert str(err.value).startswith("job 1002 is alice's: only alice, or a Slurm operator or administrator, "
                                     "can cancel"), err
    assert not any(c[0] == "scancel" for c in fake.calls)


def test_events_and_the_watch_lock_follow_the_umask(tmp_path):
    """A team's umask 002 makes them group-writable (they were always 0644)."""
    from slurmtrain.runs import watcher

    run = rundir.create(tmp_path, "r")
    old = os.umask(0o002)
    try:
        events.append(run.path, "submitted", job_id="1")
        with watcher.claim(run):
            pass
    finally:
        os.umask(old)
    assert (run.path / "events.jsonl").stat().st_mode & 0o777 == 0o664
    assert (run.path / watcher.LOCK).stat().st_mode & 0o777 == 0o664


def test_a_teammates_private_run_named_by_its_path_is_refused_in_one_line_naming_its_owner(shared):
    private = teammates_run(shared, "private")
    private.path.chmod(0o700)
    with acting_as(NOBODY):
        result = CliRunner().invoke(main, ["status", str(private.path)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "Permission denied (" in result.output and f"uid {TEAMMATE}'s" in result.output and \
        "you are nobody; a runs directory a team shares needs group write" in result.output, result.output


def test_the_ledger_a_teammate_made_is_said_not_raised_and_forget_keeps_its_mode(shared):
    from slurmtrain import ledger

    ledger.add(shared, "stnode1", "doctor: gpu: slow")
    ledger.path(shared).chmod(0o664)
    ledger.forget(shared, ["stnode9"])
    assert ledger.path(shared).stat().st_mode & 0o777 == 0o664  # a rename kept the team's group write
    os.chown(ledger.path(shared), TEAMMATE, TEAMMATE)
    with acting_as(NOBODY):
        said = ledger.record(shared, "stnode2", "doctor: nccl: slow", source="doctor")
    assert said.startswith(f"could not record stnode2 in the bad-node ledger ({ledger.path(shared)}: "
                           "Permission denied; it is uid 4242's"), said
    assert [e.node for e in ledger.read(shared)] == ["stnode1"]


def test_a_checkpoint_beyond_keep_last_that_cannot_be_removed_is_said_once(shared, caplog):
    from slurmtrain.train import checkpoint

    old = shared / "checkpoints" / "step_10"
    old.mkdir(parents=True)
    (old / "rank0.distcp").write_text("x")
    for p in (old.parent, old, old / "rank0.distcp"):
        os.chown(p, TEAMMATE, TEAMMATE)
    old.chmod(0o755)
    with acting_as(NOBODY), caplog.at_level("WARNING", logger="slurmtrain.train"):
        checkpoint._remove(old)
        checkpoint._remove(old)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(f"could not remove {old}, beyond train.keep_last (it is uid "
                                                 f"{TEAMMATE}'s"), said
    assert old.exists()


def test_a_waiting_run_the_job_cannot_tell_is_said_and_the_job_ends_as_it_would(shared):
    """A teammate's run waiting for this one, its events not writable by this user: the
    supervisor says so, where it once ended on the PermissionError (exit 1, no summary)."""
    from slurmtrain.job.config import Job
    from slurmtrain.job.record import Record

    up = rundir.create(shared, "upstream")
    down = teammates_run(shared, "downstream")
    from slurmtrain import dependents
    dependents.add(up.path, down.name, str(down.path), "afterok")
    said = []
    record = Record(up.path, Job("12", "12", "12", 0, "n1"), lambda: 1, out=said.append)
    with acting_as(NOBODY):
        record.tell_dependents("failed")
    assert len(said) == 1 and said[0].startswith("slurmtrain: could not tell the runs waiting for this one that it "
                                                 f"will not complete ({down.path / 'events.jsonl'}: Permission denied; "
                                                 f"it is uid {TEAMMATE}'s"), said


def test_runs_of_more_than_one_person_say_whose_each_is(shared, fake_slurm):
    mine = rundir.create(shared, "bob-run")
    mine.update_manifest(name=mine.name, job_ids=["9"], state="submitted", nodes=1, submitted_at="2026-11-28T04:00:00")
    theirs = teammates_run(shared, "alice-run", job_id="9")
    fake_slurm(scontrol="JobId=9 JobState=RUNNING Reason=None Requeue=1 Restarts=0 ExitCode=0:0 NumNodes=1")
    listed = CliRunner().invoke(main, ["runs", "--runs-dir", str(shared)])
    header, *rows = [line for line in listed.output.splitlines() if line.startswith(("RUN", "bob-run", "alice-run"))]
    assert header.split()[-1] == "USER", listed.output
    ends = {r.split()[0]: r.rstrip() for r in rows}
    assert ends[mine.name].endswith(" root") and ends[theirs.name].endswith(f" uid {TEAMMATE}"), listed.output
    as_json = CliRunner().invoke(main, ["runs", "--runs-dir", str(shared), "--json"])
    users = {json.loads(line)["name"]: json.loads(line)["user"] for line in as_json.output.splitlines()}
    assert users == {mine.name: "root", theirs.name: f"uid {TEAMMATE}"}, as_json.output


def test_a_bare_status_in_a_shared_runs_directory_is_of_ones_own_latest_run(shared, fake_slurm):
    """A teammate submitted after you: `status` with no RUN is still yours."""
    fake_slurm(scontrol="JobId=9 JobState=RUNNING Reason=None Requeue=1 Restarts=0 ExitCode=0:0 NumNodes=1")
    mine = rundir.create(shared, "mine")
    mine.update_manifest(name=mine.name, job_ids=["9"], state="submitted", nodes=1, submitted_at="2026-11-28T04:00:00")
    theirs = teammates_run(shared, "theirs", job_id="9")  # the folder is the teammate's
    rundir.RunDir(theirs.path).update_manifest(submitted_at="2026-11-28T05:00:00")
    assert [r.name for r in rundir.list_runs(shared)] == [mine.name, theirs.name]  # theirs is the latest
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(shared)]).output
    assert f"run        {mine.name}" in out, out


def test_the_history_says_who_resubmitted_and_who_cancelled(tmp_path, fake_slurm, monkeypatch):
    from slurmtrain.runs import classify
    from slurmtrain.runs import resubmit as resub

    run = preempted_run(tmp_path, fake_slurm)

    def queued(run, args, tasks=None):
        run.update_manifest(job_ids=[*run.job_ids, "8"])
        return type("D", (), {"job_id": "8"})()
    monkeypatch.setattr(resub, "submit_run", queued)
    resub.resubmit(run)
    fake_slurm(scontrol="JobId=8 JobState=PENDING Reason=Priority Requeue=1 Restarts=0 ExitCode=0:0 NumNodes=1")
    cancelled = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), run.name])
    assert cancelled.exit_code == 0, cancelled.output
    said = classify.history(run.path)
    assert any(line.endswith("resubmitted as job 8 (after job 7) by root") for line in said), said
    assert any(line.endswith("cancel requested for job 8 by root") for line in said), said
    assert classify.classify(run.path).detail.startswith("cancelled by `slurmtrain cancel` (root)")
