"""The derived hang timeout (resilience.hang_timeout = 0): two minutes for a paced program
once its first steps are done, ten for any other, and ten for a save or evaluation that
still beats (slurmtrain/job/hangs.py, slurmtrain/heartbeat.py)."""

from __future__ import annotations

import os
import time

import pytest

from slurmtrain import heartbeat
from slurmtrain.job import hangs

T0 = 1_700_000_000.0


def write(folder, rank: int, at: float, line: str) -> None:
    """Rank ``rank``'s heartbeat file says ``line``, written at wall-clock ``at``."""
    folder.mkdir(exist_ok=True)
    path = folder / str(rank)
    path.write_text(line + "\n")
    os.utime(path, (at, at))


def beat_steps(watch: hangs.HangWatch, folder, steps: int, flags: str = "") -> float:
    """Two ranks beat steps 1..``steps``, one a second, checked as the supervisor does;
    returns the time of the last beat."""
    for step in range(1, steps + 1):
        at = T0 + step
        for rank in (0, 1):
            write(folder, rank, at, f"{step} n{rank + 1} {100 + rank} {flags}".strip())
        assert watch.check(at) is None
    return at


@pytest.mark.parametrize("flags, steps, quiet, hung", [
    ("paced", 10, 119, False), ("paced", 10, 125, True),   # paced and settled: two minutes
    ("", 10, 590, False), ("", 10, 605, True),             # not paced: ten minutes
    ("paced", 2, 300, False),                              # paced, but still in its first steps
])
def test_the_floor_is_two_minutes_only_for_a_paced_program_past_its_first_steps(tmp_path, flags, steps, quiet,
                                                                                hung):
    watch = hangs.HangWatch(tmp_path / "hb", 0)
    last = beat_steps(watch, tmp_path / "hb", steps, flags)
    found = watch.check(last + quiet)
    assert (found is not None) == hung, (watch.timeout(), found)
    if hung:
        assert found.timeout == (hangs.HANG_FLOOR_S if flags else hangs.UNPACED_FLOOR_S)


def test_a_save_that_keeps_beating_is_given_ten_minutes_and_then_named(tmp_path):
    folder = tmp_path / "hb"
    watch = hangs.HangWatch(folder, 0)
    last = beat_steps(watch, folder, 10, "paced")
    since = last + 1
    for at in range(int(since) + 5, int(since) + hangs.BUSY_S - 5, 5):  # both ranks' saves beat from a thread
        write(folder, 1, at - 2, f"10 n2 101 paced busy=save@{since}")
        write(folder, 0, at, f"10 n1 100 paced busy=save@{since}")
        assert watch.check(at) is None, at
    at = since + hangs.BUSY_S + 1
    write(folder, 0, at, f"10 n1 100 paced busy=save@{since}")
    found = watch.check(at)
    assert found is not None and found.timeout == hangs.BUSY_S
    assert found.ranks == "1" and found.nodes == "n2"  # the one that beat last longest ago is named


def test_a_rank_silent_while_its_peers_are_busy_is_a_hang_after_the_usual_timeout(tmp_path):
    """A busy rank beats from a thread: one that goes silent mid-save is stopped or gone, and
    its peers beat on only because they wait for it (a copy into its node memory). Named after
    the usual timeout (two minutes, paced), not the ten minutes a save that beats is given."""
    folder = tmp_path / "hb"
    watch = hangs.HangWatch(folder, 0)
    last = beat_steps(watch, folder, 10, "paced")
    since = last + 1
    write(folder, 1, since + 1, f"10 n2 101 paced busy=save@{since}")  # rank 1 stopped mid-save
    for at in range(int(since) + 5, int(since) + hangs.HANG_FLOOR_S, 5):  # rank 0's save beats on
        write(folder, 0, at, f"10 n1 100 paced busy=save@{since}")
        assert watch.check(at) is None, at
    at = since + hangs.HANG_FLOOR_S + 5
    write(folder, 0, at, f"10 n1 100 paced busy=save@{since}")
    found = watch.check(at)
    assert found is not None and found.timeout == hangs.HANG_FLOOR_S and found.quiet >= hangs.HANG_FLOOR_S
    assert found.ranks == "1" and found.nodes == "n2"


def test_busy_beats_from_a_thread_while_the_work_runs_and_clears_after(tmp_path, monkeypatch):
    monkeypatch.setenv(heartbeat.ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(heartbeat, "_last", [0.0])
    monkeypatch.setattr(heartbeat, "_said", {"step": None, "ms": None, "paced": False, "busy": False})
    heartbeat.beat(42, 1.5, paced=True)
    before = time.time()
    with heartbeat.busy("save"):
        time.sleep(heartbeat.EVERY_S * 2.5)
        [during] = heartbeat.read(tmp_path)
        with heartbeat.busy("save"):  # nested (a save that waits for the one before): one thread
            pass
        [nested] = heartbeat.read(tmp_path)
    [after] = heartbeat.read(tmp_path)
    assert (during.step, during.paced, during.busy, during.compute_ms) == (42, True, "save", 1.5)
    assert before - 0.1 <= during.busy_since <= during.time + 0.1
    assert nested.busy == "save" and nested.busy_since == during.busy_since
    assert (after.step, after.paced, after.busy, after.busy_since) == (42, True, None, None)
