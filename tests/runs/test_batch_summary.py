"""The batch log's last line names the node of the first failure of this start, from
srun's own lines in this start's part of the log ("task 2" or "tasks 0-1")."""

from __future__ import annotations

import pytest

from script_functions import run_bash

EARLIER = "srun: error: stnode9: task 0: Exited with exit code 1\n"  # a previous start's


@pytest.mark.parametrize("line,node", [
    ("srun: error: stnode2: tasks 0-1: Exited with exit code 3\n", "stnode2"),
    ("srun: error: stnode1: task 3: Killed\n", "stnode1"),
    ("srun: error: stnode2: tasks 0,2: Terminated\n", "stnode2"),
    ("nothing from srun\n", None),
])
def test_summary_names_the_first_failing_node_of_this_start(tmp_path, line, node):
    log = tmp_path / "job-7.out"
    log.write_text(EARLIER)
    body = f'BATCH_LOG={log}; LOG_START={len(EARLIER)}; SLURM_JOB_ID=7\n' \
           f'printf %s {line!r} >> "$BATCH_LOG"\nsummary failed 3'
    proc = run_bash(["summary"], body, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode().strip()
    assert out.startswith("slurmtrain: job 7: failed, exit status 3")
    assert (f", first failure on node {node};" in out) if node else "first failure" not in out, out


def test_track_finds_the_failing_node_in_a_grouped_srun_line():
    from slurmtrain.runs.track import _SRUN_TASK_ERROR

    m = _SRUN_TASK_ERROR.search("srun: error: stnode1: tasks 0-1: Exited with exit code 3")
    assert m and m["node"] == "stnode1"
