"""Slurm's state words -> JobState, through the one table."""

import pytest

from slurmtrain.runs.states import JobState, parse_state


@pytest.mark.parametrize("text, state", [
    ("RUNNING", JobState.RUNNING),
    ("CANCELLED by 0", JobState.CANCELLED),
    ("RUNNING+", JobState.RUNNING),
    ("PD", JobState.PENDING),
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
    ("OOM", JobState.OUT_OF_MEMORY),
    ("node_fail", JobState.NODE_FAIL),
    ("PREEMPTED", JobState.PREEMPTED),
    ("REQUEUED", JobState.REQUEUED),
    ("SOMETHING_NEW", JobState.UNKNOWN),
    ("", JobState.UNKNOWN),
    (None, JobState.UNKNOWN),
])
def test_parse_state(text, state):
    assert parse_state(text) is state


def test_final_states():
    assert {s for s in JobState if s.is_final} == {
        JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.NODE_FAIL,
        JobState.BOOT_FAIL, JobState.DEADLINE, JobState.OUT_OF_MEMORY, JobState.REVOKED, JobState.REFUSED}
    # A preempted job comes back (PreemptMode=REQUEUE): not an end.
    assert not JobState.PREEMPTED.is_final and JobState.PREEMPTED.is_active
    assert not JobState.UNKNOWN.is_active
