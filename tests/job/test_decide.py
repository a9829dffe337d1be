"""slurmtrain.job.decide: what the supervisor does, from what happened. Pure functions, asked
directly: why a SIGTERM came, which nodes the preflight gate leaves out, and every branch of
the verdict after the launch (tests/job/test_supervisor.py drives them through the loop)."""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import datetime

import pytest

from slurmtrain import eventlog
from slurmtrain.job import decide

END = "2026-11-24T20:00:00"


# ---- term_cause ------------------------------------------------------------------------

@pytest.mark.parametrize("restarts_now, end_now, cause", [
    (1, END, decide.REQUEUED),            # the restart count went up: Slurm requeued it (node failure)
    (3, "2026-11-24T18:00:00", decide.REQUEUED),  # ... whatever the end says
    (0, END, decide.TIME_LIMIT),          # the end is where it was planned
    (None, END, decide.TIME_LIMIT),       # no restart count (Slurm did not answer): the end decides
    (0, "2026-11-24T18:00:00", decide.CANCEL),  # scancel moved the end
    (0, "", decide.CANCEL),               # no end now (squeue did not answer): nothing says time limit
    (None, "", decide.CANCEL),            # nothing learnt at all (a hung controller)
])
def test_term_cause(restarts_now, end_now, cause):
    assert decide.term_cause(restarts_now, 0, END, end_now) == cause


def test_term_cause_compares_with_this_starts_restart_count():
    assert decide.term_cause(2, 2, END, END) == decide.TIME_LIMIT  # a later start: 2 is not "up"
    assert decide.term_cause(3, 2, END, END) == decide.REQUEUED


@pytest.mark.parametrize("end_at_start", ["", "N/A"], ids=["unknown", "N/A"])
def test_term_cause_without_a_planned_end_is_never_a_time_limit(end_at_start):
    """No end known at the start (squeue failed, or a job without a time limit: N/A): an
    equal end now proves nothing, so it is not taken for the time limit."""
    assert decide.term_cause(0, 0, end_at_start, end_at_start) == decide.CANCEL


def test_an_end_already_behind_the_start_is_no_planned_end():
    """A cancel that came before the supervisor read the end moved it to the cancel's moment:
    kept, it would make the cancel's SIGTERM read as the time limit (a CI run's "stopped,
    nothing saved" for a job cancelled 2 s after it started)."""
    at = datetime.fromisoformat(END).timestamp()
    assert decide.end_at_start(END, at - 60) == END   # ahead: the planned end
    assert decide.end_at_start(END, at) == ""          # the cancel's moment
    assert decide.end_at_start(END, at + 1) == ""
    assert decide.term_cause(0, 0, decide.end_at_start(END, at + 1), END) == decide.CANCEL
    assert decide.end_at_start("N/A", at) == "N/A"     # no time limit: nothing to compare
    assert decide.end_at_start("", at) == ""


# ---- gate_rejects ----------------------------------------------------------------------

NODES = ["n1", "n2", "n3"]


def test_gate_rejects_nothing_when_every_node_answers_alike():
    assert decide.gate_rejects(NODES, {n: "torch 2.6, 8 GPUs" for n in NODES}) == []


def test_gate_rejects_the_odd_node_out():
    answers = {"n1": "8 GPUs", "n2": "7 GPUs", "n3": "8 GPUs"}
    assert decide.gate_rejects(NODES, answers) == ["n2"]


def test_gate_rejects_a_node_without_an_answer():
    assert decide.gate_rejects(NODES, {"n1": "ok", "n3": "ok"}) == ["n2"]


def test_gate_rejects_every_node_when_none_answered():
    assert decide.gate_rejects(NODES, {}) == NODES


def test_gate_ignores_answers_of_nodes_not_in_the_job():
    """A stale answer from a node the job does not have neither counts for the majority nor
    is rejected."""
    answers = {"n1": "a", "n2": "a", "n3": "b", "x7": "b", "x8": "b"}
    assert decide.gate_rejects(NODES, answers) == ["n3"]


def test_gate_on_a_tie_keeps_the_first_nodes_answer():
    """Two nodes that differ: the majority is a tie, and the first node's answer wins (the
    second node is the one left out, whichever is broken)."""
    assert decide.gate_rejects(["n1", "n2"], {"n1": "a", "n2": "b"}) == ["n2"]


# ---- after_launch ----------------------------------------------------------------------

# A stopped launch whose program saved: the base every case below changes one fact of.
STOPPED = decide.Facts(status=143, stop_requested=True, program_finished=False, saved=True, slurm_requeued=False,
                       cancelled=False, preempted=False, restarts=0, max_requeues=3, requeue_always=False)


def names(v: decide.Verdict) -> list[str]:
    return [name for name, _ in v.events]


def test_a_launch_that_succeeded_is_finished():
    v = decide.after_launch(replace(STOPPED, status=0, stop_requested=False))
    assert (v.action, v.outcome, v.code) == ("end", "finished", 0)
    assert v.events == [("finished", {"exit_code": 0})]


def test_a_program_that_stopped_by_itself_after_a_checkpoint_is_a_stop_not_a_crash():
    """`scancel --signal=TERM JOB` reaches the tasks, not the supervisor: the program saved,
    wrote `stopped` and exited 75. It read as a crash ("failed ... exit status 75", an in-job
    restart, lost steps); it is a stop: requeued, nothing blamed."""
    f = replace(STOPPED, status=75, stop_requested=False, program_stopped=True)
    assert not decide.failed_by_itself(f)
    assert not decide.relaunch(f, progressed=True, repeated_error=False, relaunches=0, budget=3)
    v = decide.after_launch(f)
    assert (v.action, names(v)) == ("requeue", ["requeue"]), v
    assert v.say.startswith("slurmtrain: the program stopped after a checkpoint, asked by no one in the job\n"), v.say


def test_an_exit_0_after_a_stop_is_finished_but_said_unless_the_program_wrote_stopped():
    """The habit of saving on the signal and exiting 0: taken as finished (it may have), and
    said, with the way to be requeued. A program that wrote `stopped` and exited 0, not 75,
    stopped: requeued as a stop."""
    v = decide.after_launch(replace(STOPPED, status=0))
    assert (v.action, v.outcome, v.code) == ("end", "finished", 0), v
    assert v.events == [("finished", {"exit_code": 0, "after_stop": True})]
    assert v.say.startswith("slurmtrain: the command exited 0 after the stop request: taken as finished; a program "
                            "that stops early instead reports its checkpoint and exits 75"), v.say
    v = decide.after_launch(replace(STOPPED, status=0, program_stopped=True))
    assert (v.action, v.kind) == ("requeue", eventlog.TIME_LIMIT), v
    v = decide.after_launch(replace(STOPPED, status=0, program_finished=True))
    assert (v.action, v.outcome, v.code) == ("end", "finished", 0)


@pytest.mark.parametrize("stop_requested, why", [(True, "as the stop request came"),
                                                 (False, "before its launcher exited")])
def test_a_program_that_finished_is_finished_whatever_the_launch_said(stop_requested, why):
    v = decide.after_launch(replace(STOPPED, program_finished=True, stop_requested=stop_requested, status=1))
    assert (v.action, v.code) == ("end", 0)
    assert v.outcome == "finished (the launch then exited with status 1)"
    assert v.events == [("finished", {"exit_code": 0, "launch_exit": 1})]
    assert why in v.say and "not requeueing" in v.say


def test_a_program_that_finished_wins_over_slurms_requeue_and_a_cancel():
    v = decide.after_launch(replace(STOPPED, program_finished=True, slurm_requeued=True, cancelled=True))
    assert v.action == "end" and v.code == 0 and names(v) == ["finished"]


def test_slurms_own_requeue_is_a_node_failure_and_not_requeued_again():
    v = decide.after_launch(replace(STOPPED, slurm_requeued=True, cancelled=True, down_nodes=("n2",)))
    assert (v.action, v.outcome, v.code) == ("node_failure", "requeued by Slurm after a node failure", 143)
    assert v.events == [] and "node of the job failed" in v.say


def test_a_requeue_from_outside_with_no_node_down_is_nobodys_failure_and_not_requeued_again():
    """`scontrol requeue` by an administrator: the job is requeued already, no node to blame."""
    v = decide.after_launch(replace(STOPPED, slurm_requeued=True))
    assert (v.action, v.outcome, v.code) == ("end", "requeued from outside the job", 143)
    assert v.events == [] and "`scontrol requeue` by an administrator" in v.say


def test_a_program_that_requeued_its_own_job_and_exited_0_is_requeued_not_finished():
    """Lightning's SLURM auto-requeue (no slurmtrain callback): it saves, runs `scontrol
    requeue`, and exits 0. Read as finished, the history said "the job finished (exit 0)"
    and goodput charged lost steps; a program that said it is done stays finished."""
    v = decide.after_launch(replace(STOPPED, status=0, slurm_requeued=True))
    assert (v.action, v.outcome, v.code) == ("end", "requeued from outside the job", 0)
    assert v.events == [] and "or the program itself, as Lightning's SLURM auto-requeue does" in v.say
    done = decide.after_launch(replace(STOPPED, status=0, slurm_requeued=True, program_finished=True))
    assert names(done) == ["finished"]


def test_a_cancel_ends_without_a_requeue():
    v = decide.after_launch(replace(STOPPED, cancelled=True))
    assert (v.action, v.outcome, v.code) == ("end", "cancelled", 143)
    assert v.events == [] and "not requeueing" in v.say


def test_a_failure_without_a_stop_is_failed():
    v = decide.after_launch(replace(STOPPED, status=1, stop_requested=False))
    assert (v.action, v.outcome, v.code) == ("end", "failed", 1)
    assert v.events == [("failed", {"exit_code": 1})]
    assert "a failure of the command itself" in v.say


def test_a_failure_without_a_stop_is_failed_even_when_saved_and_requeue_always():
    v = decide.after_launch(replace(STOPPED, stop_requested=False, requeue_always=True))
    assert v.outcome == "failed" and v.action == "end"


def test_preemption_counts_as_a_stop_and_is_requeued():
    v = decide.after_launch(replace(STOPPED, stop_requested=False, preempted=True))
    assert (v.action, v.code) == ("requeue", 143)
    assert v.events == [("preempted", {"exit_code": 143}), ("requeue", {"exit_code": 143, "saved": True})]
    assert v.say.startswith("slurmtrain: Slurm preempted the job")


def test_preemption_after_a_stop_adds_no_preempted_event():
    v = decide.after_launch(replace(STOPPED, preempted=True))
    assert names(v) == ["requeue"]


def test_preemption_with_nothing_saved_is_not_requeued():
    v = decide.after_launch(replace(STOPPED, stop_requested=False, preempted=True, saved=False))
    assert v.action == "end" and names(v) == ["preempted", "stop_unsaved"]


def test_a_stop_with_nothing_saved_is_not_requeued():
    v = decide.after_launch(replace(STOPPED, saved=False))
    assert (v.action, v.outcome, v.code) == ("end", "stopped; the program saved nothing, not requeued", 143)
    assert v.events == [("stop_unsaved", {"exit_code": 143})]
    assert 'requeue_when = "always"' in v.say


def test_exit_75_is_a_checkpoint_even_without_a_saved_event():
    v = decide.after_launch(replace(STOPPED, saved=False, status=eventlog.EXIT_STOPPED))
    assert (v.action, v.code) == ("requeue", 75)


def test_requeue_always_requeues_a_stop_with_nothing_saved():
    v = decide.after_launch(replace(STOPPED, saved=False, requeue_always=True))
    assert v.action == "requeue" and names(v) == ["requeue"]


@pytest.mark.parametrize("restarts", [3, 4])
def test_a_stop_at_the_requeue_limit_ends_with_exit_3(restarts):
    v = decide.after_launch(replace(STOPPED, restarts=restarts))
    assert (v.action, v.outcome, v.code) == ("end", "stopped; requeue limit reached", 3)
    assert v.events == [("requeue_limit", {"max_requeues": 3})]


def test_a_stop_below_the_requeue_limit_is_requeued():
    v = decide.after_launch(replace(STOPPED, restarts=2))
    assert (v.action, v.outcome, v.code) == ("requeue", "stopped after a checkpoint; requeued", 143)
    assert v.events == [("requeue", {"exit_code": 143, "saved": True})]
    assert "requeueing the job" in v.say


@pytest.mark.parametrize("restarts", [0, 3, 12])
def test_a_stop_after_a_start_that_moved_the_run_on_is_requeued_and_not_counted(restarts):
    """A run longer than its time limit: each start that saved past the newest checkpoint
    before it is requeued, however many requeues came before (a 14-day run with daily limits
    outlived max_requeues = 10 on day 11)."""
    v = decide.after_launch(replace(STOPPED, restarts=restarts, progressed=True))
    assert (v.action, v.kind, v.code) == ("requeue", "time limit", 143)
    assert v.events == [("requeue", {"exit_code": 143, "saved": True, "counted": False})]
    assert "not counted toward max_requeues: this start saved a newer checkpoint" in v.say


def test_a_preemption_counts_toward_the_requeue_limit_even_after_progress():
    v = decide.after_launch(replace(STOPPED, stop_requested=False, preempted=True, restarts=3, progressed=True))
    assert (v.action, v.code) == ("end", 3) and v.events[-1] == ("requeue_limit", {"max_requeues": 3})
    v = decide.after_launch(replace(STOPPED, stop_requested=False, preempted=True, restarts=2, progressed=True))
    assert v.action == "requeue" and "counted" not in v.events[-1][1]


def test_max_requeues_0_never_requeues_even_after_progress():
    v = decide.after_launch(replace(STOPPED, max_requeues=0, progressed=True))
    assert (v.action, v.code) == ("end", 3)


def test_the_supervisor_imports_no_torch_and_refuses_to_run_outside_a_job():
    """It runs on the batch host for the job's whole life: light (no torch, numpy, click,
    jinja2, submitit), and outside a job script it says what is missing instead of a traceback."""
    import subprocess
    import sys

    code = ("import sys, slurmtrain.job.__main__ as m\n"
            "print(' '.join(x for x in ('torch', 'numpy', 'click', 'jinja2', 'submitit') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"python -m slurmtrain.job imported: {out}"
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "slurmtrain.job", "--launcher", "torchrun"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("slurmtrain: error: python -m slurmtrain.job runs inside a job script; SLURM_JOB_ID")


FAILED_AFTER_SAVING = replace(STOPPED, status=137, stop_requested=False)


@pytest.mark.parametrize("change,progressed,repeated,relaunches,expected", [
    ({}, True, False, 0, True),                       # a rank died after a new checkpoint
    ({}, False, False, 0, False),                     # nothing new to resume from
    ({}, True, True, 0, False),                       # the same error at the same step again
    ({}, True, False, 3, False),                      # the budget is spent
    ({"status": 0}, True, False, 0, False),
    ({"program_finished": True}, True, False, 0, False),
    ({"stop_requested": True}, True, False, 0, False),
    ({"cancelled": True}, True, False, 0, False),
    ({"slurm_requeued": True}, True, False, 0, False),
    ({"preempted": True}, True, False, 0, False),
    ({"hung": True}, False, False, 0, True),          # a hang: launched again from the newest checkpoint
    ({"hung": True}, False, False, 3, False),
    ({"hung": True, "stop_requested": True}, False, False, 0, False),
], ids=["died", "no-progress", "repeated", "budget", "ok", "finished", "stop", "cancel", "node-failure", "preempted",
        "hung", "hung-budget", "hung-stop"])
def test_relaunch(change, progressed, repeated, relaunches, expected):
    assert decide.relaunch(replace(FAILED_AFTER_SAVING, **change), progressed, repeated, relaunches, 3) is expected



@pytest.mark.parametrize("change,lost,covered,progressed,relaunches,expected", [
    ({}, ["n2"], True, False, 0, ("relaunch", "nodes lost", "as node(s) n2 were lost")),  # saved or not
    ({}, ["n2", "n3"], False, True, 0, ("requeue_without", "", "node(s) n2 n3 lost")),     # no spare to cover
    ({}, ["n2"], True, True, 3, ("requeue_without", "", "node(s) n2 lost")),               # the budget is spent
    ({"hung": True}, ["n2"], False, True, 0, ("requeue_without", "", "node(s) n2 lost (seen first as a hang)")),
    ({}, [], False, True, 0, ("relaunch", "", "after a new checkpoint")),
    ({"stray_kill": True}, [], False, False, 0,
     ("relaunch", "stray kill", "as Slurm killed it (its kill of an earlier start's step)")),
    ({}, [], False, False, 0, ("finish", "", "")),                                         # nothing new to resume from
    ({"stop_requested": True}, [], False, True, 0, ("finish", "", "")),
], ids=["covered", "uncovered", "budget", "hang", "saved", "stray-kill", "no-progress", "stop"])
def test_after_failure(change, lost, covered, progressed, relaunches, expected):
    f = replace(FAILED_AFTER_SAVING, **change)
    then = decide.after_failure(f, lost, f.hung, covered, progressed, False, relaunches, 3)
    assert (then.action, then.why, then.words) == expected


def test_a_launch_fault_is_what_the_node_probe_shows_not_the_first_verdict():
    """A dead node's peers wait in a collective: the hang verdict comes first, the probe names
    the node after; the cause is the node. A node named twice is alive: its hang is a hang."""
    assert decide.launch_fault(hung=True, dead=["n2"]) == {"cause": "node lost", "seen_as": "hang"}
    assert decide.launch_fault(hung=False, dead=["n2"]) == {"cause": "node lost"}
    assert decide.launch_fault(hung=True, dead=[]) == {"cause": "hang"}
    assert decide.launch_fault(hung=False, dead=[]) == {"cause": "crash"}


@pytest.mark.parametrize("unreached,setup_failed,relaunches,tries,wait", [
    (True, False, 0, 0, 5.0), (True, False, 1, 1, 10.0), (True, False, 2, 2, 20.0),  # backing off
    (True, False, 3, 3, None),  # restarts_in_job spent
    (False, False, 0, 0, None),  # no node srun could not reach: the start-up watchdog's end
    (True, True, 0, 0, None)])  # a setup line failed: something ran, and failed
def test_a_launch_srun_could_not_start_on_a_node_is_tried_again_backing_off(unreached, setup_failed, relaunches,
                                                                            tries, wait):
    assert decide.launch_again_in(unreached, setup_failed, relaunches, 3, tries) == wait


def test_a_relaunch_says_where_and_why_in_the_log_and_its_event():
    failed = replace(STOPPED, stop_requested=False, status=1, error="ValueError: bad batch")
    said, fields = decide.relaunch_said(decide.AfterFailure("relaunch", words="after a new checkpoint"), failed,
                                        "n2", 1, 3, ["n1", "n2"])
    assert said == ("slurmtrain: the program failed on n2 (exit status 1: ValueError: bad batch) after a new "
                    "checkpoint; starting it again in this allocation on n1 n2 (1 of 3)")
    assert fields == {"attempt": 1, "exit_code": 1, "node": "n2", "error": "ValueError: bad batch"}
    hung = replace(failed, hung=True, error=None, status=143)
    said, fields = decide.relaunch_said(decide.AfterFailure("relaunch"), hung, None, 2, 3, ["n1", "n3"])
    assert said.startswith("slurmtrain: the launch hung and was ended (exit status 143); starting it again")
    assert fields == {"attempt": 2, "exit_code": 143}


def test_the_spent_budget_is_said_only_where_it_alone_kept_the_launch_from_starting_again():
    crashed = replace(STOPPED, status=137, stop_requested=False)
    assert decide.spent_budget(crashed, progressed=True, repeated_error=False, relaunches=1, budget=1) == 1
    assert decide.spent_budget(crashed, progressed=True, repeated_error=False, relaunches=0, budget=1) == 0  # left
    assert decide.spent_budget(crashed, progressed=False, repeated_error=False, relaunches=1, budget=1) == 0
    assert decide.spent_budget(crashed, progressed=True, repeated_error=True, relaunches=1, budget=1) == 0
    assert decide.spent_budget(crashed, progressed=True, repeated_error=False, relaunches=0, budget=0) == 0  # off


@pytest.mark.parametrize("status", [128 + signal.SIGUSR2, -signal.SIGUSR2])
def test_a_program_killed_by_the_stop_signal_is_told_to_install_its_handler_first(status):
    """Killed by USR2 itself (srun's 140, or -12): the stop came before the program's handler
    was in place; the words say so, not "reports no checkpoint through slurmtrain.stop"."""
    v = decide.after_launch(replace(STOPPED, saved=False, status=status, stop_signal=signal.SIGUSR2))
    assert (v.action, v.kind) == ("end", eventlog.STOPPED_UNSAVED)
    assert v.events == [("stop_unsaved", {"exit_code": status, "signal": "USR2"})]
    assert "killed by SIGUSR2, the stop signal (exit" in v.say and "none at all or none yet" in v.say, v.say
    assert "before heavy imports" in v.say and "reported no checkpoint" not in v.say


@pytest.mark.parametrize("status, stop", [(143, signal.SIGTERM), (137, signal.SIGUSR2), (1, signal.SIGUSR2),
                                          (140, signal.SIGUSR1)])
def test_other_deaths_of_a_stop_with_nothing_saved_keep_the_plain_words(status, stop):
    """SIGTERM's 143 is srun's own too; SIGKILL is the escalation's; another signal is not the stop's."""
    v = decide.after_launch(replace(STOPPED, saved=False, status=status, stop_signal=stop))
    assert v.events == [("stop_unsaved", {"exit_code": status})]
    assert "reported no checkpoint in this run" in v.say


def test_exit_statuses_decode_to_signals():
    from slurmtrain import exits
    assert [exits.signal_of(s) for s in (140, -12, 137, 0, 1, 75, 128, 200, -70)] == \
        [12, 12, 9, None, None, None, None, None, None]


def test_a_first_step_below_the_runs_newest_checkpoint_is_said_with_the_checkpoint():
    """A program that started over after a requeue (its checkpoint folder named by job id, like
    Lightning's version_<job>): its first step is below what the run saved before the launch."""
    before = [{"event": "checkpoint_saved", "step": 40, "path": "/ck/version_7/last.ckpt"},
              {"event": "checkpoint_saved", "step": 50, "tier": "memory"},  # a copy in node memory: may be gone
              {"event": "stopped", "step": 43}]
    fields, line = decide.resumed_behind(before, [], 1)
    assert fields == {"step": 1, "saved": 43}
    assert line.startswith("slurmtrain: warning: the program's first step in this launch is 1, but the run saved "
                           "step 43: it did not resume from its newest checkpoint"), line
    assert "version_<job>" in line and "resume_from" in line
    fields, _ = decide.resumed_behind(before[:1], [], 12)
    assert fields == {"step": 12, "saved": 40, "path": "/ck/version_7/last.ckpt"}


@pytest.mark.parametrize("step", [44, 43])
def test_a_first_step_past_or_at_the_checkpoint_is_a_resume(step):
    """At: a program may count from the step it resumed at."""
    assert decide.resumed_behind([{"event": "stopped", "step": 43}], [], step) is None
    assert decide.resumed_behind([], [], 1) is None  # nothing saved before: a first start


def test_a_launch_that_said_it_resumed_from_the_checkpoint_is_not_warned_of():
    """Its own step count may differ (an epoch's batch index), or its heartbeat carries none."""
    before = [{"event": "checkpoint_saved", "step": 40}]
    assert decide.resumed_behind(before, [{"event": "resumed", "step": 40}], 0) is None
    assert decide.resumed_behind(before, [{"event": "resumed", "step": 20}], 21) is not None
    assert decide.resumed_behind(before, [], None) is None


def test_after_a_rollback_the_saves_that_follow_are_the_runs():
    """Saved 3000, resumed at 1000 on purpose, saved 1500: a launch resuming at 1500 is right;
    so is one after a launch that started over, once it saved again."""
    before = [{"event": "checkpoint_saved", "step": 3000}, {"event": "resumed", "step": 1000},
              {"event": "checkpoint_saved", "step": 1500}]
    assert decide.resumed_behind(before, [], 1501) is None
    assert decide.resumed_behind(before, [], 1)[0]["saved"] == 1500


def test_a_stop_names_its_checkpoint_through_the_save_of_its_step():
    """counter.py and the callbacks report the save (with its path), then `stopped` (none)."""
    before = [{"event": "checkpoint_saved", "step": 5, "path": "/r/c-0.json"},
              {"event": "checkpoint_saved", "step": 7, "path": "/r/c-0.json"}, {"event": "stopped", "step": 7}]
    assert decide.resumed_behind(before, [], 1)[0] == {"step": 1, "saved": 7, "path": "/r/c-0.json"}
