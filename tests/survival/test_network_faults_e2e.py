"""Faults that come through the network, on networked sandbox nodes (`sandbox up --network`:
each node its own network namespace, eth0 on the sandbox's bridge): a node's link goes down
mid-run. Its ranks live on, blocked in a collective with their peers; no signal, no exit. The
supervisor sees a hang (no heartbeat), records the stacks it can reach, finds the node that
does not answer its probe, and puts the spare in its place; the run ends bitwise those of an
uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtrain import ledger

from survival_util import (TRAIN, Reference, assert_nothing_lost, describe, job_field, named, rank_of, rank_pids, run_cli,
                           submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

STEPS = 120
TRAIN_120 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "20"]


def test_a_link_down_mid_run_is_a_hang_and_the_spare_takes_the_nodes_place(sandbox_networked, workdir, runs_dir):
    reference = Reference(workdir, TRAIN_120, "link-down-reference")
    run, job = submit(runs_dir, workdir, ["--name", "link-down", "--nodes", "2", "--set", "slurm.spare_nodes=1",
                                          "--set", "resilience.hang_timeout=20"],
                      TRAIN_120)
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved") and len(rank_pids(run)) == 2, 240, job)
    host = job_field(job, "BatchHost")
    node = next(n for n in sorted({rank_of(pid)[1] for pid in rank_pids(run)}) if n != host)
    cut = run_cli(["sandbox", "fault", node, "link-down", "--for", "150"], cwd=workdir)
    assert f"{node}'s link is down" in cut.stdout, cut.stdout + cut.stderr
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
