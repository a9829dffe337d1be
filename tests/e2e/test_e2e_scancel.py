"""A plain `scancel` (not `slurmtrain cancel`) ends the job CANCELLED and it stays so:
the script tells a cancel from a time limit or a node failure and does not requeue it."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e_util import batch_log, run_dir, script_decided, statuses, submit, wait_final, wait_for_file

pytestmark = pytest.mark.slurm


def test_plain_scancel_is_not_requeued(tmp_path):
    name = submit(tmp_path, "--profile", "local", "--name", "plain-scancel", "--", "sleep", "600")
    run = run_dir(tmp_path, name)
    job_id = json.loads((run / "manifest.json").read_text())["job_ids"][-1]
    # The tasks run on both nodes: the job's step is running (the script's `started` comes first).
    wait_for_file(tmp_path, name, "the tasks to start on both nodes", lambda: _step_runs_on_two_nodes(job_id))
    subprocess.run(["scancel", str(job_id)], check=True, timeout=30)
    wait_final(tmp_path, [name], timeout=120)
    # The script's own decision proves no requeue came (rather than a pause long enough for one).
    assert wait_for_file(tmp_path, name, "the script's decision", lambda: script_decided(tmp_path, name)) \
        == "no requeue", batch_log(tmp_path, name)
    final = statuses(tmp_path, [name])[name]
    assert final["state"] == "CANCELLED", final
    assert (final["restarts"] or 0) == 0 and final["outcome"] == "cancelled", final
    kinds = [json.loads(x)["event"] for x in (run / "events.jsonl").read_text().splitlines()]
    assert "cancelled" in kinds and "requeue" not in kinds, kinds


def _step_runs_on_two_nodes(job_id: str) -> bool:
    """squeue's steps of the job: step 0 (the task) on a node list of two ("stnode[1-2]")."""
    out = subprocess.run(["squeue", "--steps", "-j", str(job_id), "-h", "-o", "%i %N"], capture_output=True,
                         text=True, timeout=30).stdout
    steps = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    nodes = steps.get(f"{job_id}.0", "")
    return "," in nodes or "[" in nodes
