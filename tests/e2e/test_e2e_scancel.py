"""A plain `scancel` (not `slurmtrain cancel`) ends the job CANCELLED and it stays so:
the script tells a cancel from a time limit or a node failure and does not requeue it."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from e2e_util import statuses, submit, wait_final

pytestmark = pytest.mark.slurm


def test_plain_scancel_is_not_requeued(tmp_path):
    name = submit(tmp_path, "--profile", "local", "--name", "plain-scancel", "--", "sleep", "600")
    run = tmp_path / "runs" / name
    job_id = json.loads((run / "manifest.json").read_text())["job_ids"][-1]
    deadline = time.monotonic() + 120
    while statuses(tmp_path, [name])[name]["state"] != "RUNNING" or not (run / "events.jsonl").read_text().count("started"):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(1)
    time.sleep(2)  # let the tasks start
    subprocess.run(["scancel", str(job_id)], check=True, timeout=30)
    final = wait_final(tmp_path, [name], timeout=120)[name]
    time.sleep(5)  # a wrong requeue would show by now
    final = statuses(tmp_path, [name])[name]
    assert final["state"] == "CANCELLED", final
    assert (final["restarts"] or 0) == 0 and final["outcome"] == "cancelled", final
    kinds = [json.loads(x)["event"] for x in (run / "events.jsonl").read_text().splitlines()]
    assert "cancelled" in kinds and "requeue" not in kinds, kinds
