"""The test helpers' waits (tests/waiting.py) fail on a stall, not on a slow but moving job."""

from __future__ import annotations

import os
import time

import pytest

import waiting


def test_a_wait_that_keeps_progressing_outlasts_the_stall_window():
    ticks = []

    def pred():
        ticks.append(1)
        return len(ticks) >= 10  # ~0.5 s in all, longer than the 0.2 s stall window

    assert waiting.wait_for("ticks", pred, lambda: len(ticks), poll=0.05, stall=0.2)


def test_a_wait_without_progress_fails_naming_what_it_waited_for():
    with pytest.raises(AssertionError, match=r"no progress for 0 s .* waiting for nothing\ndetails"):
        waiting.wait_for("nothing", lambda: False, lambda: 0, poll=0.05, stall=0.3, details=lambda: "details")


def test_a_failed_wait_shows_the_slurm_queue(tmp_path, monkeypatch):
    """A stalled job's cause is often another job (one left from an earlier run holding the
    nodes) or a node that is down: the failure shows squeue and sinfo of the sandbox."""
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    for tool, text in (("squeue", "1840 RUNNING None wrap root stnode[1-2] 9:59"), ("sinfo", "stnode1 down* x")):
        (stand_in / tool).write_text(f"#!/bin/sh\necho '{text}'\n")
        (stand_in / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    with pytest.raises(AssertionError) as err:
        waiting.wait_for("a job", lambda: False, lambda: 0, poll=0.05, stall=0.2)
    assert "$ squeue -a" in str(err.value) and "1840 RUNNING None wrap" in str(err.value)
    assert "stnode1 down* x" in str(err.value)
    monkeypatch.delenv("SLURM_CONF")
    assert waiting.slurm_queue() == "(no SLURM_CONF: no queue to show)"


def test_the_cap_ends_even_a_progressing_wait():
    with pytest.raises(AssertionError, match="still waiting for forever after 0 s"):
        waiting.wait_for("forever", lambda: False, time.monotonic, poll=0.05, cap=0.3)


def test_run_kills_a_silent_process_but_not_a_chatty_one(tmp_path):
    chatty = "for i in 0 1 2 3 4 5; do echo $i; sleep 0.25; done"  # ~1.5 s, longer than the window
    done = waiting.run(["bash", "-c", chatty], "chatty", stall=1)
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(6)]
    started = time.monotonic()
    with pytest.raises(AssertionError, match="silent: killed after no progress"):
        waiting.run(["sleep", "60"], "silent", stall=0.5)
    assert time.monotonic() - started < 30


def test_files_fingerprint_sees_appends(tmp_path):
    (tmp_path / "logs").mkdir()
    before = waiting.files_fingerprint(tmp_path / "events.jsonl", tmp_path / "logs")
    (tmp_path / "logs" / "job-1.out").write_text("x\n")
    assert waiting.files_fingerprint(tmp_path / "events.jsonl", tmp_path / "logs") != before
