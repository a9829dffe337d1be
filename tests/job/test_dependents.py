"""A chain's waiting runs learn that the run they wait for ended without completing
(slurmtrain/dependents.py, called by the supervisor at such an end)."""

from __future__ import annotations

from slurmtrain import dependents, eventlog, events
from slurmtrain.job import decide


def test_only_an_end_that_is_no_completion_leaves_afterok_unsatisfied():
    end = lambda kind, action="end": decide.Verdict(action, kind, "words", 0)  # noqa: E731
    for kind in (eventlog.USER_ERROR, eventlog.CANCELLED, eventlog.REQUEUE_LIMIT, eventlog.HANG,
                 eventlog.STOPPED_UNSAVED, eventlog.WATCHDOG):
        assert decide.ends_uncompleted(end(kind)), kind
    assert not decide.ends_uncompleted(end(eventlog.COMPLETED))
    assert not decide.ends_uncompleted(end(eventlog.REQUEUED))  # from outside: the job comes back
    assert not decide.ends_uncompleted(end(eventlog.TIME_LIMIT, "requeue"))


def test_each_run_waiting_to_start_after_a_completion_is_told_once(tmp_path):
    up, ok, anyway = (tmp_path / n for n in ("tok", "train", "report"))
    for d in (up, ok, anyway):
        d.mkdir()
    dependents.add(up, "train", str(ok), "afterok")
    dependents.add(up, "report", str(anyway), "afterany")
    assert dependents.never(up, "12_1", "failed") == ["train"]
    assert dependents.never(up, "12_1", "failed") == []  # once
    assert [(e["event"], e["after"], e["detail"]) for e in events.read(ok)] == [
        ("dependency_never_satisfied", ["tok"], "tok (job 12_1) ended: failed")]
    assert events.read(anyway) == []
    assert dependents.never(tmp_path / "nobody-waits", "3", "failed") == []
