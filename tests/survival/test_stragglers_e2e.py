"""A straggler on the sandbox: one node's rank of the built-in trainer is paused and
resumed in a loop (SIGSTOP for 95 ms of every 100: at most 5% of a CPU, as a throttled or
shared device would give it). A quarter of a CPU was not enough: on a CI machine with a
load of 8 every rank gets about that much, and the throttled one was as fast as the other.
Its compute probe takes several times as long as the other rank's;
the supervisor names the node in the events, `status` and the bad-node ledger, and the
run goes on."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from slurmtrain import ledger

from survival_util import (TRAIN_COMPUTING, describe, named, rank_of, rank_pids, run_cli, submit, wait_job_gone,
                           wait_until)

pytestmark = pytest.mark.slurm


def throttle(pid: int, done: threading.Event) -> None:
    while not done.is_set():
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.095)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.005)
        except ProcessLookupError:
            return
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def test_a_slowed_node_is_named_a_straggler_in_status_and_the_ledger(workdir, runs_dir):
    # 100%, not the default 30: the throttled rank computes several times as slowly, while on a
    # CI machine running four workers the other rank was once named, 30% slower for a window.
    run, job = submit(runs_dir, workdir, ["--name", "straggler", "--set", "resilience.straggler_pct=100"],
                      TRAIN_COMPUTING + ["--train-steps", "3000", "--save-steps", "500"])
    wait_until(run, "both ranks training", lambda: named(run, "first_step") and len(rank_pids(run)) == 2, 240, job)
    victim = rank_pids(run)[-1]
    _, node = rank_of(victim)
    done = threading.Event()
    slowing = threading.Thread(target=throttle, args=(victim, done), daemon=True)
    slowing.start()
    # Each node is named once per start. On a loaded CI machine the other node's rank was
    # once named first (its probe 46.9 ms against 9.2 ms, 13 s into the throttling: the
    # sandbox's nodes share two cores with the rest of the suite); that is the machine's
    # noise, not the fault under test, so the test waits for the throttled node's name.
    victim_named = lambda: [s for s in named(run, "straggler") if s["node"] == node]  # noqa: E731
    try:
        wait_until(run, f"{node} to be named a straggler", victim_named, 120, job)
    finally:
        done.set()
        slowing.join(timeout=5)
    [s] = victim_named()
    assert s["pct"] > 100, s
    status = run_cli(["status", "--runs-dir", str(runs_dir), run.name], cwd=workdir).stdout
    assert "stragglers" in status and f"{node}: {s['pct']}% slower than the other nodes" in status, status
    assert (node, "straggler") in [(e.node, e.source) for e in ledger.read(runs_dir)]
    run_cli(["cancel", "--runs-dir", str(runs_dir), run.name], cwd=workdir)  # named while it runs: enough
    assert wait_job_gone(job, run, 120) == "CANCELLED", describe(run)
