"""classify/history on event sequences as the sandbox wrote them (no Slurm needed)."""

from __future__ import annotations

import json

import pytest

from slurmtrain import eventlog
from slurmtrain.runs import classify


def write(tmp_path, *evs):
    t = 1000.0
    with open(tmp_path / "events.jsonl", "w") as f:
        for e in evs:
            name, fields = (e, {}) if isinstance(e, str) else e
            t += 1
            f.write(json.dumps({"time": t, "event": name, "job_id": "7", **fields}) + "\n")
    return tmp_path


START = ("started", {"restart": 0, "nodes": "stnode1 stnode2"})
RESTART = ("started", {"restart": 1, "nodes": "stnode1 stnode2"})


def test_preempted_then_completed(tmp_path):
    run = write(tmp_path, "submitted", START, ("checkpoint_saved", {"step": 50}), ("stopped", {"step": 72}),
                ("preempted", {"exit_code": 143}), ("requeue", {"exit_code": 143}), RESTART,
                ("resumed", {"step": 72}), ("finished", {"step": 100}), ("finished", {"exit_code": 0}))
    first, last = classify.ends(run)
    assert (first.kind, first.final, first.step) == (classify.PREEMPTED, False, 72)
    assert last.kind == classify.COMPLETED and classify.classify(run, "COMPLETED", 0) == last
    lines = classify.history(run)
    assert any("stopped after step 72" in x for x in lines)
    assert any("resumed from the checkpoint of step 72" in x for x in lines)


@pytest.mark.parametrize("requeue, said", [
    ({"exit_code": 1, "saved": True}, "requeueing"),  # torchrun's status on a SIGTERM: nothing to read in it
    ({"exit_code": 1}, "requeueing; the tasks ended with exit status 1"),  # requeue_when = "always", or older events
])
def test_a_requeue_after_a_saved_stop_does_not_show_the_launchers_exit_status(tmp_path, requeue, said):
    run = write(tmp_path, "submitted", START, ("checkpoint_saved", {"step": 10}), ("stopped", {"step": 12}),
                ("preempted", {"exit_code": 1}), ("requeue", requeue))
    assert classify.history(run)[-1].endswith(f"  {said}"), classify.history(run)


@pytest.mark.parametrize("fields, said", [
    ({"step": 40}, "resumed from the checkpoint of step 40"),       # events written before the load's time
    ({"step": 40, "seconds": 3.04}, "resumed from the checkpoint of step 40 in 3.0 s"),
    ({"step": 42, "seconds": 0.4, "tier": "memory", "from_peer": []}, "resumed from the copy in node memory of step 42 in 0.4 s"),
    ({"step": 42, "seconds": 1.25, "tier": "memory", "from_peer": [1, 3]},
     "resumed from the copy in node memory of step 42 (rank(s) 1 3 from a peer node's copy) in 1.2 s"),
])
def test_a_resume_says_where_its_state_came_from_and_how_long_the_load_took(tmp_path, fields, said):
    run = write(tmp_path, "submitted", START, ("resumed", fields))
    assert classify.history(run)[-1].endswith(said), classify.history(run)


def test_a_resubmission_is_one_line_of_history(tmp_path):
    run = write(tmp_path, ("submitted", {"job_id": "1175"}), START, ("failed", {"exit_code": 1}),
                ("submitted", {"job_id": "1177"}), ("resubmitted", {"job_id": "1177", "previous_job_id": "1175"}))
    said = [line.split("  ", 1)[1] for line in classify.history(run)]
    assert said[0] == "submitted as job 1175" and said[-1] == "resubmitted as job 1177 (after job 1175)", said
    assert "submitted as job 1177" not in said


@pytest.mark.parametrize("fields, said", [
    ({"attempt": 1, "exit_code": 143}, "the program failed (exit status 143) after a new checkpoint: started again "
                                       "in the job from it (in-job restart 1)"),
    ({"attempt": 2, "exit_code": 1, "node": "stnode2"}, "the program failed on stnode2 (exit status 1) after a new "
                                                         "checkpoint: started again in the job from it (in-job restart 2)"),
    ({"attempt": 1, "exit_code": 137, "node": "stnode1", "why": "stray kill"},
     "the program failed on stnode1 (exit status 137) as Slurm killed it (its kill of an earlier start's step): "
     "started again in the job (in-job restart 1)"),
    ({"attempt": 1, "cause": "launch failed", "nodes": "stnode2"},
     "srun could not start the tasks on stnode2: launched again (in-job restart 1)"),
])
def test_an_in_job_restart_says_why_and_where(tmp_path, fields, said):
    run = write(tmp_path, "submitted", START, ("relaunched", fields))
    assert classify.history(run)[-1].endswith(said), classify.history(run)


@pytest.mark.parametrize("requeue, said", [
    ({"reason": "node", "exclude": "stnode2"}, "requeueing without stnode2"),
    ({"reason": "node", "exclude": "", "waits_for": "stnode2"},
     "requeueing, to start when stnode2 is back in service (too few nodes without it)"),
    ({"reason": "node", "exclude": "", "waits_for": "stnode1 stnode2"},
     "requeueing, to start when stnode1 stnode2 are back in service (too few nodes without them)"),
])
def test_a_requeue_without_nodes_says_which_or_which_it_waits_for(tmp_path, requeue, said):
    run = write(tmp_path, "submitted", START, ("nodes_lost", {"nodes": "stnode2", "spares": "none"}),
                ("requeue", requeue))
    assert any(line.endswith(said) for line in classify.history(run)), classify.history(run)
    assert classify.classify(run).detail.startswith(f"node(s) stnode2 were lost and no spare was left; "
                                                    f"{said.replace('requeueing', 'requeued')}")


def test_time_limit_requeue_refused_points_to_resubmit(tmp_path):
    run = write(tmp_path, START, ("signal", {"signal": "USR2"}), ("stopped", {"step": 208}),
                ("requeue", {"exit_code": 143}),
                ("requeue_failed", {"message": "Requested operation is presently disabled for job 7"}))
    out = classify.classify(run, "COMPLETED", 0)
    assert out.kind == classify.TIME_LIMIT and out.final
    assert "slurmtrain resubmit" in out.detail and "step 208" in out.detail


def test_node_failure_from_slurms_own_requeue_or_silence(tmp_path):
    run = write(tmp_path, START, ("signal", {"signal": "TERM"}), ("stopped", {"step": 45}),
                ("requeue", {"exit_code": 1}), "requeued_by_slurm")
    assert classify.classify(run).kind == classify.NODE_FAILURE
    silent = write(tmp_path, START, ("checkpoint_saved", {"step": 20}), RESTART)
    assert classify.ends(silent)[0].kind == classify.NODE_FAILURE
    assert classify.classify(silent, "NODE_FAIL").kind == classify.NODE_FAILURE


def test_user_error_names_the_error(tmp_path):
    run = write(tmp_path, START, ("train_error", {"step": 5, "error": "RuntimeError: boom"}),
                ("failed", {"exit_code": 1}))
    out = classify.classify(run, "FAILED", 1)
    assert out.kind == classify.USER_ERROR and "RuntimeError: boom" in out.detail and "step 5" in out.detail


@pytest.mark.parametrize("last, kind", [
    (("requeue_limit", {"max_requeues": 1}), classify.REQUEUE_LIMIT),
    (("watchdog_timeout", {"missing": "stnode2"}), classify.WATCHDOG),
    ("cancel_requested", classify.CANCELLED),
])
def test_other_ends(tmp_path, last, kind):
    assert classify.classify(write(tmp_path, START, last)).kind == kind


def test_slurm_state_fills_in_when_events_are_silent(tmp_path):
    run = write(tmp_path, "submitted", START)
    assert classify.classify(run).kind == classify.RUNNING
    assert classify.classify(run, "TIMEOUT", 0).kind == classify.TIME_LIMIT
    assert classify.classify(run, "CANCELLED by 0").kind == classify.CANCELLED
    assert classify.classify(run, "FAILED", 75).kind == classify.PREEMPTED
    assert classify.classify(write(tmp_path, "submitted")).detail == "submitted as job 7; not started yet"


def test_a_job_script_killed_by_a_signal_says_so_not_exit_code_0(tmp_path):
    """ExitCode 0:9: the job script (our supervisor) was SIGKILLed before it wrote an end:
    "exit code 0" would read as a success."""
    run = write(tmp_path, "submitted", START)
    killed = classify.classify(run, "FAILED", 0, 9)
    assert (killed.kind, killed.detail) == (classify.UNKNOWN, "Slurm says FAILED (the job script was killed by "
                                                              "SIGKILL (out of memory, or a kill))")
    assert classify.classify(run, "FAILED", 0, 6).detail == "Slurm says FAILED (the job script was killed by SIGABRT)"
    assert classify.classify(run, "FAILED", 0, 99).detail == "Slurm says FAILED (the job script was killed by signal 99)"
    assert classify.classify(run, "FAILED", 0).detail == "Slurm says FAILED (exit code 0)"
    assert classify.classify(run, "FAILED", 2, 9).kind == classify.USER_ERROR  # an exit status says more


def test_a_stop_signal_someone_sent_is_not_called_the_time_limit(tmp_path):
    run = write(tmp_path, "submitted", START, ("signal", {"signal": "USR2", "cause": "asked", "before_end": 1700}),
                ("stopped", {"step": 12}), ("requeue", {"exit_code": 143}))
    out = classify.classify(run)
    assert out.kind == classify.ASKED == "stopped on request", out  # neither a preemption nor the limit
    assert out.kind in classify.STOP_KINDS and eventlog.ENDINGS[out.kind] == eventlog.Ending("COMPLETED", 0)
    assert out.detail.startswith("the stop signal SIGUSR2 came 28 min before the time limit, not as Slurm's warning: "
                                 "someone asked for the stop (scancel --signal, or the site)"), out.detail
    assert not any("time limit:" in line for line in classify.history(run)), classify.history(run)


def test_an_in_job_restart_says_the_programs_own_error_where_its_log_held_one(tmp_path):
    run = write(tmp_path, "submitted", START, ("checkpoint_saved", {"step": 20}),
                ("relaunched", {"attempt": 1, "exit_code": 1, "node": "stnode2",
                                "error": "rank 3 was killed by SIGKILL (torchrun's first observed failure: "
                                         "out of memory, or a kill)"}))
    assert any(line.endswith("the program failed on stnode2 (exit status 1: rank 3 was killed by SIGKILL (torchrun's "
                             "first observed failure: out of memory, or a kill)) after a new checkpoint: started "
                             "again in the job from it (in-job restart 1)") for line in classify.history(run)), \
        classify.history(run)


def test_a_plain_scancel_while_waiting_to_start_again_ends_the_run_cancelled(tmp_path):
    """Preempted and requeued, then `scancel` while Slurm held it for its restart: the run
    ended (watch and resubmit --watch read it as still preempted, and started it again)."""
    run = write(tmp_path, "submitted", START, ("checkpoint_saved", {"step": 120}), ("stopped", {"step": 124}),
                ("preempted", {"exit_code": 1}), ("requeue", {"exit_code": 1, "saved": True}))
    assert not classify.classify(run, "PENDING").final
    out = classify.classify(run, "CANCELLED by 0", 0)
    assert (out.kind, out.final, out.step) == (classify.CANCELLED, True, 124)
    assert out.detail.startswith("Slurm says CANCELLED (exit code 0) while it waited to start again (preempted")



def test_nodes_lost_with_no_spare_do_not_read_as_left_out_before_a_requeue_that_waits_for_them(tmp_path):
    """It said "left out of the job ... spare(s) in their place: none" and then "requeueing,
    to start when stnode3 is back in service": the node was not left out."""
    run = write(tmp_path, "submitted", START, ("nodes_lost", {"nodes": "stnode3", "spares": "none", "left": 0}),
                ("requeue", {"exit_code": 1, "waits_for": "stnode3"}))
    lines = classify.history(run)
    assert lines[-2].endswith("node(s) stnode3 lost (dead, down, or failing again and again); no spare took their "
                              "place"), lines
    assert "left out" not in lines[-2]
    spare = write(tmp_path, "submitted", ("started", {"restart": 0, "nodes": "n1 n2 n3", "spares": "n3"}))
    assert classify.history(spare)[-1].endswith("started on n1 n2 n3; spare(s), idle until needed: n3")


def test_a_stop_after_spares_covered_a_lost_node_reads_as_the_stop_not_a_node_failure(tmp_path):
    """A spare took a lost node's place (an in-job restart), then a stop asked for requeued
    the job: it was not "lost and no spare was left"."""
    covered = ("nodes_lost", {"nodes": "stnode2", "spares": "stnode3", "left": 0})
    asked = ("signal", {"signal": "USR2", "cause": "asked", "before_end": 1700})
    run = write(tmp_path, "submitted", START, covered, ("relaunched", {"attempt": 1, "why": "nodes lost"}), asked,
                ("stopped", {"step": 140}), ("requeue", {"exit_code": 75, "saved": True, "counted": False}))
    assert classify.classify(run).kind == classify.ASKED, classify.classify(run)
    (tmp_path / "lost").mkdir()
    lost = write(tmp_path / "lost", "submitted", START, covered,
                 ("requeue", {"reason": "node", "exclude": "stnode2"}))
    out = classify.classify(lost)
    assert out.kind == classify.NODE_FAILURE and out.detail.startswith("node(s) stnode2 were lost and no spare"), out
