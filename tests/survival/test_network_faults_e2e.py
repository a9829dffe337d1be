"""Faults that come through the network, on networked sandbox nodes (`sandbox up --network`:
each node its own network namespace, eth0 on the sandbox's bridge): a node's link goes down
mid-run. Its ranks live on, blocked in a collective with their peers; no signal, no exit. The
supervisor sees a hang (no heartbeat), records the stacks it can reach, finds the node that
does not answer its probe, and puts the spare in its place, or, without one, requeues the job
without the node; either run ends bitwise those of an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmtrain import ledger

from survival_util import (TRAIN, Reference, assert_nothing_lost, describe, job_field, named, rank_of, rank_pids, run_cli,
                           submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

STEPS = 120
TRAIN_120 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "20"]


@pytest.fixture(scope="module")
def reference(workdir):
    ref = Reference(workdir, TRAIN_120, "link-down-reference")
    yield ref
    if ref.proc.poll() is None:
        ref.proc.kill()


def saved_nodes(run: Path, job: str) -> tuple[str, str]:
    """Once the run has saved: (its batch host, where the supervisor runs; its other node)."""
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved") and len(rank_pids(run)) == 2, 240, job)
    host = job_field(job, "BatchHost")
    return host, next(n for n in sorted({rank_of(pid)[1] for pid in rank_pids(run)}) if n != host)


def cut_link(node: str, workdir: Path, seconds: int) -> None:
    cut = run_cli(["sandbox", "fault", node, "link-down", "--for", str(seconds)], cwd=workdir)
    assert f"{node}'s link is down" in cut.stdout, cut.stdout + cut.stderr


def test_a_link_down_mid_run_is_a_hang_and_the_spare_takes_the_nodes_place(sandbox_networked, workdir, runs_dir,
                                                                            reference):
    run, job = submit(runs_dir, workdir, ["--name", "link-down", "--nodes", "2", "--set", "slurm.spare_nodes=1",
                                          "--set", "resilience.hang_timeout=20"],
                      TRAIN_120)
    host, node = saved_nodes(run, job)
    cut_link(node, workdir, 150)
    try:
        assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)
    finally:
        run_cli(["sandbox", "fault", node, "heal"], cwd=workdir, check=False)

    [hang] = named(run, "hang")
    assert hang["seconds"] >= 20, hang
    stacks = {p.name.split("-", 1)[1]: p.read_text() for p in Path(hang["stacks"]).iterdir()}
    assert "distributed_c10d.py" in stacks[f"{host}.txt"], stacks  # the peer waits in a collective (a step's, a save's)
    assert stacks[f"{node}.txt"].startswith(f"no stack: {node} did not answer"), stacks
    assert [(e["nodes"], e["spares"]) for e in named(run, "nodes_lost")] == [(node, "stnode3")], describe(run)
    assert (node, "node_failure") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    assert job_field(job, "Restarts") == "0", describe(run)  # all in the job: no requeue
    assert [e["why"] for e in named(run, "relaunched")][-1:] == ["nodes lost"], describe(run)
    assert_nothing_lost(run)  # the relaunch resumed from the newest save before the hang
    reference.assert_same_weights(run)


def test_a_slow_link_then_a_link_down_without_a_spare(sandbox_networked, workdir, runs_dir, reference):
    """The node's link slowed to 5 Mbit/s for 8 steps: `status` shows the stretch of slow
    steps and what it cost. Then its link goes down and there is no spare: the node is left
    out of a requeue (the partition has a third node), and the run resumes on the other two
    from its newest save."""
    run, job = submit(runs_dir, workdir, ["--name", "slow-then-down", "--nodes", "2",
                                          "--set", "resilience.hang_timeout=20"], TRAIN_120 + ["--log-steps", "1"])
    host, node = saved_nodes(run, job)
    try:
        slowed = run_cli(["sandbox", "fault", node, "slow-link", "--rate", "5mbit"], cwd=workdir)
        assert "limited to 5mbit" in slowed.stdout, slowed.stdout + slowed.stderr
        first = last_step(run)
        wait_until(run, "8 slow steps", lambda: last_step(run) >= first + 8, 120, job)
        run_cli(["sandbox", "fault", node, "heal"], cwd=workdir)
        healed = last_step(run)
        # the slow steps saved before the cut: the requeued run does not train them again
        wait_until(run, "a save after the slow steps", lambda: named(run, "checkpoint_saved")[-1]["step"] > healed,
                   120, job)
        cut_link(node, workdir, 90)
        assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)
    finally:
        run_cli(["sandbox", "fault", node, "heal"], cwd=workdir, check=False)

    [hang] = named(run, "hang")
    assert hang["seconds"] >= 20, hang
    [requeue] = named(run, "requeue")
    assert (requeue["reason"], requeue["exclude"]) == ("node", node), describe(run)
    assert job_field(job, "Restarts") == "1" and node in (job_field(job, "ExcNodeList") or ""), describe(run)
    starts = [e["nodes"].split() for e in named(run, "started")]
    assert len(starts) == 2 and node in starts[0] and node not in starts[1] and host in starts[1], starts
    assert (node, "node_failure") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    status = run_cli(["status", str(run)], cwd=workdir).stdout
    assert node in status, status
    [slow] = json.loads(run_cli(["status", "--json", str(run)], cwd=workdir).stdout)["slow"]
    assert first <= slow["first"] and slow["last"] <= healed + 2 and slow["factor"] >= 2, (slow, first, healed)
    assert f"slow       steps {slow['first']}-{slow['last']} at " in status, status
    assert_nothing_lost(run)
    reference.assert_same_weights(run)


def last_step(run: Path) -> int:
    from slurmtrain.runs import progress

    return progress.last_step(run)
