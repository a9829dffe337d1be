"""A node lost in the job, with a spare (slurm.spare_nodes = 1), on a sandbox of three
nodes: the run trains on two; the machine of one of them dies hard (its slurmd and every
process of the job on it are SIGKILLed, as at a power loss). Its peer's collectives fail
at once; srun waits for the dead node's tasks until Slurm marks it down, so the
supervisor probes the nodes itself, ends the launch, leaves the node out (bad-node
ledger) and starts again on the other node and the spare: no queue, no new job start,
and the final weights are those of an uninterrupted run."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from slurmtrain import ledger
from slurmtrain.runs import classify

from survival_util import (TRAIN, Reference, describe, job_field, named, rank_of, rank_pids, run_cli, submit,
                           wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

STEPS = 60
TRAIN_60 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "10"]


def kill_machine(node: str, state_dir: Path) -> list[int]:
    """SIGKILL the node's slurmd and every process of a job step on it (its slurmstepd and
    the tasks below it): the sandbox's nodes share this machine, so by their environment."""
    victims = {int((state_dir / "run" / f"slurmd-{node}.pid").read_text())}
    conf = f"SLURM_CONF={state_dir}/slurm.conf".encode()
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if f"SLURMD_NODENAME={node}".encode() not in env or conf not in env:
                continue
            victims.add(int(proc.name))
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if b"slurmstepd" in (Path("/proc") / str(parent) / "cmdline").read_bytes():
                victims.add(parent)
        except (OSError, ValueError):
            continue
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(victims)


def test_a_dead_node_is_replaced_by_the_spare_in_the_job_and_the_run_ends_bitwise(
        sandbox_three_nodes, workdir, runs_dir):
    reference = Reference(workdir, TRAIN_60, "spare-reference")
    run, job = submit(runs_dir, workdir, ["--name", "spare", "--nodes", "2", "--set", "slurm.spare_nodes=1"],
                      TRAIN_60)
    wait_until(run, "a checkpoint, and both ranks running",
               lambda: named(run, "checkpoint_saved") and len(rank_pids(run)) == 2, 240, job)
    [started] = named(run, "started")
    assert started["nodes"].split() == ["stnode1", "stnode2", "stnode3"] and started["spares"] == "stnode3"
    _, victim = rank_of(rank_pids(run)[-1])
    assert victim == "stnode2"
    kill_machine(victim, Path(sandbox_three_nodes.state_dir))
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    assert job_field(job, "Restarts") == "0"  # never went back to the queue
    [lost] = named(run, "nodes_lost")
    assert (lost["nodes"], lost["spares"]) == ("stnode2", "stnode3"), describe(run)
    assert [e["attempt"] for e in named(run, "relaunched")] == [1], describe(run)
    assert named(run, "finished")[0]["step"] == STEPS
    assert [o.kind for o in classify.ends(run)] == [classify.COMPLETED], describe(run)
    assert [(e.node, e.source) for e in ledger.read(runs_dir)] == [("stnode2", "node_failure")]
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir).stdout
    assert "node lost (in the job): node(s) stnode2 lost; in their place: stnode3" in status, status
    reference.assert_same_weights(run)
