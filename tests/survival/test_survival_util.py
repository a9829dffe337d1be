"""The survival tests' own helpers, without Slurm: when a job counts as ended."""

from __future__ import annotations

import pytest

import survival_util


@pytest.mark.parametrize("state, ended", [
    ("COMPLETED", "COMPLETED"), ("FAILED", "FAILED"), ("CANCELLED", "CANCELLED"), ("TIMEOUT", "TIMEOUT"),
    ("NODE_FAIL", "NODE_FAIL"),
    # transient: a loaded CI run's foreign-command job read SIGNALING as it ended, and the
    # wait took it for the end
    ("SIGNALING", None), ("PENDING", None), ("RUNNING", None), ("COMPLETING", None), ("CONFIGURING", None),
    ("REQUEUED", None), ("REQUEUE_HOLD", None), ("PREEMPTED", None), ("STAGE_OUT", None), ("SUSPENDED", None),
    (None, None),  # Slurm does not know it (yet, or any more)
])
def test_a_job_has_ended_only_in_a_final_state(monkeypatch, state, ended):
    monkeypatch.setattr(survival_util, "job_field", lambda job_id, key: state if key == "JobState" else None)
    assert survival_util.job_ended("7") == ended
