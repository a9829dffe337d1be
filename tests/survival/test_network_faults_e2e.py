"""Faults that come through the network, on networked sandbox nodes (`sandbox up --network`:
each node its own network namespace, eth0 on the sandbox's bridge): a node's link goes down
mid-run. Its ranks live on, blocked in a collective with their peers; no signal, no exit. The
supervisor sees a hang (no heartbeat), records the stacks it can reach, finds the node that
does not answer its probe, and puts the spare in its place, or, without one, requeues the job
without the node; either run ends bitwise those of an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain import ledger
from slurmtrain.runs import classify

from survival_util import (REPO, TORCHRUN, TRAIN, assert_nothing_lost, describe, job_field, named, rank_of, rank_pids,
                           run_cli, shared_reference, submit, wait_job_gone, wait_until)

pytestmark = pytest.mark.slurm

STEPS = 120
TRAIN_120 = TRAIN + ["--train-steps", str(STEPS), "--save-steps", "20"]


@pytest.fixture(scope="module")
def reference(workdir):
    yield from shared_reference(workdir, TRAIN_120, "link-down-reference")


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
    run, job = submit(runs_dir, workdir, [*TORCHRUN, "--name", "link-down", "--nodes", "2",
                                          "--set", "slurm.spare_nodes=1",
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
    # The peer waits in a collective: a step's all-reduce (distributed_c10d.py), FSDP's wait for
    # an all-gather or a DTensor's (their own modules), or a save's: each is under torch/distributed.
    assert "torch/distributed/" in stacks[f"{host}.txt"], stacks
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
        # The last step logged before the link slows: a step read after the command may already
        # be a slow one (a loaded machine runs steps between the two; CI saw the stretch begin
        # one step before the step read then).
        first = last_step(run)
        slowed = run_cli(["sandbox", "fault", node, "slow-link", "--rate", "5mbit"], cwd=workdir)
        assert "limited to 5mbit" in slowed.stdout, slowed.stdout + slowed.stderr
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
    stretches = json.loads(run_cli(["status", "--json", str(run)], cwd=workdir).stdout)["slow"]
    slow = max(stretches, key=lambda x: x["cost_s"])  # a loaded machine may add a short one of its own
    assert first <= slow["first"] and slow["last"] <= healed + 2 and slow["factor"] >= 2, (stretches, first, healed)
    assert f"slow       steps {slow['first']}-{slow['last']} at " in status, status
    assert_nothing_lost(run)
    reference.assert_same_weights(run)


# The trainer once the test says so (a file in the shared working directory): a start-up that
# lasts until the node is lost between its joining (its setup lines run) and the first step,
# as a large model's load would.
LATE_START = r"""
import os, sys, time
while not os.path.exists("go"):
    time.sleep(0.2)
os.execv(sys.executable, [sys.executable, "-m", "slurmtrain.train", *sys.argv[1:]])
"""


def test_a_node_cut_off_before_the_first_step_is_found_by_the_probe(sandbox_networked, workdir, runs_dir,
                                                                     reference):
    """Every node joined, then one's link went down: no task fails, no rank steps, its peers
    wait in the rendezvous. rendezvous_timeout (30 s) after the join the supervisor probes,
    finds the node silent and puts the spare in its place; the run completes bitwise."""
    from slurmtrain import arrivals

    (workdir / "late_start.py").write_text(LATE_START)
    (workdir / "go").unlink(missing_ok=True)
    run, job = submit(runs_dir, workdir, ["--name", "cut-at-start", "--nodes", "2", "--set", "slurm.spare_nodes=1",
                                          "--set", "resilience.rendezvous_timeout=30"],
                      ["python3", "late_start.py", *TRAIN_120[3:]])
    wait_until(run, "both nodes joined", lambda: len(arrivals.arrived(arrivals.marks_dir(run, job))) == 2, 240, job)
    host = job_field(job, "BatchHost")
    node = next(n for n in arrivals.arrived(arrivals.marks_dir(run, job)) if n != host)
    cut = run_cli(["sandbox", "fault", node, "link-down"], cwd=workdir)
    assert f"{node}'s link is down" in cut.stdout, cut.stdout + cut.stderr
    (workdir / "go").touch()  # the ranks start: the cut node's cannot reach their peers
    try:
        assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)
    finally:
        run_cli(["sandbox", "fault", node, "heal"], cwd=workdir, check=False)

    log = "".join(p.read_text() for p in (run / "logs").glob("job-*.out"))
    assert f"no heartbeat from any rank 30 s after every node joined: node(s) {node} do not answer" in log, log[-3000:]
    [lost] = named(run, "nodes_lost")
    assert (lost["nodes"], lost["spares"]) == (node, "stnode3"), describe(run)
    assert not named(run, "hang") and named(run, "first_step")[0]["launch"] == 2, describe(run)
    assert (node, "node_failure") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    reference.assert_same_weights(run)


def test_the_batch_host_powered_off_mid_run_is_a_node_failure_and_the_run_resumes(sandbox_networked, workdir,
                                                                                    runs_dir, reference):
    """The machine the supervisor runs on dies at once (`sandbox fault NODE power-off`: its link
    down, its slurmd, steps and tasks killed). Nothing of the job is left to act: Slurm marks
    the node down (SlurmdTimeout, 60 s here) and requeues the job, which starts on the
    partition's other two nodes and resumes from the newest save; `status` says node failure
    and names the node."""
    run, job = submit(runs_dir, workdir, ["--name", "host-off", "--nodes", "2"], TRAIN_120)
    host, _ = saved_nodes(run, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    off = run_cli(["sandbox", "fault", host, "power-off"], cwd=workdir)
    assert f"{host} is off" in off.stdout, off.stdout + off.stderr
    healed = run_cli(["sandbox", "fault", host, "heal"], cwd=workdir)  # a link mended is no machine started
    assert f"{host}'s slurmd is not running (powered off): `slurmtrain sandbox fault {host} power-on`" \
        in healed.stdout, healed.stdout
    try:
        assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)
    finally:
        on = run_cli(["sandbox", "fault", host, "power-on"], cwd=workdir, check=False)
    assert on.returncode == 0 and f"{host} is on" in on.stdout, on.stdout + on.stderr

    assert job_field(job, "Restarts") == "1", describe(run)
    starts = [e["nodes"].split() for e in named(run, "started")]
    assert len(starts) == 2 and host in starts[0] and host not in starts[1], starts
    assert [o.kind for o in classify.ends(run)] == [classify.NODE_FAILURE, classify.COMPLETED], describe(run)
    status = run_cli(["status", str(run)], cwd=workdir).stdout
    assert "node failure" in status and host in status, status
    assert named(run, "resumed")[0]["step"] >= saved, describe(run)  # the newest save: its steps since are lost
    reference.assert_same_weights(run)


def test_a_job_with_a_spare_stranded_by_its_batch_host_is_requeued_by_the_watch(sandbox_networked, workdir,
                                                                                 runs_dir, reference):
    """With a spare the job runs with --no-kill, and when its batch host dies Slurm (22.05)
    keeps it RUNNING on the other nodes with nothing of it left running, until its time
    limit. `slurmtrain resubmit --watch`, following the run from the login node, sees the
    batch host DOWN (after SlurmdTimeout, 60 s here) and requeues the job; once the node is
    back (the job asks for its 2 nodes and the spare: 3 of 3), the next start resumes from
    the newest save and names the node: a node failure. (The node's own state, from
    scontrol: `sinfo -t down` left it out as "mixed*" for up to five minutes after Slurm
    set it DOWN, and this test failed three times waiting.)"""
    run, job = submit(runs_dir, workdir, ["--name", "host-off-spare", "--nodes", "2",
                                          "--set", "slurm.spare_nodes=1"], TRAIN_120)
    host, _ = saved_nodes(run, job)
    saved = named(run, "checkpoint_saved")[-1]["step"]
    trace = workdir / f"{run.name}-slurm-calls.log"  # the watch's Slurm calls, shown when it fails (not in the
    # run directory: a file growing there is progress, and the wait would never stall)
    watch = subprocess.Popen([sys.executable, "-m", "slurmtrain", "resubmit", "--watch", "--poll", "5", str(run)],
                             cwd=workdir, env={**os.environ, "PYTHONPATH": str(REPO), "SLURMTRAIN_SLURM_TRACE": str(trace)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        off = run_cli(["sandbox", "fault", host, "power-off"], cwd=workdir)
        assert f"{host} is off" in off.stdout, off.stdout + off.stderr
        try:
            wait_until(run, "the watch's requeue", lambda: job_field(job, "Restarts") == "1" or watch.poll() is not None,
                       240, job)
            assert watch.poll() is None, watch.communicate()[0]
        except AssertionError as err:
            watch.kill()
            calls = trace.read_text() if trace.exists() else "(none)"
            raise AssertionError(f"{err}\nthe watch said:\n{watch.communicate()[0]}\nits Slurm calls:\n{calls}") from None
        finally:
            on = run_cli(["sandbox", "fault", host, "power-on"], cwd=workdir, check=False)
        assert on.returncode == 0, on.stdout + on.stderr
        assert wait_job_gone(job, run, 600) == "COMPLETED", describe(run)
        out, _ = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert f"job {job}: its batch host {host} is down, and Slurm keeps the job RUNNING" in out, out
    assert watch.returncode == 0 and f"run {run.name}: completed" in out, out
    assert job_field(job, "Restarts") == "1", describe(run)
    assert (host, "node_failure") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    assert [o.kind for o in classify.ends(run)] == [classify.NODE_FAILURE, classify.COMPLETED], describe(run)
    assert named(run, "resumed")[0]["step"] >= saved, describe(run)
    reference.assert_same_weights(run)


def last_step(run: Path) -> int:
    from slurmtrain.runs import progress

    return progress.last_step(run)
