"""One reading of events.jsonl (slurmtrain.eventlog) for every reader: on every recorded
history `status` (classify), `runs`/`status` once Slurm forgets the job (track), `watch`
(progress.snapshot) agree.

Recorded histories (recorded/events/*.jsonl) besides those test_outcome.py describes:
node_died_then_completed (a node died hard: Slurm requeued the job, the dying script
still wrote `failed`, the next start finished), finished_then_failed (the program wrote
`finished`, then the command exited 134: `watch` said finished, `status` user error),
stop_unsaved (a program that ignores the stop signal: escalated to SIGKILL, nothing saved,
not requeued), hung_no_restart_left (a hang the supervisor ended with restarts_in_job = 0),
crash_hang_preempted (a crash and a hang restarted in the job, then a preemption). Written by hand in the sandbox's format.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtrain import eventlog, events
from slurmtrain.cli import main
from slurmtrain.runs import classify, track
from slurmtrain.runs.states import JobState
from slurmtrain.runs import progress

from runs_fakes import recorded_cases, recorded_run

K = eventlog
# case: (outcome of the latest start, outcome of each start, track's state and exit code
# once Slurm forgets the job)
EXPECTED = {
    "admin_requeued_then_completed": (K.COMPLETED, [K.REQUEUED, K.COMPLETED], JobState.COMPLETED, 0),
    "cancel_requested": (K.CANCELLED, [K.CANCELLED], JobState.CANCELLED, None),
    "crash_hang_preempted": (K.COMPLETED, [K.PREEMPTED, K.COMPLETED], JobState.COMPLETED, 0),
    "hung_no_restart_left": (K.HANG, [K.HANG], JobState.FAILED, 143),
    "finished_then_failed": (K.USER_ERROR, [K.USER_ERROR], JobState.FAILED, 134),
    "node_died_then_completed": (K.COMPLETED, [K.NODE_FAILURE, K.COMPLETED], JobState.COMPLETED, 0),
    "preempted_then_completed": (K.COMPLETED, [K.PREEMPTED, K.COMPLETED], JobState.COMPLETED, 0),
    "requeue_limit": (K.REQUEUE_LIMIT, [K.PREEMPTED, K.REQUEUE_LIMIT], JobState.FAILED, 3),
    "requeue_refused": (K.TIME_LIMIT, [K.TIME_LIMIT], JobState.COMPLETED, 0),
    "scancel": (K.CANCELLED, [K.CANCELLED], JobState.CANCELLED, None),
    "stop_unsaved": (K.STOPPED_UNSAVED, [K.STOPPED_UNSAVED], JobState.FAILED, 137),
    "user_error": (K.USER_ERROR, [K.USER_ERROR], JobState.FAILED, 1),
    "watchdog": (K.WATCHDOG, [K.WATCHDOG], JobState.FAILED, 4),
}


def test_every_recorded_history_is_expected():
    assert recorded_cases() == sorted(EXPECTED)


def forget_jobs(fake_slurm) -> None:
    from slurmtrain.runs import jobs

    fake_slurm(scontrol="", sacct=None)
    jobs.TrackedJob.watcher = jobs.Watcher()


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_status_track_and_watch_agree(tmp_path, fake_slurm, case):
    kind, kinds, state, exit_code = EXPECTED[case]
    run, _ = recorded_run(tmp_path, case)
    forget_jobs(fake_slurm)

    said = classify.classify(run.path)                       # status, from the events alone
    assert (said.kind, said.final) == (kind, True), said
    assert [o.kind for o in classify.ends(run.path)] == kinds
    (st,) = track.statuses([run])                             # status/runs once Slurm forgets
    assert (st.state, st.exit_code, st.source) == (state, exit_code, "events.jsonl"), st.note
    assert st.outcome == said.kind and st.outcome_detail == said.detail
    assert st.state.is_final
    snap = progress.snapshot(run.path)                       # watch
    assert (snap.ended, snap.finished) == (said.kind, said.kind == K.COMPLETED)

    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert f"outcome    {said.kind}: {said.detail}" in out, out
    watch = CliRunner().invoke(main, ["watch", str(run.path), "--interval", "0.1"])
    assert watch.exit_code == (0 if kind == K.COMPLETED else 1), watch.output
    assert ("finished" if kind == K.COMPLETED else f"ended: {kind}") in watch.output, watch.output


def test_node_death_is_a_requeue_not_a_failure(tmp_path, fake_slurm):
    """requeued_by_slurm, then the dying script's `failed`: the start was requeued and
    resumed; the history says the failure was superseded."""
    run, _ = recorded_run(tmp_path, "node_died_then_completed")
    first, last = classify.ends(run.path)
    assert (first.kind, first.final, first.step) == (K.NODE_FAILURE, False, 40)
    assert "requeued" in first.detail and "failed" not in first.detail.replace("node of the job failed", "")
    said = [line.split("  ", 1)[1] for line in classify.history(run.path)]
    i = said.index("Slurm had requeued the job itself (a node of the job failed)")
    assert said[i + 1] == ("the tasks ended with exit status 1 as the node failed; superseded: Slurm had "
                           "requeued the job")
    assert not any("not requeued" in s for s in said), said
    assert said[i + 2:i + 4] == ["job 141 started on stnode1 stnode2 (restart 1)", "resumed from the checkpoint of step 40"]


def test_an_administrators_requeue_is_named_and_blames_no_node(tmp_path, fake_slurm):
    """`scontrol requeue` from outside (recorded on the sandbox): no node failure, no stop."""
    run, _ = recorded_run(tmp_path, "admin_requeued_then_completed")
    first, _ = classify.ends(run.path)
    assert (first.kind, first.final, first.step) == (K.REQUEUED, False, 7)  # its stop saved step 7
    assert first.detail.startswith("requeued from outside the job (`scontrol requeue` by an administrator")
    said = [line.split("  ", 1)[1] for line in classify.history(run.path)]
    assert "requeued from outside the job (`scontrol requeue` by an administrator or another program)" in said
    assert not any("node" in s and "failed" in s for s in said), said


def test_finished_then_failed_says_both(tmp_path):
    run, _ = recorded_run(tmp_path, "finished_then_failed")
    detail = classify.classify(run.path).detail
    assert detail.startswith("the command failed with exit status 134 after the program reported it "
                             "finished at step 60"), detail


def test_stop_unsaved_says_why_and_how_to_requeue_anyway(tmp_path):
    run, _ = recorded_run(tmp_path, "stop_unsaved")
    detail = classify.classify(run.path).detail
    assert detail.startswith("the warning signal SIGUSR2 came before the time limit; the program has "
                             "reported no checkpoint in this run (exit status 137), so it was not requeued")
    assert 'resilience.requeue_when = "always"' in detail
    said = [line.split("  ", 1)[1] for line in classify.history(run.path)]
    assert said[-3:] == [
        "the tasks were still running 30 s after the stop request: sent them SIGTERM",
        "the tasks were still running 10 s after SIGTERM: killed them (SIGKILL)",
        "stopped, but the program has reported no checkpoint in this run (exit status 137): not requeued",
    ]
    # Slurm's TIMEOUT (the kill ran into the time limit) does not hide why it was not requeued
    assert classify.classify(run.path, "TIMEOUT", 0).kind == K.STOPPED_UNSAVED


def test_a_hang_with_no_restart_left_is_its_own_outcome_naming_the_ranks_and_stacks(tmp_path):
    run, _ = recorded_run(tmp_path, "hung_no_restart_left")
    out = classify.classify(run.path)
    assert out.kind == K.HANG and out.step == 10
    assert out.detail == ("hung: no rank reported progress for 30 s; the last to report: rank(s) 1 on stnode2 "
                          "(step 17); no in-job restart left; stacks in /runs/hung/stacks/131-0-1; not requeued")
    # where the stacks told the stopped rank apart, it is the one named
    evs = [dict(e, stuck_ranks="0", stuck_nodes="stnode1", why="process state T (stopped)") if e["event"] == "hang"
           else e for e in events.read(run.path)]
    (run.path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    assert classify.classify(run.path).detail.startswith(
        "hung: no rank reported progress for 30 s; rank(s) 0 on stnode1: process state T (stopped) (step 17)")


# ---- the names -------------------------------------------------------------------------

def test_developers_md_lists_every_event_and_no_other():
    text = (Path(__file__).resolve().parents[2] / "DEVELOPERS.md").read_text()
    para = text[text.index("- **Events.**"):]
    para = para[:para.index("\n- **", 1)]
    listed = set(re.findall(r"`([a-z_]+)(?: \{[^}]*\})?`", para))
    assert eventlog.ALL_EVENTS <= listed, eventlog.ALL_EVENTS - listed
    with_fields = set(re.findall(r"`([a-z_]+) \{[^}]*\}`", para))
    assert with_fields <= eventlog.ALL_EVENTS, f"DEVELOPERS.md lists events eventlog does not know: " \
                                               f"{with_fields - eventlog.ALL_EVENTS}"


def test_every_event_reads_as_words_in_the_history(tmp_path):
    """No event falls through to the raw `name key=value` line of classify's history."""
    for name in sorted(eventlog.ALL_EVENTS):
        events.append(tmp_path, name, job_id="7", restart=1, step=3)
    said = [line.split("  ", 1)[1] for line in classify.history(tmp_path)]
    raw = [s for s in said if re.match(r"[a-z_]+ (job_id|restart|step)=", s)]
    assert not raw, raw
    assert len(said) == len(eventlog.ALL_EVENTS) - 1  # `restarted` is said by "started ... (restart N)"


def test_a_failure_names_its_own_launchs_error_not_an_earlier_one_restarted_from():
    """The first launch's peer saw "Connection closed" (train_error at step 41) and was
    restarted; the second was killed. Its outcome quoted the first launch's error."""
    evs = [{"time": 1.0, "event": "started", "job_id": "7", "restart": 0, "launch": 0, "nodes": "a b"},
           {"time": 2.0, "event": "train_error", "step": 41, "error": "RuntimeError: Connection closed by peer"},
           {"time": 3.0, "event": "relaunched", "job_id": "7", "restart": 0, "launch": 2, "attempt": 1,
            "exit_code": 1},
           {"time": 4.0, "event": "failed", "job_id": "7", "restart": 0, "launch": 2, "exit_code": 1,
            "error": "rank 0 was killed by SIGKILL"}]
    out = eventlog.latest(evs)
    assert out.kind == K.USER_ERROR and out.detail == (
        "the command failed with exit status 1 (rank 0 was killed by SIGKILL); not requeued"), out.detail


def test_a_start_moved_the_run_on_only_past_every_checkpoint_before_it():
    from slurmtrain.eventlog import free_requeues, progressed_since_start

    first = [{"event": "started", "job_id": "5"}, {"event": "checkpoint_saved", "step": 40},
             {"event": "stopped", "step": 50}, {"event": "requeue", "job_id": "5", "counted": False}]
    assert progressed_since_start(first[:2]) and progressed_since_start(first)
    again = first + [{"event": "started", "job_id": "5"}, {"event": "resumed", "step": 50}]
    assert not progressed_since_start(again)                                      # nothing saved yet
    assert not progressed_since_start(again + [{"event": "stopped", "step": 50}])  # the same step again
    assert not progressed_since_start(again + [{"event": "checkpoint_saved", "step": 20}])  # started over
    assert progressed_since_start(again + [{"event": "checkpoint_saved", "step": 60}])
    assert not progressed_since_start([{"event": "started"}, {"event": "stopped"}])  # no step: not known
    # another array task's checkpoint is not this task's progress
    tasks = [{"event": "started", "array_task": 1}, {"event": "checkpoint_saved", "step": 9, "array_task": 0}]
    assert not progressed_since_start(tasks, 1)
    assert free_requeues(again, "5") == 1 and free_requeues(again, "6") == 0
    assert free_requeues(again + [{"event": "requeue", "job_id": "5"}], "5") == 1  # counted: not free


def test_a_program_killed_by_the_stop_signal_is_told_to_install_its_handler_first(tmp_path):
    """The supervisor's `stop_unsaved {signal}`: the outcome and the history name the signal
    and the fix, not "reports no checkpoint through slurmtrain.stop"."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [{"time": 1.0, "event": "submitted", "job_id": "9"},
             {"time": 2.0, "event": "started", "job_id": "9", "restart": 0, "nodes": "n1"},
             {"time": 3.0, "event": "signal", "job_id": "9", "restart": 0, "signal": "USR2"},
             {"time": 4.0, "event": "stop_unsaved", "job_id": "9", "restart": 0, "exit_code": 140, "signal": "USR2"}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    o = classify.classify(run)
    assert o.kind == K.STOPPED_UNSAVED and o.final
    assert "killed by SIGUSR2, the stop signal (exit status 140): it had no handler for it" in o.detail
    assert "before heavy imports" in o.detail and "reported no checkpoint" not in o.detail, o.detail
    said = [line.split("  ", 1)[1] for line in classify.history(run)]
    assert said[-1].startswith("stopped: the program was killed by SIGUSR2, the stop signal"), said
