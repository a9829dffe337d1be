"""The batch host killed hard (its slurmd, steps and tasks SIGKILLed) on Slurm 24.11, in the
Slurm-version lane only (scripts/slurm_lane.sh): the suite shows the same on 22.05 with
networked nodes powered off (tests/survival/test_network_faults_e2e.py), so it is not
collected there (tests/conftest.py). Torch-free: the user's own counter.py, as the other
Slurm-version tests.

Without spares Slurm requeues the job itself once the node is DOWN. With a spare the job
runs with --no-kill, and 24.11 differs from 22.05: a job of one node and a spare, its batch
host killed, ended FAILED (exit code 0, no end event) when Slurm set the node DOWN, where
22.05 keeps it RUNNING (a job of two nodes whose other node still ran a step stayed RUNNING
on 24.11 too, by hand). `slurmtrain resubmit --watch` requeues either."""

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


@pytest.mark.parametrize("spares", [0, 1], ids=["no spare: Slurm requeues", "a spare: the watch requeues"])
def test_a_dead_batch_host_is_a_node_failure_and_the_run_completes(tmp_path, sandbox, version, spares):
    from machines import kill_machine
    from slurmtrain import sandbox as lib

    name = submit(tmp_path, *USER, "--name", "hostdies", "--set", f"slurm.spare_nodes={spares}", *counter(150, 0.2, 5))
    run = run_dir(tmp_path, name)
    wait_for_file(tmp_path, name, "a checkpoint", lambda: named(tmp_path, name, "checkpoint_saved"))
    job = json.loads((run / "manifest.json").read_text())["job_ids"][-1]
    host = job_text(job).split("BatchHost=")[1].split()[0]
    watch = subprocess.Popen([sys.executable, "-m", "slurmtrain", "resubmit", "--watch", "--poll", "5", str(run)],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) if spares else None
    try:
        kill_machine(host, Path(sandbox.state_dir))
        try:
            wait_for_file(tmp_path, name, "the requeue", lambda: "Restarts=1" in job_text(job)
                          or (watch is not None and watch.poll() is not None))
        finally:
            lib.revive(progress=lambda line: None)  # the dead node's slurmd: a job with a spare asks for both nodes
        final = wait_final(tmp_path, [name], timeout=300)[name]
        out = watch.communicate(timeout=120)[0] if watch else ""
    finally:
        if watch:
            watch.kill()
    print(out)  # the watch's words (pytest -rP shows them)
    if spares:  # RUNNING with nothing of it left (as on 22.05), or ended FAILED (seen in a loaded CI run)
        assert f"job {job}: its batch host {host} is down, and Slurm " in out and "; requeueing it" in out, \
            (version, out)
    assert (final["state"], final["restarts"]) == ("COMPLETED", 1), (version, final, out)
    kinds = [o.kind for o in classify.ends(run)]
    assert kinds == [classify.NODE_FAILURE, classify.COMPLETED], (version, kinds)
    assert named(tmp_path, name, "resumed"), version
