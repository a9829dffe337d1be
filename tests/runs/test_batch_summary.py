"""The batch log's last line names the node of the first failure of this start, from
srun's own lines in this start's part of the log ("task 2" or "tasks 0-1")."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmtrain.job.config import Job
from slurmtrain.job.record import Record

EARLIER = "srun: error: stnode9: task 0: Exited with exit code 1\n"  # a previous start's


def record(run_dir: Path, log: Path) -> Record:
    """What the supervisor writes through (its summary line among it), as it makes it."""
    return Record(run_dir, Job("7", "7", "7", 0, "stnode[1-2]"), lambda: 0, batch_log=log)


@pytest.mark.parametrize("line,node", [
    ("srun: error: stnode2: tasks 0-1: Exited with exit code 3\n", "stnode2"),
    ("srun: error: stnode1: task 3: Killed\n", "stnode1"),
    ("srun: error: stnode2: tasks 0,2: Terminated\n", "stnode2"),
    ("nothing from srun\n", None),
])
def test_summary_names_the_first_failing_node_of_this_start(tmp_path, capsys, line, node):
    log = tmp_path / "job-7.out"
    log.write_text(EARLIER)
    rec = record(tmp_path, log)  # this start's part of the log begins here
    with open(log, "a") as f:
        f.write(line)
    rec.summary("failed", 3)
    out = capsys.readouterr().out.strip()
    assert out.startswith("slurmtrain: job 7: failed, exit status 3")
    assert (f", first failure on node {node};" in out) if node else "first failure" not in out, out
    assert out.endswith(f"; run directory {tmp_path}")


def test_track_finds_the_failing_node_in_a_grouped_srun_line():
    from slurmtrain.runs.track import _SRUN_TASK_ERROR

    m = _SRUN_TASK_ERROR.search("srun: error: stnode1: tasks 0-1: Exited with exit code 3")
    assert m and m["node"] == "stnode1"
