"""Stragglers (job/stragglers.py) from the compute times ranks send with their heartbeats,
the heartbeat's optional fourth field, and the trainer's probe that measures it."""

from __future__ import annotations

import os

import pytest

from slurmtrain import heartbeat
from slurmtrain.job.stragglers import HOLD_S, StragglerWatch


def beat(rank: int, node: str, ms: float | None) -> heartbeat.Beat:
    return heartbeat.Beat(rank, 10, node, 100 + rank, 0.0, ms)


def test_a_node_slower_than_the_others_for_the_hold_time_is_named_once():
    watch = StragglerWatch(pct=30)
    beats = [beat(0, "n1", 10.0), beat(1, "n1", 11.0), beat(2, "n2", 10.5), beat(3, "n3", 16.0)]
    assert watch.check(beats, now=0) == []                   # seen slower: not yet
    assert watch.check(beats, now=HOLD_S - 1) == []
    [s] = watch.check(beats, now=HOLD_S)
    assert (s.node, s.compute_ms, s.others_ms) == ("n3", 16.0, 10.75)  # n1's slowest rank, n2's: median 10.75
    assert round(s.pct) == 49
    assert watch.check(beats, now=HOLD_S + 5) == []          # once per job start


def test_a_moment_of_noise_is_no_straggler():
    watch = StragglerWatch(pct=30)
    slow = [beat(0, "n1", 10.0), beat(1, "n2", 20.0)]
    fine = [beat(0, "n1", 10.0), beat(1, "n2", 10.2)]
    watch.check(slow, now=0)
    watch.check(fine, now=5)                                  # back to normal: the hold starts over
    assert watch.check(slow, now=HOLD_S + 1) == []
    assert [s.node for s in watch.check(slow, now=2 * HOLD_S + 2)] == ["n2"]


@pytest.mark.parametrize("beats", [
    [beat(0, "n1", 10.0), beat(1, "n1", 30.0)],               # one node: nothing to compare with
    [beat(0, "n1", None), beat(1, "n2", None)],               # a program that sends no compute time
    [beat(0, "n1", 10.0), beat(1, "n2", 12.9)],               # within 30%
])
def test_nothing_to_judge(beats):
    watch = StragglerWatch(pct=30)
    assert watch.check(beats, 0) == [] and watch.check(beats, 2 * HOLD_S) == []


def test_off_at_zero():
    watch = StragglerWatch(pct=0)
    beats = [beat(0, "n1", 10.0), beat(1, "n2", 100.0)]
    assert watch.check(beats, 0) == [] and watch.check(beats, 2 * HOLD_S) == []


def test_the_heartbeat_carries_the_compute_time_and_reads_lines_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv(heartbeat.ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    monkeypatch.setattr(heartbeat, "_last", [0.0])
    heartbeat.beat(12, compute_ms=4.25)
    (tmp_path / "5").write_text("9 n8 123\n")                 # a program that measures nothing
    got = {b.rank: (b.step, b.node, b.pid, b.compute_ms) for b in heartbeat.read(tmp_path)}
    assert got == {3: (12, "n7", os.getpid(), 4.25), 5: (9, "n8", 123, None)}


def test_the_trainers_probe_times_a_fixed_product_every_few_steps():
    torch = pytest.importorskip("torch")
    from slurmtrain.train.probe import ComputeProbe

    state = torch.random.get_rng_state()
    probe = ComputeProbe(torch.device("cpu"), every=5, window=3)
    assert probe.mean_ms is None
    for step in range(1, 21):
        probe.maybe(step)
    assert len(probe.times) == 3 and probe.mean_ms > 0       # steps 5..20: four timings, the last three kept
    assert torch.equal(torch.random.get_rng_state(), state)  # the training's random numbers are untouched
