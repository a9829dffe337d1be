"""One run meets four faults and completes: a rank SIGKILLed (restarted in the job), a rank
SIGSTOPped (a hang, restarted in the job), a preemption (stop, checkpoint, requeue) and a
machine that dies hard (its slurmd and the job's processes on it SIGKILLed, as at a power
loss: its peers fail at once, srun waits for it until Slurm marks it down, so the
supervisor probes the nodes itself; the spare takes its place in the job, the node goes to
the bad-node ledger), on a three-node sandbox of its own (two nodes and a spare). The final weights are bitwise those of an uninterrupted
run, and `status` shows the goodput with each fault's cost.

In the same sandbox, a requeue that cannot leave its lost node out: the spare used up by one
lost node, a second one lost."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from slurmtrain import ledger, nodememory
from slurmtrain.runs import classify

from survival_util import (TRAIN, Reference, assert_nothing_lost, describe, events, job_field, kill_machine, named, rank_of, rank_pids, run_cli, slurm,
                           stop_until_hang, submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

# Steps paced at 0.4 s (debug.step_seconds): the faults need wall time between the saves,
# and a paced step costs a fraction of the CPU of a step that takes as long by computing.
STEPS = 180
TRAIN_180 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "20", "--set", "debug.step_seconds=0.4"]
MEMORY = ["--set", "train.memory_steps=5"]  # node memory between the durable saves


def saved_since(run: Path, name: str, k: int) -> bool:
    """A checkpoint after the k-th ``name`` event (the run trains again after that fault)."""
    evs = [e["event"] for e in events(run)]
    marks = [i for i, e in enumerate(evs) if e == name]
    return len(marks) >= k and "checkpoint_saved" in evs[marks[k - 1] + 1:]


def newer_in_memory(run: Path, job: str, restart: int) -> bool:
    """A whole step in node memory (each of the 2 ranks' copies, here and on the peer node)
    newer than the newest durable save."""
    files: dict[int, int] = {}
    for f in (nodememory.ROOT / f"{job}-{restart}").glob("*/step_*-*/rank*.pt"):
        step = int(f.parent.name[len("step_"):].split("-")[0])
        files[step] = files.get(step, 0) + 1
    whole = [step for step, n in files.items() if n == 4]
    return bool(whole) and max(whole) > max((e["step"] for e in named(run, "checkpoint_saved")), default=0)


def of_rank(run: Path, rank: str) -> int:
    return next(pid for pid in rank_pids(run) if rank_of(pid)[0] == rank)


def test_crash_hang_preemption_and_a_lost_node_in_one_run(sandbox_three_nodes, workdir, runs_dir):
    reference = Reference(workdir, TRAIN_180, "four-faults-reference")
    run, job = submit(runs_dir, workdir, ["--name", "four", "--nodes", "2", "--partition", "low", "--set",
                                          "slurm.spare_nodes=1", "--set", "resilience.hang_timeout=20"],
                      TRAIN_180 + MEMORY)
    two_ranks = lambda: len(rank_pids(run)) == 2  # noqa: E731
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved") and two_ranks(), 240, job)

    wait_until(run, "a copy in node memory", lambda: newer_in_memory(run, job, 0), 60, job)
    os.kill(of_rank(run, "0"), signal.SIGKILL)                                          # 1. a crash
    wait_until(run, "training after the crash", lambda: saved_since(run, "relaunched", 1) and two_ranks(), 180, job)

    victim = of_rank(run, "1")  # another node than the crash's: no node is named twice     # 2. a hang
    stop_until_hang(run, victim, job, 90)
    wait_until(run, "training after the hang", lambda: saved_since(run, "relaunched", 2) and two_ranks(), 180, job)

    slurm("sbatch", "--parsable", "-p", "high", "-N", "3", "--ntasks-per-node=4", "-J", "preemptor",  # 3. preempted
          "-o", "/dev/null", "--wrap", "sleep 5")
    wait_until(run, "the requeue", lambda: named(run, "requeue"), 120, job)
    wait_until(run, "training in the next start", lambda: saved_since(run, "started", 2) and two_ranks(), 240, job)

    # 4. a machine dies: one of the run's, not the batch host, where the supervisor itself runs
    # (that one's death is Slurm's to handle: it requeues the job once it marks the node down).
    wait_until(run, "a copy in node memory", lambda: newer_in_memory(run, job, 1), 60, job)
    host = job_field(job, "BatchHost")
    node = next(n for n in sorted({rank_of(pid)[1] for pid in rank_pids(run)}) if n != host)
    kill_machine(node, Path(sandbox_three_nodes.state_dir))
    assert wait_job_gone(job, run, 400) == "COMPLETED", describe(run)

    assert job_field(job, "Restarts") == "1"                   # the preemption's requeue only
    assert [e["attempt"] for e in named(run, "relaunched")] == [1, 2, 1], describe(run)
    assert [(e["nodes"], e["spares"]) for e in named(run, "nodes_lost")] == [(node, "stnode3")], describe(run)
    assert (node, "node_failure") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    assert [o.kind for o in classify.ends(run)] == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    assert_nothing_lost(run)  # each start resumed from the newest save, the preemption's own included
    # In the job (the crash, the hang, the lost node: its ranks' copies came from the peer
    # node) from node memory where a copy was newer than the durable save; after the
    # requeue from the durable one; and no copy is left in node memory.
    tiers = [e.get("tier", "durable") for e in named(run, "resumed")]
    assert [tiers[0], tiers[2], tiers[3]] == ["memory", "durable", "memory"], describe(run)
    assert named(run, "resumed")[3]["from_peer"], describe(run)  # the lost node's rank, from its peer's copy
    assert not list(nodememory.ROOT.glob(f"{job}-*")), list(nodememory.ROOT.glob(f"{job}-*/*"))
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir).stdout
    faults = re.findall(r"\d\d:\d\d:\d\d  ([a-z ]+) \((?:in the job|ended the start)\): .*; cost (\S+ ?\S*) of node time",
                        status)
    assert [kind for kind, _ in faults] == ["crash", "hang", "preempted", "node lost"], status
    assert status.count("goodput    ") == 1, status
    reference.assert_same_weights(run)


def test_a_node_lost_after_the_spare_is_used_is_waited_for_and_the_run_completes(sandbox_three_nodes, workdir,
                                                                                  runs_dir):
    """Two nodes and a spare. A node dies: the spare takes its place in the job. Then the
    other node that is not the batch host dies, and no spare is left: a requeue without it
    could never start (the job asks for its 2 nodes and its spare: 3, on a partition of 3;
    Slurm would hold it PENDING for ever), so the requeue keeps it within reach and says so.
    Once the dead machines are back in service, the job starts on 3 nodes again and
    completes from its newest save. (Slurm may then kill ranks of the new start on the nodes
    that came back: its kill of the old start's step, which has the same ids; seen once
    taking a node's step out, which the supervisor then left out for the spare. Only the
    first start's faults are the test's.)"""
    from slurmtrain import sandbox as lib

    lib.revive()  # the machine the test above killed: the job needs all three nodes
    run, job = submit(runs_dir, workdir, ["--name", "spare-used", "--nodes", "2", "--set", "slurm.spare_nodes=1"],
                      TRAIN + ["--train-steps", "100", "--save-steps", "15", "--set", "debug.step_seconds=0.4"])
    two_ranks = lambda: len(rank_pids(run)) == 2  # noqa: E731
    wait_until(run, "a checkpoint", lambda: named(run, "checkpoint_saved") and two_ranks(), 240, job)
    host = job_field(job, "BatchHost")
    state_dir = Path(sandbox_three_nodes.state_dir)
    lost = []
    try:
        for k in (1, 2):
            node = next(n for n in sorted({rank_of(pid)[1] for pid in rank_pids(run)}) if n != host)
            lost.append(node)
            kill_machine(node, state_dir)
            if k == 1:
                wait_until(run, "training on the spare", lambda: saved_since(run, "relaunched", 1) and two_ranks(),
                           180, job)
        wait_until(run, "the requeue", lambda: named(run, "requeue"), 180, job)
    finally:
        lib.revive()  # the dead machines' slurmd again: Slurm takes them back in service
    assert wait_job_gone(job, run, 300) == "COMPLETED", describe(run)

    first, second = lost
    first_start = [e for e in named(run, "nodes_lost") if e["restart"] == 0]  # later ones: Slurm's stale kill, above
    assert [(e["nodes"], e["spares"]) for e in first_start] == [(first, second), (second, "none")], describe(run)
    requeue = named(run, "requeue")[0]
    assert (requeue["restart"], requeue["waits_for"], requeue["exclude"]) == (0, second, ""), requeue
    log = "".join(p.read_text() for p in sorted((run / "logs").glob("job-*.out")))
    assert f"not leaving out {second}: partition debug has 3 node(s) for a job of 3" in log, log[-3000:]
    assert int(job_field(job, "Restarts")) >= 1 and (job_field(job, "ExcNodeList") or "(null)") == "(null)"
    assert [len(e["nodes"].split()) for e in named(run, "started")][:2] == [3, 3], describe(run)
    assert_nothing_lost(run)
    status = run_cli(["status", str(run)], cwd=workdir).stdout
    assert f"requeueing, to start when {second} is back in service (too few nodes without it)" in status, status
