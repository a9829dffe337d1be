"""The supervisor's state machine (decide.step), walked transition by transition from a
table, and drawn: docs/supervisor.md's diagrams are decide.EDGES, no more and no fewer."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from slurmtrain.eventlog import Ev
from slurmtrain.job import decide
from slurmtrain.job.decide import (Arrivals, Beats, Began, Do, Due, EndTime, Exited, GateAnswered, Lagging, Over,
                                   Phase, Probed, Settled, Sig, State, Stop, TaskFailed, TermCause)
from slurmtrain.job.stragglers import Straggler

DOC = Path(__file__).resolve().parents[2] / "docs" / "supervisor.md"
KNOBS = decide.Knobs(stop_signal="USR2", stop_timeout=90, rendezvous_timeout=60, warning_seconds=0)
HANG = object()
SLOW = Straggler(node="n2", compute_ms=30.0, others_ms=10.0)
END = "2026-11-24T20:00:00"


def S(**fields) -> State:
    return State(knobs=KNOBS, **fields)


WARNED = decide.Knobs(stop_signal="USR2", warning_seconds=300)
WARN_AT = decide._epoch(END) - 300 + decide.WARNING_LATE_S  # the warning is overdue from here

# (name, state, observation, expected phase, expected stop, the actions' names in order)
TABLE = [
    ("no gate", S(now=5), Began(False, END), Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("gate", S(now=5), Began(True, END), Phase.GATE, Stop.NONE, ["start_gate"]),
    ("refused at the start", S(), Over("not started again", 3), Phase.DONE, Stop.NONE, ["end"]),
    ("gate passed", S(phase=Phase.GATE), GateAnswered((), True), Phase.JOINING, Stop.NONE,
     ["gate_passed", "start_launch"]),
    ("gate failed, spares", S(phase=Phase.GATE), GateAnswered(("n2",), True), Phase.JOINING, Stop.NONE,
     ["gate_failed", "start_launch"]),
    ("gate failed, no spare", S(phase=Phase.GATE), GateAnswered(("n2",), False), Phase.REQUEUING, Stop.NONE,
     ["gate_failed", "requeue_without"]),
    ("a stop in the gate is passed on at the launch", S(phase=Phase.GATE, stop=Stop.ASKED),
     GateAnswered((), True), Phase.JOINING, Stop.ASKED, ["gate_passed", "start_launch", "send_stop"]),
    ("gate's deadline", S(phase=Phase.GATE, now=61, deadline=60), Due(), Phase.GATE, Stop.NONE, ["send_step"]),
    ("joined", S(phase=Phase.JOINING), Arrivals((), (), False), Phase.RUNNING, Stop.NONE, []),
    ("still joining", S(phase=Phase.JOINING, now=10, deadline=60), Arrivals(("n2",), (), False), Phase.JOINING,
     Stop.NONE, []),
    ("setup failed", S(phase=Phase.JOINING, now=10, deadline=60), Arrivals(("n2",), ("n2",), False), Phase.ENDING,
     Stop.NONE, ["send_step"]),
    ("watchdog's deadline", S(phase=Phase.JOINING, now=60, deadline=60), Arrivals(("n2",), (), False),
     Phase.ENDING, Stop.NONE, ["send_step"]),
    ("srun refused: the job is cancelled", S(phase=Phase.JOINING, now=1, deadline=60),
     Arrivals(("n1", "n2"), (), True, "CANCELLED"), Phase.ENDING, Stop.NONE, ["say", "event", "send_step"]),
    ("srun ended with nodes missing, the job runs", S(phase=Phase.JOINING, now=1, deadline=60),
     Arrivals(("n2",), (), True, "RUNNING"), Phase.ENDING, Stop.NONE, ["send_step"]),
    ("start-up failed: over, or a launch again", S(phase=Phase.ENDING, missing=("n2",)), Exited(143), Phase.SETTLING,
     Stop.NONE, ["start_up_failed"]),
    ("srun could not reach a node: a launch again", S(phase=Phase.SETTLING, missing=("n2",)), Settled("relaunch"),
     Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("start-up failed: done", S(phase=Phase.ENDING, missing=("n2",)), Over("failed at start-up", 4), Phase.DONE,
     Stop.NONE, ["end"]),
    ("hang", S(phase=Phase.RUNNING), Beats(HANG), Phase.ENDING, Stop.NONE, ["record_hang", "send_step"]),
    ("no hang", S(phase=Phase.RUNNING), Beats(None), Phase.RUNNING, Stop.NONE, []),
    ("the program stopped (a preemption's SIGTERM) and its launch runs on past LINGER_S: ended",
     S(phase=Phase.RUNNING, wall=100 + decide.LINGER_S), Beats(None, stopped=(100.0, 23)), Phase.ENDING, Stop.NONE,
     ["say", "event", "send_step"]),
    ("the program stopped, its launch ends within LINGER_S: waited for",
     S(phase=Phase.RUNNING, wall=99 + decide.LINGER_S), Beats(None, stopped=(100.0, 23)), Phase.RUNNING, Stop.NONE,
     []),
    ("the program stopped at the supervisor's own stop: stop_timeout's escalation, not this",
     S(phase=Phase.RUNNING, wall=200, stop=Stop.ASKED, stop_at=0), Beats(None, stopped=(100.0, 23)), Phase.RUNNING,
     Stop.ASKED, []),
    ("a hang is not judged during a stop", S(phase=Phase.RUNNING, stop=Stop.ASKED), Beats(HANG), Phase.RUNNING,
     Stop.ASKED, []),
    ("task error", S(phase=Phase.RUNNING, now=7), TaskFailed(), Phase.RUNNING, Stop.NONE, []),
    ("stuck: probe", S(phase=Phase.RUNNING, now=7 + decide.STUCK_S, failed_at=7), Beats(None), Phase.RUNNING,
     Stop.NONE, ["probe"]),
    ("stuck: probed once", S(phase=Phase.RUNNING, now=99, failed_at=7, probed=True), Beats(None), Phase.RUNNING,
     Stop.NONE, []),
    ("dead node", S(phase=Phase.RUNNING, probed=True), Probed(("n2",)), Phase.ENDING, Stop.NONE,
     ["say", "send_step"]),
    ("every node answers", S(phase=Phase.RUNNING, probed=True, failed_at=7), Probed(()), Phase.RUNNING, Stop.NONE,
     []),
    ("no rank stepped by the deadline: probe", S(phase=Phase.RUNNING, now=61, deadline=60),
     Beats(None, stepping=False), Phase.RUNNING, Stop.NONE, ["probe"]),
    ("no rank stepped yet, before the deadline", S(phase=Phase.RUNNING, now=30, deadline=60),
     Beats(None, stepping=False), Phase.RUNNING, Stop.NONE, []),
    ("stepping: no start-up probe", S(phase=Phase.RUNNING, now=61, deadline=60), Beats(None), Phase.RUNNING,
     Stop.NONE, []),
    ("start-up probe: every node answers, said once", S(phase=Phase.RUNNING, start_probed=True), Probed(()),
     Phase.RUNNING, Stop.NONE, ["say"]),
    ("start-up probed once", S(phase=Phase.RUNNING, now=99, deadline=60, start_probed=True),
     Beats(None, stepping=False), Phase.RUNNING, Stop.NONE, []),
    ("a task failure after a start-up probe is probed too",
     S(phase=Phase.RUNNING, now=7 + decide.STUCK_S, failed_at=7, start_probed=True), Beats(None), Phase.RUNNING,
     Stop.NONE, ["probe"]),
    ("straggler replaced", S(phase=Phase.RUNNING), Lagging(SLOW, True), Phase.RUNNING, Stop.ASKED,
     ["report_straggler", "touch_stop_file", "send_stop"]),
    ("straggler, no spare", S(phase=Phase.RUNNING), Lagging(SLOW, False), Phase.RUNNING, Stop.NONE,
     ["report_straggler"]),
    ("exited", S(phase=Phase.RUNNING), Exited(1), Phase.SETTLING, Stop.NONE, ["settle"]),
    ("ended by us", S(phase=Phase.ENDING, hung=True), Exited(143), Phase.SETTLING, Stop.NONE, ["settle"]),
    ("ending's SIGKILL", S(phase=Phase.ENDING, now=20, deadline=15), Due(), Phase.ENDING, Stop.NONE, ["send_step"]),
    ("relaunch", S(phase=Phase.SETTLING, launch=1), Settled("relaunch"), Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("straggler's spare in", S(phase=Phase.SETTLING, stop=Stop.ASKED, replacing="n2"), Settled("replace"),
     Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("straggler's spare in, after SIGTERM", S(phase=Phase.SETTLING, stop=Stop.TERMED, replacing="n2"),
     Settled("replace"), Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("straggler's spare in, after SIGKILL", S(phase=Phase.SETTLING, stop=Stop.KILLED, replacing="n2"),
     Settled("replace"), Phase.JOINING, Stop.NONE, ["start_launch"]),
    ("requeue", S(phase=Phase.SETTLING), Settled("requeue", (False,)), Phase.REQUEUING, Stop.NONE, ["requeue"]),
    ("ended", S(phase=Phase.SETTLING), Over("finished", 0), Phase.DONE, Stop.NONE, ["end"]),
    ("requeued", S(phase=Phase.REQUEUING), Over(None, 0), Phase.DONE, Stop.NONE, ["end"]),
    # the stop window
    ("stop signal", S(phase=Phase.RUNNING, now=3), Sig("USR2"), Phase.RUNNING, Stop.ASKED,
     ["touch_stop_file", "event", "say", "send_stop"]),
    ("stop signal in the gate: no step to send it to", S(phase=Phase.GATE), Sig("USR2"), Phase.GATE, Stop.ASKED,
     ["touch_stop_file", "event", "say"]),
    ("a second stop signal", S(phase=Phase.RUNNING, stop=Stop.ASKED, stop_at=3), Sig("USR2"), Phase.RUNNING,
     Stop.ASKED, []),
    ("SIGCHLD only wakes", S(phase=Phase.RUNNING), Sig("CHLD"), Phase.RUNNING, Stop.NONE, []),
    ("SIGTERM: asked why", S(phase=Phase.RUNNING), Sig("TERM"), Phase.RUNNING, Stop.NONE, ["ask_term_cause"]),
    ("SIGTERM after a cancel", S(phase=Phase.RUNNING, cancelled=True), Sig("TERM"), Phase.RUNNING, Stop.NONE, []),
    ("the time limit", S(phase=Phase.RUNNING), TermCause(decide.TIME_LIMIT), Phase.RUNNING, Stop.ASKED,
     ["touch_stop_file", "event", "say", "send_stop"]),
    ("the time limit in the stop window", S(phase=Phase.RUNNING, stop=Stop.ASKED, stop_at=1),
     TermCause(decide.TIME_LIMIT), Phase.RUNNING, Stop.ASKED, []),
    ("Slurm's stop during our own", S(phase=Phase.RUNNING, stop=Stop.ASKED, stop_at=1, replacing="n2"),
     TermCause(decide.TIME_LIMIT), Phase.RUNNING, Stop.ASKED, ["touch_stop_file", "event", "say", "send_stop"]),
    ("a cancel", S(phase=Phase.RUNNING), TermCause(decide.CANCEL), Phase.RUNNING, Stop.NONE, ["event"]),
    ("requeued from outside", S(phase=Phase.RUNNING), TermCause(decide.REQUEUED), Phase.RUNNING, Stop.NONE,
     ["note_requeue"]),
    ("no signal while requeuing", S(phase=Phase.REQUEUING), Sig("TERM"), Phase.REQUEUING, Stop.NONE, []),
    ("stop_timeout", S(phase=Phase.RUNNING, stop=Stop.ASKED, stop_at=10, now=100), Due(), Phase.RUNNING, Stop.TERMED,
     ["say", "event", "signal_steps"]),
    ("not yet", S(phase=Phase.RUNNING, stop=Stop.ASKED, stop_at=10, now=99), Due(), Phase.RUNNING, Stop.ASKED, []),
    ("TERM_GRACE_S", S(phase=Phase.RUNNING, stop=Stop.TERMED, stop_at=10, term_at=100, now=100 + decide.TERM_GRACE_S),
     Due(), Phase.RUNNING, Stop.KILLED, ["say", "event", "send_step"]),
    ("killed: nothing more", S(phase=Phase.RUNNING, stop=Stop.KILLED, stop_at=10, term_at=100, now=999), Due(),
     Phase.RUNNING, Stop.KILLED, []),
    ("warning overdue: end asked", State(knobs=WARNED, phase=Phase.RUNNING, planned_end=END, wall=WARN_AT), Due(),
     Phase.RUNNING, Stop.NONE, ["ask_end_time"]),
    ("warning not yet due", State(knobs=WARNED, phase=Phase.RUNNING, planned_end=END, wall=WARN_AT - 1), Due(),
     Phase.RUNNING, Stop.NONE, []),
    ("warning overdue, end moved", State(knobs=WARNED, phase=Phase.RUNNING, planned_end=END, wall=WARN_AT),
     EndTime("2026-11-24T21:00:00"), Phase.RUNNING, Stop.NONE, []),
    ("warning overdue, end as planned", State(knobs=WARNED, phase=Phase.RUNNING, planned_end=END, wall=WARN_AT),
     EndTime(END), Phase.RUNNING, Stop.ASKED, ["say", "touch_stop_file", "event", "say", "send_stop"]),
]


@pytest.mark.parametrize("name,state,obs,phase,stop,actions", TABLE, ids=[row[0] for row in TABLE])
def test_step(name, state, obs, phase, stop, actions):
    after, done = decide.step(state, obs)
    assert (after.phase, after.stop) == (phase, stop)
    assert [a.what for a in done] == actions
    assert all(isinstance(a, Do) for a in done)


def test_the_table_walks_every_transition():
    walked = set()
    for _, state, obs, phase, stop, _ in TABLE:
        after, _ = decide.step(state, obs)
        walked |= {(state.phase, after.phase), (state.stop, after.stop)}
    walked = {(a, b) for a, b in walked if a != b}
    assert walked == set(decide.EDGES), f"not walked: {set(decide.EDGES) - walked}"


def test_a_transition_not_in_edges_is_refused():
    with pytest.raises(ValueError, match="running -> done"):
        decide.step(S(phase=Phase.RUNNING), Over("finished", 0))
    with pytest.raises(ValueError, match="no transition from settling on Beats"):
        decide.step(S(phase=Phase.SETTLING), Beats(None))  # what is not expected in a phase is a bug


def test_what_step_decides_is_carried_in_the_state():
    s, _ = decide.step(S(phase=Phase.RUNNING, now=3), Sig("USR2"))
    assert (s.stop_at, s.replacing) == (3, None)
    s, acts = decide.step(S(phase=Phase.RUNNING), TermCause(decide.CANCEL))
    assert s.cancelled and acts == [Do("event", (Ev.CANCELLED, {}))]
    s, _ = decide.step(S(now=5, launch=0), Began(False, END))
    assert (s.launch, s.deadline, s.planned_end) == (1, 5 + KNOBS.rendezvous_timeout, END)
    s, _ = decide.step(S(phase=Phase.SETTLING, launch=1, relaunches=0, hung=True, failed_at=3, probed=True),
                       Settled("relaunch"))
    assert (s.launch, s.relaunches, s.hung, s.failed_at, s.probed) == (2, 1, False, None, False)
    s, _ = decide.step(S(phase=Phase.SETTLING, launch=1, start_probed=True), Settled("relaunch"))
    assert not s.start_probed  # each launch's start is watched afresh
    s, _ = decide.step(S(phase=Phase.SETTLING, launch=1, stop=Stop.ASKED, stop_at=4, replacing="n2"),
                       Settled("replace"))
    assert (s.relaunches, s.stop_at, s.replacing) == (0, None, None)
    s, _ = decide.step(S(phase=Phase.ENDING, now=20, deadline=15), Due())
    assert s.deadline == math.inf  # SIGKILL once
    # every node joined: the first step gets the rendezvous timeout again, from now
    s, _ = decide.step(S(phase=Phase.JOINING, now=40, deadline=65), Arrivals((), (), False))
    assert (s.phase, s.deadline) == (Phase.RUNNING, 40 + KNOBS.rendezvous_timeout)


def test_a_launch_srun_refused_blames_no_node_and_a_cancel_settles_as_one():
    """A cancel as the launch starts: srun says the job "has expired" before the cancel's
    SIGTERM reaches the supervisor. Not a start-up failure: no node goes to the ledger, and
    the launch settles as a cancelled one (its SIGTERM, when it comes, is not asked about)."""
    s, acts = decide.step(S(phase=Phase.JOINING, now=1, deadline=60), Arrivals(("n1", "n2"), (), True, "CANCELLED"))
    assert s.cancelled and s.missing == () and Do("event", (Ev.CANCELLED, {})) in acts
    s, acts = decide.step(s, Exited(1))
    assert s.phase == Phase.SETTLING and [a.what for a in acts] == ["settle"]
    assert decide.step(s, Sig("TERM"))[1] == []
    s, _ = decide.step(S(phase=Phase.JOINING, now=1, deadline=60), Arrivals(("n2",), (), True, "RUNNING"))
    assert s.missing == ("n2",) and not s.cancelled  # the nodes' own start-up failure
    s, acts = decide.step(S(phase=Phase.JOINING, now=1, deadline=60), Arrivals(("n2",), (), True, "TIMEOUT"))
    assert s.missing == () and not s.cancelled and [a.what for a in acts] == ["say", "send_step"]


def _diagram_edges(text: str) -> tuple[set[tuple[str, str]], set[str]]:
    edges, states = set(), set()
    for block in re.findall(r"```mermaid\n(.*?)```", text, re.S):
        for a, b in re.findall(r"^\s*(\S+) --> (\S+)", block, re.M):
            states |= {a, b} - {"[*]"}
            if "[*]" not in (a, b):
                edges.add((a, b))
    return edges, states


def test_the_diagrams_are_the_code():
    text = DOC.read_text()
    edges, states = _diagram_edges(text)
    code = {(a.value, b.value) for a, b in decide.EDGES}
    assert edges - code == set(), "drawn in docs/supervisor.md but not in decide.EDGES"
    assert code - edges == set(), "in decide.EDGES but not drawn in docs/supervisor.md"
    assert states == {p.value for p in Phase} | {s.value for s in Stop}
    for state in states:  # one paragraph each
        assert f"**{state}.**" in text, f"docs/supervisor.md has no paragraph for {state}"


def test_the_diagram_test_sees_a_missing_edge():
    text = DOC.read_text().replace("    requeuing --> done : Over\n", "")
    edges, _ = _diagram_edges(text)
    assert (Phase.REQUEUING.value, Phase.DONE.value) not in edges


@pytest.mark.parametrize("wall,cause", [
    (WARN_AT - decide.WARNING_LATE_S, "time limit"),  # Slurm's warning, on time
    (WARN_AT - decide.WARNING_LATE_S - 60, "time limit"),  # a tick early
    (WARN_AT - decide.WARNING_LATE_S - decide.WARNING_EARLY_S - 600, "asked"),  # ten minutes before it was due
])
def test_a_stop_signal_long_before_the_warning_was_due_was_asked_for_not_the_time_limit(wall, cause):
    """`scancel --signal=USR2 --batch` a minute into a 30-minute job is not the time limit."""
    _, done = decide.step(State(knobs=WARNED, phase=Phase.RUNNING, planned_end=END, wall=wall), Sig("USR2"))
    (event,) = [a for a in done if a.what == "event"]
    assert event.args[1]["cause"] == cause, event
    if cause == "asked":
        assert event.args[1]["before_end"] == round(decide._epoch(END) - wall)
