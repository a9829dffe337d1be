"""One `resubmit --watch` per run (a lock in the run directory), `--detach`, and `status`
naming the watch (slurmtrain/runs/watcher.py). Real processes and locks; no Slurm is needed:
the watched run's last start has no end, so a watch asks Slurm and waits its poll."""

from __future__ import annotations

import os
import signal
import socket
import time

from click.testing import CliRunner

from runs_fakes import unended_run
from slurmtrain.cli import main
from slurmtrain.errors import UsageError
from slurmtrain.runs import watcher


def test_a_second_watch_of_a_run_is_refused_naming_the_first(tmp_path):
    run, _ = unended_run(tmp_path)
    assert watcher.holder(run) is None
    with watcher.claim(run, "watch.log"):
        who = watcher.holder(run)
        assert (who["pid"], who["host"], who["log"]) == (os.getpid(), socket.gethostname(), "watch.log")
        try:
            with watcher.claim(run):
                raise AssertionError("two watches of one run")
        except UsageError as err:
            assert str(err).startswith(f"run {run.name} is watched already by pid {os.getpid()} on "
                                       f"{socket.gethostname()} since "), err
            assert "would resubmit it a second time" in str(err)
        out = CliRunner().invoke(main, ["resubmit", "--watch", "--runs-dir", str(tmp_path), run.name])
        assert out.exit_code == 2 and "is watched already" in out.output, out.output
    assert watcher.holder(run) is None  # let go with the watch
    with watcher.claim(run):
        pass


def test_detach_needs_watch():
    out = CliRunner().invoke(main, ["resubmit", "--detach", "some-run"])
    assert out.exit_code == 2 and "--detach goes with --watch" in out.output, out.output


def test_a_detached_watch_holds_the_run_shows_in_status_and_goes_with_its_process(tmp_path, fake_slurm):
    run, _ = unended_run(tmp_path)
    fake_slurm(scontrol="", sacct=None)  # this process's `status`; the watch asks Slurm itself
    out = CliRunner().invoke(main, ["resubmit", "--watch", "--detach", "--poll", "60", "--runs-dir", str(tmp_path),
                                    run.name])
    assert out.exit_code == 0, out.output
    who = watcher.holder(run)
    try:
        assert who and who["log"] == str(run.path / watcher.LOG), who
        assert out.output.startswith(f"watching run {run.name} in the background: pid {who['pid']} on "), out.output
        assert out.output.rstrip().endswith(f"stop it with `kill {who['pid']}`"), out.output
        assert os.getsid(who["pid"]) == who["pid"]  # a session of its own: the shell's end does not end it
        status = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
        assert f"watch      `resubmit --watch`: pid {who['pid']} on " in status, status
        again = CliRunner().invoke(main, ["resubmit", "--watch", "--detach", "--runs-dir", str(tmp_path), run.name])
        assert again.exit_code == 2 and f"is watched already by pid {who['pid']}" in again.output, again.output
        said = (run.path / watcher.LOG).read_text()  # both watches write there: the second's refusal too
        assert f"is watched already by pid {who['pid']}" in said, said
    finally:
        if who:
            os.kill(who["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while watcher.holder(run) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watcher.holder(run) is None


def test_a_detached_watch_that_ends_at_once_says_why(tmp_path):
    from slurmtrain.runs import rundir

    run = rundir.create(tmp_path, "never")  # no job id: the watch refuses
    out = CliRunner().invoke(main, ["resubmit", "--watch", "--detach", str(run.path)])
    assert out.exit_code == 2, out.output
    assert f"the watch of run {run.name} ended at once (exit status 2): " in out.output, out.output
    assert "was never submitted" in out.output, out.output
