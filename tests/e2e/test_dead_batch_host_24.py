"""The batch host killed hard (its slurmd, steps and tasks SIGKILLed) on Slurm 24.11, in the
Slurm-version lane only (scripts/slurm_lane.sh): the suite shows the same on 22.05 with
networked nodes powered off (tests/survival/test_network_faults_e2e.py), so it is not
collected there (tests/conftest.py). Torch-free: the user's own counter.py, as the other
Slurm-version tests.

Without spares Slurm requeues the job itself once the node is DOWN. With a spare the job
runs with --no-kill, and Slurm keeps it RUNNING on the other node with nothing of it left
running (three runs by hand, as 22.05 does). After a reboot the host is IDLE and the job
still RUNNING without it in its NodeList. `slurmtrain resubmit --watch` requeues it.

Two loaded CI runs saw the job end FAILED with exit code 0 instead, with and without a spare
(no requeue): most likely the kill went process by process then, and a slurmstepd still
alive reported its batch script's death before it died itself. `kill_machine` now stops
them all before it kills, and status names the signal of such an end (ExitCode 0:9)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_util import run_dir, submit, wait_final, wait_for_file
from slurmtrain.runs import classify
from test_slurm_versions import USER, counter, named, version  # noqa: F401  (version: a fixture)

pytestmark = pytest.mark.slurm


def job_text(job: str) -> str:
    return subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=60).stdout


def node_state(node: str) -> str:
    text = subprocess.run(["scontrol", "-o", "show", "node", node], capture_output=True, text=True, timeout=60).stdout
    return text.split(" State=")[1].split()[0] if " State=" in text else "?"


@pytest.mark.parametrize("spares", [0, 1], ids=["no spare: Slurm requeues", "a spare: the watch requeues"])
def test_a_dead_batch_host_is_a_node_failure_and_the_run_completes(tmp_path, sandbox, version, spares):
    """With a spare, the node comes back (a reboot) before the watch starts: 24.11 kept the
    job RUNNING on the other node, the batch host out of its NodeList and IDLE (by hand: four
    minutes after), so the watch must see the host gone from the job, not DOWN. The watch's
    other case, the host still DOWN, runs on 22.05 in the suite."""
    from machines import kill_machine
    from slurmtrain import sandbox as lib
    from waiting import wait_for

    name = submit(tmp_path, *USER, "--name", "hostdies", "--set", f"slurm.spare_nodes={spares}", *counter(150, 0.2, 5))
    run = run_dir(tmp_path, name)
    wait_for_file(tmp_path, name, "a checkpoint", lambda: named(tmp_path, name, "checkpoint_saved"))
    job = json.loads((run / "manifest.json").read_text())["job_ids"][-1]
    host = job_text(job).split("BatchHost=")[1].split()[0]
    watch = None
    try:
        kill_machine(host, Path(sandbox.state_dir))
        try:
            if spares:
                wait_for(f"Slurm to set {host} DOWN", lambda: node_state(host).startswith("DOWN"),
                         lambda: node_state(host), poll=2)
                lib.revive(progress=lambda line: None)
                wait_for(f"{host} back", lambda: not node_state(host).startswith("DOWN"), lambda: node_state(host), poll=2)
                watch = subprocess.Popen([sys.executable, "-m", "slurmtrain", "resubmit", "--watch", "--poll", "5",
                                          str(run)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True)
            wait_for_file(tmp_path, name, "the requeue", lambda: "Restarts=1" in job_text(job)
                          or (watch is not None and watch.poll() is not None))
        finally:
            lib.revive(progress=lambda line: None)  # the dead node's slurmd, for the tests after this one
        final = wait_final(tmp_path, [name], timeout=300)[name]
        out = watch.communicate(timeout=120)[0] if watch else ""
    finally:
        if watch:
            watch.kill()
    print(out)  # the watch's words (pytest -rP shows them)
    if spares:  # RUNNING with nothing of it left, the host back and out of the job's nodes
        assert f"job {job}: its batch host {host} died and is back, out of the job's nodes, and Slurm " in out \
            and "; requeueing it" in out, (version, out)
    assert (final["state"], final["restarts"]) == ("COMPLETED", 1), (version, final, out)
    kinds = [o.kind for o in classify.ends(run)]
    assert kinds == [classify.NODE_FAILURE, classify.COMPLETED], (version, kinds)
    assert named(tmp_path, name, "resumed"), version
