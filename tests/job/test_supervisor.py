"""The job supervisor (slurmtrain.job.supervisor) driven through whole starts of a job, with
stand-ins for what it talks to: Slurm's commands, the clock and its signals, and the srun
step of the task. Each hazard the bash job script met (the bash tests of them were
tests/runs/test_term_trap.py) has a test here; every wait is in fake time.

The stand-ins (all in the first part of this file):

- ``Clock``: fake time; ``at(t, signal)`` delivers a signal at a fake time. Like
  signals.Signals, ``wait`` returns at once while a signal waits to be taken.
- ``FakeSlurm``: one job (77) on nodes n1 n2, with the state Slurm keeps (restart count, end
  time, ExcNodeList, held) and scripted answers per command (``then``): killed by the job's
  SIGTERM (``KILLED``, ``KILLED_AFTER_IT_WENT_THROUGH``), hung until its timeout, refused.
- ``FakeStep``: the launch; ``Plan`` says what it does at which second after its start
  (arrival marks, the program's events, its exit) and when a signal is sent to it.
- ``Rig`` (the ``rig`` fixture): builds the supervisor over a real run directory
  ``<tmp>/runs/r1`` (the bad-node ledger lands in ``<tmp>/runs``) and reads back what
  happened: the supervisor's events, the ledger, the batch-log lines, the summary line.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import pytest

from slurmtrain import eventlog, events, ledger
from slurmtrain.job.slurm import Answer, Slurm
from slurmtrain.job.nodes import PROBE_S
from slurmtrain.job.config import Config, Job
from slurmtrain.job.decide import TERM_GRACE_S
from slurmtrain.job.supervisor import Supervisor
from slurmtrain.job.step import Launch

JOB = "77"
NODELIST = "n[1-2]"                    # the job's, as Slurm gives it; the fake expands it to FakeSlurm.nodes
END = "2026-11-24T20:00:00"            # the job's end as Slurm plans it at the start
MOVED_END = "2026-11-24T18:31:07"      # ... after an scancel
PREEMPTED_AT = "2026-11-24T18:30:00"
STOP, TERM = signal.SIGUSR2, signal.SIGTERM
KNOBS = dict(stop_timeout=90, max_requeues=10, restarts_in_job=0, hang_timeout=0, rendezvous_timeout=60, requeue_always=False, bad_node_hours=24.0,
             preflight=False)
WALL0 = 1_795_000_000.0     # the wall clock at fake time 0 (heartbeat files carry wall-clock times)
FAKE_TIME_LIMIT = 10_000.0  # a supervisor that waits past this in fake time is stuck
MAX_WAITS = 100_000         # ... or one that waits this often without the time moving


class Clock:
    """Fake time and the signals the supervisor gets, as ``signals.Signals`` behaves: ``wait``
    ends early at a signal, and returns at once while a signal waits to be taken."""

    def __init__(self) -> None:
        self.t = 0.0
        self.due: list[tuple[float, int, Callable[[], None] | None]] = []
        self.got: list[int] = []
        self.waits = 0

    def at(self, t: float, signum: int, cause: Callable[[], None] | None = None) -> None:
        """``signum`` reaches the supervisor at fake time ``t``; ``cause()`` runs first (what Slurm
        did that made it send the signal)."""
        self.due.append((t, signum, cause))
        self.due.sort(key=lambda d: d[0])

    def signal(self, signum: int) -> None:
        self.got.append(signum)

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self._deliver()

    def _deliver(self) -> None:
        while self.due and self.due[0][0] <= self.t:
            _, signum, cause = self.due.pop(0)
            if cause is not None:
                cause()
            self.got.append(signum)

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t

    def wait(self, seconds: float) -> None:
        self.waits += 1
        assert self.waits < MAX_WAITS and self.t < FAKE_TIME_LIMIT, f"the supervisor is stuck at {self.t} s"
        if self.got:
            return
        self.t = min(self.t + seconds, max(self.t, self.due[0][0])) if self.due else self.t + seconds
        self._deliver()

    def take(self) -> list[int]:
        got, self.got = self.got, []
        return got


def hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames``, for lists like ``n3,n[7-9]``."""
    out = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,]+)", nodelist):
        if plain:
            out.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            out += [f"{prefix}{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def command(argv: list[str]) -> str:
    """Which Slurm command ``argv`` is: hostnames, show job, squeue, sinfo, requeue,
    requeuehold, update, release or scancel."""
    if argv[0] != "scontrol":
        return argv[0]
    words = [a for a in argv[1:] if not a.startswith("-")]  # scontrol -o show job 77
    if words[0] == "show":
        return "show job" if words[1] == "job" else words[1]
    return words[0]


class FakeSlurm:
    """The Slurm commands of job 77, as ``Slurm(ref, run=...)``'s ``run``."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.nodes = ["n1", "n2"]
        self.restarts = 0
        self.restarts_later: tuple[float, int] | None = None  # (when, value): a busy controller shows it late
        self.end = END
        self.excluded = "(null)"
        self.preempt_time = "None"
        self.version = "22.05.8"     # scontrol show config's SLURM_VERSION
        self.requeue_flag = 1        # the job's Requeue=
        self.state = "RUNNING"       # the job's JobState
        self.unhealthy: list[str] = []
        self.dead: list[str] = []   # nodes that no longer answer: a probe's srun fails on them
        self.partition: list[str] | None = None  # the nodes of the job's partition (None: Slurm does not say)
        self.num_nodes: int | None = None  # NumNodes as Slurm shows it (a job that lost a node: fewer)
        self.pending = self.held = False
        self.hung = False
        self.killed: list[str] = []  # the commands the job's SIGTERM killed
        self.calls: list[tuple[float, str, list[str]]] = []
        self.scripted: dict[str, list] = {}
        self.refusing: dict[str, str] = {}

    def then(self, name: str, *answers) -> None:
        """The next calls of command ``name`` answer these, in turn (None: as Slurm would),
        then as Slurm would. An answer is an Answer or a function (slurm, argv, timeout) -> Answer."""
        self.scripted.setdefault(name, []).extend(answers)

    def hang(self) -> None:
        """From now on every command runs into its timeout (a dead or swamped controller)."""
        self.hung = True

    def refuse(self, name: str, text: str) -> None:
        """Every call of ``name`` fails with ``text``."""
        self.refusing[name] = text

    def __call__(self, argv: list[str], timeout: float) -> Answer:
        name = command(argv)
        self.calls.append((self.clock.now(), name, argv))
        limit = PROBE_S if name == "srun" else 10  # a probe of the nodes waits for srun's own connection timeout
        assert timeout and timeout <= limit, f"{argv}: every Slurm command needs a short timeout"
        if self.hung:
            return HUNG(self, argv, timeout)
        if self.scripted.get(name):
            answer = self.scripted[name].pop(0)
            if answer is not None:
                return answer(self, argv, timeout) if callable(answer) else answer
        if name in self.refusing:
            return Answer(1, "", self.refusing[name])
        return self.do(name, argv)

    def do(self, name: str, argv: list[str]) -> Answer:
        """The command as Slurm runs it."""
        if self.restarts_later and self.clock.now() >= self.restarts_later[0]:
            self.restarts, self.restarts_later = self.restarts_later[1], None
        if name == "hostnames":
            nodes = self.nodes if argv[-1] == NODELIST else hostnames(argv[-1])
            return Answer(0, "".join(f"{n}\n" for n in nodes))
        if name == "show job":
            room = f"Partition=debug NumNodes={self.num_nodes or len(self.nodes)} " if self.partition else ""
            return Answer(0, f"JobId={JOB} JobName=train JobState={self.state} Restarts={self.restarts} NodeList=n[1-2] "
                             f"{room}ExcNodeList={self.excluded} PreemptTime={self.preempt_time} Reason=None\n")
        if name == "partition" and self.partition:
            return Answer(0, f"PartitionName=debug Nodes={','.join(self.partition)} TotalNodes={len(self.partition)}\n")
        if name == "squeue":
            return Answer(0, self.end + "\n")
        if name == "sinfo":
            return Answer(0, "".join(f"{n}\n" for n in self.unhealthy))
        if name in ("requeue", "requeuehold"):
            if self.pending:
                return Answer(1, "", f"scontrol: error: Job {JOB} is pending execution")
            self.requeue_now(lag=0, hold=name == "requeuehold")
            return Answer(0)
        if name == "config":
            return Answer(0, f"SLURM_CONF = /etc/slurm/slurm.conf\nSLURM_VERSION = {self.version}\n")
        if name == "update" and argv[-1] == "Requeue=0":  # allowed while the job runs
            self.requeue_flag = 0
            return Answer(0)
        if name == "update":
            if not self.pending:
                return Answer(1, "", "Job is no longer pending execution")
            self.excluded = argv[-1].removeprefix("ExcNodeList=")
            return Answer(0)
        if name == "release":
            self.held = False
            return Answer(0)
        if name == "srun" and argv[-1] == 'echo "$SLURMD_NODENAME"':  # the probe of the launch's nodes
            asked = argv[argv.index("-w") + 1].split(",")
            if any(n in self.dead for n in asked):  # a step with a dead node starts nowhere
                return Answer(1, "", f"srun: error: Task launch failed on node {self.dead[0]}")
            return Answer(0, "".join(f"{n}\n" for n in asked))
        return Answer(0)  # scancel

    def requeue_now(self, lag: float, hold: bool) -> None:
        """Slurm requeues the job: pending (and held), its restart count up (``lag`` s later)."""
        self.pending, self.held = True, hold
        if lag:
            self.restarts_later = (self.clock.now() + lag, self.restarts + 1)
        else:
            self.restarts += 1

    def names(self) -> list[str]:
        return [name for _, name, _ in self.calls]

    def argvs(self, name: str) -> list[list[str]]:
        return [argv for _, n, argv in self.calls if n == name]


# Scripted answers (FakeSlurm.then): what Slurm's SIGTERM and a hung controller do to a command.
def KILLED(slurm: FakeSlurm, argv, timeout) -> Answer:
    """The job's SIGTERM arrives while the command runs and kills it before it did anything."""
    slurm.killed.append(command(argv))
    slurm.clock.signal(TERM)
    return Answer(-15)


def KILLED_AFTER_IT_WENT_THROUGH(slurm: FakeSlurm, argv, timeout) -> Answer:
    """The command did its work (a requeue: the job is requeued and Slurm signals it), then
    the SIGTERM killed it before it reported success."""
    slurm.do(command(argv), argv)
    return KILLED(slurm, argv, timeout)


def HUNG(slurm: FakeSlurm, argv, timeout) -> Answer:
    slurm.clock.advance(timeout)
    return Answer(124, "", f"{argv[0]} timed out after {timeout:g} s")


def TIMED_OUT_AFTER_IT_WENT_THROUGH(slurm: FakeSlurm, argv, timeout) -> Answer:
    slurm.do(command(argv), argv)
    return HUNG(slurm, argv, timeout)


def killed_late(lag: float):
    """A requeue that went through, killed by its SIGTERM; the controller shows the new
    restart count only ``lag`` seconds later (a loaded sandbox did)."""
    def answer(slurm: FakeSlurm, argv, timeout) -> Answer:
        slurm.requeue_now(lag, hold=command(argv) == "requeuehold")
        return KILLED(slurm, argv, timeout)
    return answer


# ---- the launch -------------------------------------------------------------------------

Action = Callable[["FakeStep"], None]


@dataclass
class Plan:
    """What a step does: ``at`` (seconds after its start, action); ``on`` a signal sent to it,
    (seconds later, action). srun ends its tasks on SIGTERM: 143 unless ``on`` says otherwise."""

    at: list[tuple[float, Action]] = field(default_factory=list)
    on: dict[int, list[tuple[float, Action]]] = field(default_factory=dict)


def arrive(*nodes: str) -> Action:
    return lambda step: [(step.marks / n).touch() for n in nodes]


def setup_fails(node: str, status: int, line: str) -> Action:
    return lambda step: (step.marks / f"{node}.setup-failed").write_text(f"{status}\n{line}\n")


def emit(name: str, **fields) -> Action:
    """The program writes an event."""
    return lambda step: events.append(step.rig.run_dir, name, **fields)


def exits(status: int) -> Action:
    def act(step: FakeStep) -> None:
        step.status = status
    return act


def answers(**by_node: str) -> Action:
    """The preflight gate's answers: ``<gate dir>/<node>.ok``."""
    return lambda step: [(step.gate_dir / f"{n}.ok").write_text(text) for n, text in by_node.items()]


def do(fn: Callable[[], None]) -> Action:
    return lambda step: fn()


class FakeStep:
    def __init__(self, rig: Rig, plan: Plan, gate_dir=None) -> None:
        self.rig, self.gate_dir, self.status = rig, gate_dir, None
        self.marks = rig.run_dir / f".arrived-{JOB}"
        self.on = {TERM: [(0.0, exits(143))], **plan.on}
        self.todo: list[tuple[float, int, Action]] = []
        self.sent: list[tuple[float, int]] = []
        for delay, act in plan.at:
            self.later(delay, act)

    def later(self, delay: float, act: Action) -> None:
        self.todo.append((self.rig.clock.now() + delay, len(self.todo), act))
        self.todo.sort(key=lambda x: x[:2])

    def poll(self) -> int | None:
        while self.status is None and self.todo and self.todo[0][0] <= self.rig.clock.now():
            self.todo.pop(0)[2](self)
        return self.status

    def send(self, signum: int) -> None:
        self.sent.append((self.rig.clock.now(), signum))
        if self.status is None:
            for delay, act in self.on.get(signum, []):
                self.later(delay, act)


# Programs: the built-in trainer's ways, in fake seconds after the launch.
JOINS = (1, arrive("n1", "n2"))
SAVES = (3, emit("checkpoint_saved", step=5))
STOPS_AFTER_SAVING = {STOP: [(2, emit("stopped", step=6)), (2, exits(75))]}


class Rig:
    """One start of job 77: the stand-ins, the supervisor, and what it left behind."""

    def __init__(self, tmp_path, capsys) -> None:
        self.runs = tmp_path / "runs"
        self.run_dir = self.runs / "r1"
        self.run_dir.mkdir(parents=True)
        self.clock = Clock()
        self.slurm = FakeSlurm(self.clock)
        self.task = Plan([JOINS, SAVES, (30, emit("finished", step=9)), (30, exits(0))])
        self.gate = Plan()
        self.restarts = 0
        self.lines: list[str] = []
        self.launched: list[str] = []
        self.on_nodes: list[list[str]] = []   # each launch's nodes
        self.overlaps: list[bool] = []
        self.batch_log = None                 # the job's --output file, where srun writes its task errors        # ... and whether it may share them with a step of a lost node
        self.step: FakeStep | None = None
        self.gate_step: FakeStep | None = None
        self._capsys = capsys
        self.stdout = ""

    # the Launch the supervisor is given
    def start_task(self, nodes: list[str], overlap: bool = False) -> FakeStep:
        assert set(nodes) <= set(self.slurm.nodes)  # all of them unless there are spares or lost nodes: run() checks
        self.on_nodes.append(nodes)
        self.overlaps.append(overlap)
        self.launched.append("task")
        # a list: one plan per launch (an in-job restart launches again)
        self.step = FakeStep(self, self.task.pop(0) if isinstance(self.task, list) else self.task)
        return self.step

    def node_of_task(self, nodes: list[str], task: int) -> str | None:
        return Launch("torchrun", 2, self.run_dir).node_of_task(nodes, task)  # a task per node

    def start_gate(self, nodes: list[str], gate_dir) -> FakeStep:
        self.launched.append("gate")
        self.gate_step = FakeStep(self, self.gate, gate_dir)
        return self.gate_step

    def run(self, **knobs) -> int:
        cfg = Config(run_dir=self.run_dir, stop_signal=STOP, **{**KNOBS, **knobs})
        job = Job(JOB, JOB, JOB, self.restarts, NODELIST)
        code = Supervisor(cfg, job, Slurm(JOB, run=self.slurm), self.clock, self, out=self.lines.append,
                          batch_log=self.batch_log).run()
        self.stdout = self._capsys.readouterr().out
        if not cfg.spare_nodes and "nodes_lost" not in self.names():
            assert all(nodes == self.slurm.nodes for nodes in self.on_nodes), self.on_nodes
        return code

    # what happened
    def events(self) -> list[dict]:
        """The supervisor's events (the program's carry no job id)."""
        return [e for e in events.read(self.run_dir) if "job_id" in e]

    def names(self) -> list[str]:
        return [e["event"] for e in self.events()]

    def event(self, name: str) -> dict:
        (found,) = [e for e in self.events() if e["event"] == name]
        return found

    def ledger(self) -> list[tuple[str, str]]:
        return [(e.node, e.source) for e in ledger.read(self.runs)]

    def said(self) -> str:
        return "\n".join(self.lines)

    def summary(self) -> str:
        """The batch log's last line (stdout), less the run directory."""
        last = self.stdout.strip().splitlines()[-1]
        assert last.startswith(f"slurmtrain: job {JOB}: ") and last.endswith(f"; run directory {self.run_dir}")
        return last.removeprefix(f"slurmtrain: job {JOB}: ").removesuffix(f"; run directory {self.run_dir}")

    def bad_node(self, node: str = "n3") -> None:
        """``node`` in the bad-node ledger (doctor put it there): a requeue leaves it out."""
        ledger.add(self.runs, node, "doctor: GPU 3 missing", run="r0", job_id="70", source="doctor")

    def gate_rejects_n3(self) -> None:
        """A job on n1 n2 n3 whose preflight gate finds n3 unlike the others."""
        self.slurm.nodes = ["n1", "n2", "n3"]
        self.gate = Plan([(1, answers(n1="torch 2.6 gpus=8", n2="torch 2.6 gpus=8", n3="torch 2.6 gpus=7")),
                          (2, exits(0))])

    def stopped_at(self, t: float, signum: int = STOP) -> None:
        """The program saves, and stops after a checkpoint when ``signum`` comes at ``t``."""
        self.task = Plan([JOINS, SAVES], STOPS_AFTER_SAVING)
        self.clock.at(t, signum)


@pytest.fixture
def rig(tmp_path, capsys) -> Rig:
    return Rig(tmp_path, capsys)


def requeued_cleanly(rig: Rig, code: int) -> None:
    """Our requeue went through: exit 0, no failure or node failure said, the job not held."""
    assert code == 0, rig.said()
    assert "requeue" in rig.names()
    for wrong in ("requeue_failed", "requeued_by_slurm", "cancelled"):
        assert wrong not in rig.names(), rig.names()
    assert not rig.slurm.held, rig.slurm.names()
    assert rig.summary().startswith("stopped after a checkpoint; requeued"), rig.stdout


def excluded_and_released(rig: Rig, excluded: str = "n3") -> None:
    assert rig.slurm.excluded == excluded
    assert rig.slurm.names().count("requeuehold") == 1 and "requeue" not in rig.slurm.names()
    assert not rig.slurm.held


def take_with_a_signal_at_bytecode(k: int) -> list[int] | None:
    """What ``signals.Signals.take`` and the take after it return when STOP was recorded
    before and TERM's handler runs just before take's ``k``-th bytecode; None when take() has
    fewer. No handler is installed: the handler is called where a signal's could run."""
    from slurmtrain.job.signals import Signals

    clock = Signals.__new__(Signals)
    clock._got = [STOP]
    count = 0

    def each_bytecode(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
            if count == k:
                clock._record(TERM, frame)
        return each_bytecode

    def tracer(frame, event, arg):
        if frame.f_code is not Signals.take.__code__:
            return None
        frame.f_trace_opcodes = True
        return each_bytecode

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        got = clock.take()
    finally:
        sys.settrace(before)
    return got + clock.take() if count >= k else None


# ---- the plain ways a start ends ----------------------------------------------------------

def test_a_program_that_finishes_is_finished(rig):
    assert rig.run() == 0
    assert rig.names() == ["started", "finished"]
    assert rig.event("started")["nodes"] == "n1 n2" and rig.event("finished")["exit_code"] == 0
    assert rig.summary() == "finished, exit status 0"
    assert rig.slurm.names() == ["hostnames", "squeue"]  # no requeue, not even a question after it


def test_a_program_that_fails_is_failed_and_not_requeued(rig):
    rig.task = Plan([JOINS, SAVES, (8, exits(1))])
    assert rig.run() == 1
    assert rig.names() == ["started", "failed"]
    assert rig.summary() == "failed, exit status 1"
    assert "a failure of the command itself" in rig.said()
    assert "requeue" not in rig.slurm.names()


# ---- hazard 1: Slurm's SIGTERM kills whichever Slurm command runs ----------------------------

@pytest.mark.parametrize("name, script", [
    ("requeuehold", [KILLED_AFTER_IT_WENT_THROUGH]),
    ("update", [KILLED]),
    ("release", [KILLED]),
    # requeuehold timed out (it went through); the SIGTERM kills went_through's first question
    ("show job", [None, KILLED]),
], ids=["requeuehold", "ExcNodeList update", "release", "restart-count query"])
def test_sigterm_during_a_command_of_the_requeue_that_leaves_out_bad_nodes(rig, name, script):
    """Slurm's SIGTERM for the requeue-with-hold kills whichever scontrol runs (a CI run's gated
    job started again on the rejected node, another stayed held for ever): the job still gets
    its ExcNodeList and is released. (The plain `scontrol requeue` killed so: hazard 2.)"""
    rig.bad_node("n3")
    rig.stopped_at(10)
    rig.slurm.then(name, *script)
    if name == "show job":
        rig.slurm.then("requeuehold", TIMED_OUT_AFTER_IT_WENT_THROUGH)
    code = rig.run()
    assert rig.slurm.killed == [name]  # the SIGTERM did land there
    requeued_cleanly(rig, code)
    excluded_and_released(rig)
    assert "requeueing without the bad-node ledger's node(s) n3" in rig.said()


@pytest.mark.parametrize("name", ["hostnames", "squeue"], ids=["node-list expansion", "end-time query"])
def test_sigterm_during_a_start_up_command_is_still_understood(rig, name):
    """Slurm requeues the job (a node failed) while the supervisor expands its node list or
    asks for its planned end: the command dies, the SIGTERM is still seen as Slurm's requeue."""
    def slurm_requeues(slurm, argv, timeout):
        slurm.restarts += 1
        return KILLED(slurm, argv, timeout)
    rig.slurm.then(name, slurm_requeues)
    rig.slurm.unhealthy = ["n2"]
    rig.task = Plan([JOINS, (2, exits(143))])  # Slurm ends the tasks too
    assert rig.run() == 143
    assert rig.names() == ["started", "requeued_by_slurm"]
    assert rig.ledger() == [("n2", "node_failure")]
    assert "requeue" not in rig.slurm.names() and rig.step.sent == []


def test_an_exclusion_slurm_never_takes_still_releases_the_job_and_says_so(rig):
    """Held for ever is worse than starting again on the node: after 12 refused updates the job
    is released, and the batch log says it may land on the node again."""
    rig.bad_node("n3")
    rig.stopped_at(10)
    rig.slurm.refuse("update", "Job is no longer pending execution")
    requeued_cleanly(rig, rig.run())
    assert rig.slurm.names().count("update") == 12 and rig.slurm.names()[-1] == "release"
    assert ("slurmtrain: warning: Slurm refused ExcNodeList=n3 for 12 s; releasing the job without it: it may "
            "start on n3 again" in rig.lines)


def test_an_exclusion_slurm_answers_slowly_is_given_up_in_time_to_release_the_job(rig):
    """A job that lost a node (spares, --no-kill) is being resized: Slurm refuses its updates
    until the requeue is through, each after waiting 5 s itself. Slurm SIGKILLs the supervisor
    KillWait (30 s) after the requeue's SIGTERM, so the updates are given up after 12 s of
    them, not 12 tries (a minute), and the job is released before that."""
    rig.bad_node("n3")
    rig.stopped_at(10)

    def slow_refusal(slurm, argv, timeout):
        slurm.clock.advance(5)
        return Answer(1, "", "Job update not available right now, the DB index is being set, try again in a bit")
    rig.slurm.then("update", *[slow_refusal] * 20)
    requeued_cleanly(rig, rig.run())
    updates = [t for t, name, _ in rig.slurm.calls if name == "update"]
    released = [t for t, name, _ in rig.slurm.calls if name == "release"]
    assert len(updates) == 3 and released and released[0] - updates[0] <= 20, rig.slurm.calls


# ---- hazard 2: Slurm's SIGTERM for the supervisor's own requeue ------------------------------

@pytest.mark.parametrize("answer", [KILLED_AFTER_IT_WENT_THROUGH, None], ids=["kills scontrol", "after scontrol"])
def test_slurms_sigterm_for_our_own_requeue_is_our_requeue(rig, answer):
    """The requeue went through (the restart count is up) and Slurm's SIGTERM for it came,
    killing `scontrol requeue` with -15 or just after it answered: counted as our requeue, not
    a node failure, a cancel or a failed requeue (a loaded CI run said all three)."""
    rig.stopped_at(10)

    def requeue_then_term(slurm, argv, timeout):
        slurm.do("requeue", argv)
        slurm.clock.signal(TERM)
        return Answer(0)
    rig.slurm.then("requeue", answer or requeue_then_term)
    code = rig.run()
    requeued_cleanly(rig, code)
    assert rig.names() == ["started", "signal", "requeue"]
    assert rig.slurm.names().count("requeue") == 1 and rig.slurm.restarts == 1
    assert rig.clock.got == [TERM]  # it did land; nothing took it for a cancel or a node failure


# ---- hazard 3: a controller that hangs ----------------------------------------------------------

def test_a_controller_hung_from_the_start_ends_the_start_in_bounded_time(rig):
    rig.slurm.hang()
    assert rig.run() == 1
    assert rig.summary() == "failed: scontrol could not expand the node list 'n[1-2]', exit status 1"
    assert rig.slurm.names() == ["hostnames"] * 3 and rig.launched == []
    assert rig.clock.now() <= 3 * 10 + 2  # three tries of 10 s, a second apart


def test_a_controller_hung_at_the_sigterm_is_a_cancel_in_bounded_time(rig):
    """The SIGTERM's cause cannot be learnt (the restart count and the end go unanswered, 5 s
    each, inside Slurm's KillWait): not a time limit, not a requeue, as the bash script said."""
    rig.task = Plan([JOINS, SAVES, (12, exits(143))])  # Slurm ends the tasks
    rig.clock.at(10, TERM, cause=rig.slurm.hang)
    assert rig.run() == 143
    assert rig.names() == ["started", "cancelled"]
    assert rig.summary() == "cancelled, exit status 143"
    assert rig.step.sent == [] and "requeue" not in rig.slurm.names()
    assert rig.clock.now() <= 10 + 5 + 5 + 5  # restart count, end time, PreemptTime: 5 s each


def test_a_controller_hung_at_the_requeue_ends_in_bounded_time(rig):
    """Every requeue command times out: the supervisor gives up within a bound and says the
    requeue failed (the run goes on with `slurmtrain resubmit`)."""
    rig.bad_node("n3")
    rig.stopped_at(10)
    rig.task.at.append((5, do(rig.slurm.hang)))
    assert rig.run() == 0
    assert rig.names() == ["started", "signal", "requeue", "requeue_failed"]
    assert "timed out" in rig.event("requeue_failed")["message"]
    assert rig.summary() == "stopped after a checkpoint; the requeue failed, exit status 0"
    assert "slurmtrain resubmit" in rig.said()
    assert rig.clock.now() - 12 <= 100  # show job 5 s, hold 10 s + 29 s asking, requeue 10 s + 29 s


# ---- hazard 4: a refused hold ------------------------------------------------------------------

def test_a_refused_hold_falls_back_to_a_plain_requeue(rig):
    rig.bad_node("n3")
    rig.stopped_at(10)
    rig.slurm.refuse("requeuehold", "Requested operation is presently disabled for job 77")
    requeued_cleanly(rig, rig.run())
    assert "update" not in rig.slurm.names() and "release" not in rig.slurm.names()
    assert rig.slurm.names()[-1] == "requeue" and rig.slurm.excluded == "(null)"
    assert ("slurmtrain: scontrol requeuehold failed: Requested operation is presently disabled for job 77; "
            "requeueing with the job's node list as it is") in rig.lines


# ---- hazard 5: a release that fails -------------------------------------------------------------

def test_a_release_that_always_fails_is_a_failed_requeue_in_the_gate(rig):
    rig.gate_rejects_n3()
    rig.slurm.refuse("release", "Job is not held")  # whatever it says, 20 times
    assert rig.run(preflight=True) == 1
    assert rig.slurm.names().count("release") == 20 and rig.slurm.held
    assert rig.names() == ["started", "preflight_failed", "requeue", "requeue_failed"]
    assert rig.event("requeue_failed")["message"] == ("the job is requeued but held: scontrol release 77 failed "
                                                      "for 20 s")
    assert rig.summary().startswith("preflight failed on n3; the requeue failed: the job is requeued but held")


def test_a_release_that_fails_once_is_tried_again(rig):
    rig.gate_rejects_n3()
    rig.slurm.then("release", Answer(1, "", "Job is still completing"))
    assert rig.run(preflight=True) == 0
    assert rig.slurm.names().count("release") == 2 and not rig.slurm.held
    assert "requeue_failed" not in rig.names()
    assert rig.summary() == "preflight failed on n3; requeued without n3, exit status 0"


def test_a_release_that_always_fails_after_a_stop_is_a_failed_requeue(rig):
    rig.bad_node("n3")
    rig.stopped_at(10)
    rig.slurm.refuse("release", "Job is not held")
    assert rig.run() == 0
    assert "requeue_failed" in rig.names(), rig.said()
    assert "requeued but held" in rig.event("requeue_failed")["message"]
    assert "requeue" not in rig.slurm.names()  # the job is requeued already: held, not running


# ---- hazard 6: cancel, time limit or node failure ----------------------------------------------

def test_a_sigterm_with_the_end_unchanged_is_the_time_limit_stop(rig):
    rig.stopped_at(10, TERM)
    requeued_cleanly(rig, rig.run())
    assert rig.names() == ["started", "signal", "requeue"]
    assert rig.event("signal")["signal"] == "TERM"
    assert rig.event("signal")["cause"] == "time limit"  # decided where it came (eventlog.signal_cause reads it)
    assert rig.step.sent == [(10, STOP)]  # the stop signal, once, at once
    assert (rig.run_dir / f".stop-{JOB}").exists()
    assert rig.slurm.names() == ["hostnames", "squeue", "show job", "squeue", "requeue"]


def test_a_sigterm_that_moved_the_end_is_a_cancel(rig):
    rig.task = Plan([JOINS, SAVES, (11, exits(143))])  # Slurm ends the tasks
    rig.clock.at(10, TERM, cause=lambda: setattr(rig.slurm, "end", MOVED_END))
    assert rig.run() == 143
    assert rig.names() == ["started", "cancelled"]
    assert rig.summary() == "cancelled, exit status 143"
    assert rig.step.sent == [] and "requeue" not in rig.slurm.names()
    assert "the job was cancelled; not requeueing" in rig.said()


def test_a_sigterm_with_the_restart_count_up_is_slurms_requeue(rig):
    rig.task = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (4, beats(0, 5, "n1", 100)), (11, exits(143))])
    rig.slurm.unhealthy = ["n2"]
    rig.clock.at(10, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 143
    assert rig.names() == ["started", "first_step", "requeued_by_slurm"]
    assert rig.summary() == "requeued by Slurm after a node failure, exit status 143"
    assert rig.ledger() == [("n2", "node_failure")]
    # the launch's last progress (the beat at 4 s), for goodput: the wait until Slurm noticed is a hang's
    said = rig.events()[-1]
    assert said["last_progress"] == WALL0 + 4 and said["time"] >= WALL0 + 10, said
    assert rig.slurm.argvs("sinfo")[0][-3:] == [NODELIST, "-o", "%N"]
    assert rig.step.sent == [] and "requeue" not in rig.slurm.names()


def test_a_node_slurm_shows_down_only_after_the_launch_ended_is_still_a_node_failure(rig):
    """At the SIGTERM sinfo shows nothing down yet (seen on the sandbox): asked again once the
    launch has ended, it names n2, and the event says node failure, not an administrator."""
    rig.task = Plan([JOINS, SAVES, (11, exits(143))])
    rig.slurm.unhealthy = ["n2"]
    rig.slurm.then("sinfo", Answer(0, ""))
    rig.clock.at(10, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 143
    assert rig.names() == ["started", "requeued_by_slurm"]
    assert (rig.events()[-1]["by"], rig.events()[-1]["nodes"]) == ("node failure", "n2")
    assert rig.ledger() == [("n2", "node_failure")]


def test_srun_naming_a_failed_node_makes_it_a_node_failure(rig, tmp_path):
    rig.batch_log = tmp_path / "job-77.out"
    rig.batch_log.write_text("")
    def node_fails(step):
        rig.batch_log.write_text("srun: error: Node failure on n2\n")
    rig.task = Plan([JOINS, SAVES, (10, node_fails), (11, exits(143))])
    rig.clock.at(10.5, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 143
    assert (rig.events()[-1]["by"], rig.events()[-1]["nodes"]) == ("node failure", "n2")


def _a_start_that_ended_without_a_word(rig) -> None:
    """events.jsonl as a start leaves it when its batch host dies with the supervisor on it."""
    lines = [{"time": 1.0, "event": "submitted", "job_id": JOB},
             {"time": 2.0, "event": "started", "job_id": JOB, "restart": 0, "launch": 0, "nodes": "n1 n2"},
             {"time": 3.0, "event": "checkpoint_saved", "step": 5}]
    (rig.run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    rig.restarts = 1


def test_a_start_silenced_by_its_batch_hosts_death_is_named_a_node_failure_at_the_next_start(rig):
    """The supervisor died with its batch host; Slurm marked the host down and started the job
    again. The next start asks Slurm which of the silent start's nodes are down: they end
    that start (a node failure naming them) and go to the ledger."""
    _a_start_that_ended_without_a_word(rig)
    rig.slurm.unhealthy = ["n1"]
    assert rig.run() == 0
    evs = events.read(rig.run_dir)
    names = [e["event"] for e in evs]
    assert names.index("requeued_by_slurm") < names.index("started", 2)  # the first start's end
    said = next(e for e in evs if e["event"] == "requeued_by_slurm")
    assert (said["by"], said["nodes"], said["silent"]) == ("node failure", "n1", True)
    first, last = eventlog.ends(evs)
    assert first.kind == eventlog.NODE_FAILURE and "a node of the job failed (n1)" in first.detail, first
    assert last.kind == eventlog.COMPLETED and rig.ledger() == [("n1", "node_failure")]
    from slurmtrain.runs import classify
    assert any("node(s) n1 of the job failed; the batch script died with them" in line
               for line in classify.history(rig.run_dir))


def test_a_silent_start_with_no_node_down_is_left_as_it_was(rig):
    _a_start_that_ended_without_a_word(rig)
    assert rig.run() == 0
    evs = events.read(rig.run_dir)
    assert "requeued_by_slurm" not in [e["event"] for e in evs] and rig.ledger() == []
    assert "ended without a word" in eventlog.ends(evs)[0].detail


def test_a_sigterm_with_the_restart_count_up_and_no_node_down_is_someones_scontrol_requeue(rig):
    """An administrator's `scontrol requeue`: the event says so, no node goes to the ledger."""
    rig.task = Plan([JOINS, SAVES, (11, exits(143))])
    rig.clock.at(10, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 143
    assert rig.names() == ["started", "requeued_by_slurm"]
    assert rig.events()[-1]["by"] == "scontrol requeue" and "nodes" not in rig.events()[-1]
    assert rig.summary() == "requeued from outside the job, exit status 143"
    assert rig.ledger() == [] and "requeue" not in rig.slurm.names()
    assert "`scontrol requeue` by an administrator" in rig.said()


def test_a_requeue_by_lightnings_auto_requeue_is_named_so(rig):
    """A Lightning script left with SLURMEnvironment(auto_requeue=True): on its signal it runs
    `scontrol requeue` itself, which its node log says; the event and status name Lightning."""
    rig.task = Plan([JOINS, SAVES, (9, node_log("n1", "Handling auto-requeue signal: Signals.SIGUSR1",
                                                 "Requeued SLURM job: 77")), (11, exits(143))])
    rig.clock.at(10, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 143
    assert rig.events()[-1]["by"] == "lightning", rig.events()
    (end,) = eventlog.ends(rig.events())
    assert end.kind == eventlog.REQUEUED and "Lightning's SLURM auto-requeue ran `scontrol requeue`" in end.detail


# ---- hazard 7: a stop that lands as the program finishes ----------------------------------------

def test_a_stop_that_lands_as_the_program_finishes_is_finished(rig):
    rig.task = Plan([JOINS, SAVES, (10, emit("finished", step=9))], {STOP: [(0.5, exits(143))]})
    rig.clock.at(10.2, STOP)
    assert rig.run() == 0
    assert rig.names() == ["started", "signal", "finished"]
    assert rig.event("finished")["launch_exit"] == 143 and rig.event("finished")["exit_code"] == 0
    assert rig.summary() == "finished (the launch then exited with status 143), exit status 0"
    assert "as the stop request came" in rig.said()
    assert "requeue" not in rig.slurm.names()


def test_a_launcher_that_fails_after_the_program_finished_is_finished(rig):
    """The program wrote `finished`; the launcher then exited non-zero with no stop at all
    (torchrun's agents lost their rendezvous store tearing down)."""
    rig.task = Plan([JOINS, (5, emit("finished", step=9)), (6, exits(1))])
    assert rig.run() == 0
    assert rig.names() == ["started", "finished"]
    finished = rig.event("finished")
    assert (finished["exit_code"], finished["launch_exit"]) == (0, 1)
    assert rig.summary() == "finished (the launch then exited with status 1), exit status 0"
    assert "before its launcher exited" in rig.said()
    assert "requeue" not in rig.slurm.names() and rig.step.sent == []


# ---- the stop window, the requeue limit, saving ---------------------------------------------------

def test_a_stop_that_is_not_obeyed_escalates_to_sigterm_then_kills(rig):
    rig.task = Plan([JOINS, SAVES], {TERM: [(0, exits(137))]})  # ignores the stop and scancel's TERM
    rig.clock.at(10, STOP)
    code = rig.run(stop_timeout=30)
    assert rig.names() == ["started", "signal", "stop_timeout", "stop_escalated", "requeue"]
    assert rig.event("stop_timeout")["seconds"] == 30 and rig.event("stop_escalated")["seconds"] == TERM_GRACE_S
    ((t, argv),) = [(t, argv) for t, n, argv in rig.slurm.calls if n == "scancel"]
    assert (t, argv) == (40, ["scancel", "--signal=TERM", JOB])  # through Slurm: the tasks, not srun
    assert rig.step.sent == [(10, STOP), (40 + TERM_GRACE_S, TERM)]  # then SIGTERM to srun: it kills them
    requeued_cleanly(rig, code)


def test_past_the_requeue_limit_the_job_does_not_start(rig):
    rig.restarts = 11
    assert rig.run(max_requeues=10) == 3
    assert rig.names() == ["requeue_limit"] and rig.event("requeue_limit")["max_requeues"] == 10
    assert rig.summary() == "not started again: requeue limit reached, exit status 3"
    assert rig.slurm.calls == [] and rig.launched == []


def earlier_start(rig: Rig, restart: int, saved: int, counted: bool = True) -> None:
    """Events of start ``restart`` of the job, before this one: a checkpoint of ``saved``,
    then a requeue (``counted: false`` when it did not count toward max_requeues)."""
    ident = {"job_id": JOB, "restart": restart, "launch": 1}
    events.append(rig.run_dir, "started", **ident, nodes=" ".join(rig.slurm.nodes))
    events.append(rig.run_dir, "checkpoint_saved", step=saved)
    events.append(rig.run_dir, "requeue", **ident, exit_code=75, saved=True, **({} if counted else {"counted": False}))


def test_a_stop_at_the_requeue_limit_is_not_requeued(rig):
    rig.restarts = 10
    earlier_start(rig, 9, saved=6)  # this start saves steps 5 and 6 again: nothing new
    rig.stopped_at(10)
    assert rig.run(max_requeues=10) == 3
    assert rig.names()[2:] == ["started", "restarted", "signal", "requeue_limit"]  # after the earlier start's
    assert rig.summary() == "stopped; requeue limit reached, exit status 3"
    assert "requeue" not in rig.slurm.names()


def test_a_stop_after_a_start_that_saved_something_new_is_requeued_past_the_limit(rig):
    """The time limit's stop after a newer checkpoint than any before: a run longer than its
    time limit goes on, and its requeue is not counted."""
    rig.restarts = 10
    earlier_start(rig, 9, saved=3)
    rig.stopped_at(10)
    requeued_cleanly(rig, rig.run(max_requeues=10))
    assert rig.events()[-1] == {**rig.events()[-1], "event": "requeue", "restart": 10, "counted": False}
    assert "requeue" in rig.slurm.names()
    assert "not counted toward max_requeues" in rig.said()


def test_requeues_that_did_not_count_leave_the_limit_for_the_others(rig):
    """Slurm's restart count is 12, two of them after starts that moved the run on: 10
    counted, the limit's, so this start runs (a start past it does not: above)."""
    rig.restarts = 12
    for restart, counted in ((3, False), (7, False)):
        earlier_start(rig, restart, saved=restart * 10, counted=counted)
    earlier_start(rig, 11, saved=100, counted=False)  # another job's free requeue does not count for this one
    events.append(rig.run_dir, "requeue", job_id="99", restart=0, launch=1, exit_code=75, counted=False)
    rig.task = Plan([JOINS, SAVES, (5, exits(0))])
    assert rig.run(max_requeues=10) == 0
    assert "requeue_limit" not in rig.names()


def test_a_stop_with_nothing_saved_is_not_requeued(rig):
    rig.task = Plan([JOINS], {STOP: [(1, exits(143))]})
    rig.clock.at(10, STOP)
    assert rig.run() == 143
    assert rig.names() == ["started", "signal", "stop_unsaved"]
    assert rig.summary() == "stopped; the program saved nothing, not requeued, exit status 143"
    assert "requeue" not in rig.slurm.names()


def test_a_task_the_stop_signal_killed_is_named_though_srun_ended_with_143(rig, tmp_path):
    """Torchrun's agent on n2 exited 140 (its workers died of USR2, no handler yet); srun then
    terminated n1's task and exited 143, its own status: the task's says what happened."""
    with_batch_log(rig, tmp_path)
    rig.task = Plan([JOINS], {STOP: [(1, srun_says("srun: error: n2: task 1: Exited with exit code 140")),
                                     (1, srun_says("srun: error: n1: task 0: Terminated")), (1, exits(143))]})
    rig.clock.at(10, STOP)
    assert rig.run() == 140
    assert rig.event("stop_unsaved") == {**rig.event("stop_unsaved"), "exit_code": 140, "signal": "USR2"}


def test_requeue_always_requeues_a_stop_with_nothing_saved(rig):
    rig.task = Plan([JOINS], {STOP: [(1, exits(143))]})
    rig.clock.at(10, STOP)
    requeued_cleanly(rig, rig.run(requeue_always=True))


def test_a_requeue_leaves_out_the_ledgers_nodes_keeping_the_jobs_own_exclusions(rig):
    rig.bad_node("n3")
    rig.slurm.excluded = "n9"
    rig.stopped_at(10)
    requeued_cleanly(rig, rig.run())
    assert rig.slurm.names()[-5:] == ["show job", "hostnames", "requeuehold", "update", "release"]
    assert rig.slurm.argvs("update") == [["scontrol", "update", f"jobid={JOB}", "ExcNodeList=n3,n9"]]
    excluded_and_released(rig, "n3,n9")


def test_an_expired_ledger_entry_is_not_left_out(rig):
    ledger.add(rig.runs, "n3", "long ago", source="doctor", now=0)
    rig.stopped_at(10)
    requeued_cleanly(rig, rig.run())
    assert "requeuehold" not in rig.slurm.names() and rig.slurm.names()[-1] == "requeue"


# ---- start-up --------------------------------------------------------------------------------------

def test_a_node_that_never_arrives_trips_the_watchdog(rig):
    rig.task = Plan([(1, arrive("n1"))])
    assert rig.run(rendezvous_timeout=60) == 4
    assert rig.names() == ["started", "watchdog_timeout"] and rig.event("watchdog_timeout")["missing"] == "n2"
    assert rig.ledger() == [("n2", "watchdog")]
    assert rig.step.sent == [(60, TERM)] and rig.step.status == 143  # the launch ended, and waited for
    assert rig.summary() == "failed at start-up: node(s) n2 did not join, exit status 4"


def test_an_srun_that_outlives_the_watchdogs_sigterm_gets_sigkill(rig):
    rig.task = Plan([(1, arrive("n1"))], {TERM: [], signal.SIGKILL: [(0, exits(137))]})
    assert rig.run(rendezvous_timeout=60) == 4
    assert [(round(t), sig) for t, sig in rig.step.sent] == [(60, TERM), (60 + TERM_GRACE_S, signal.SIGKILL)]
    assert rig.event("watchdog_timeout")["missing"] == "n2"


def test_a_setup_line_killed_by_the_watchdog_is_the_watchdogs_timeout(rig):
    """A setup line that hangs (`module load` on a sick file system) dies when the watchdog
    ends the launch, and its guard then writes a failure mark: that is the timeout, not
    the line's own failure (the sandbox's hung-setup test met it)."""
    rig.task = Plan([(1, arrive("n1"))], {TERM: [(0, setup_fails("n2", 137, "module load x")), (0, exits(143))]})
    assert rig.run(rendezvous_timeout=60) == 4
    assert rig.names() == ["started", "watchdog_timeout"] and rig.ledger() == [("n2", "watchdog")]
    assert "did not join within 60 s" in rig.said() and "137" not in rig.said()


def test_a_launch_that_ends_with_a_node_missing_trips_the_watchdog_at_once(rig):
    rig.task = Plan([(1, arrive("n1")), (5, exits(1))])
    assert rig.run(rendezvous_timeout=600) == 4
    assert rig.event("watchdog_timeout")["missing"] == "n2" and rig.clock.now() < 10


def test_a_failed_setup_line_ends_the_start(rig):
    rig.task = Plan([(1, arrive("n1")), (2, setup_fails("n2", 7, "pip install -e ."))])
    assert rig.run() == 4
    assert rig.names() == ["started", "setup_failed", "watchdog_timeout"]
    failed = rig.event("setup_failed")
    assert (failed["node"], failed["line"], failed["exit_code"]) == ("n2", "pip install -e .", 7)
    assert rig.ledger() == [("n2", "setup")]
    assert rig.clock.now() < 5  # at once, not after the rendezvous timeout
    assert rig.summary() == "failed at start-up: setup failed on n2, exit status 4"
    assert "setup line `pip install -e .` exited with status 7" in rig.said()


def test_a_node_still_in_its_setup_when_another_nodes_fails_is_not_blamed(rig):
    """srun (--kill-on-bad-exit) ends every task once one node's setup line fails: a node
    still in its setup lines then never arrives, and that is the failed node's doing."""
    rig.task = Plan([(2, setup_fails("n2", 1, 'test "$SLURMD_NODENAME" != n2')), (2, exits(1))])
    assert rig.run() == 4
    assert rig.ledger() == [("n2", "setup")]
    assert rig.summary() == "failed at start-up: setup failed on n2, exit status 4"


def test_a_check_of_the_profile_failing_on_one_node_before_any_other_got_past_it_blames_none(rig):
    """The script's own check (container.image) failed on n1; srun ended n2 before its check
    said the same (seen on the container lane: n1 went into the ledger, and the next submit
    found too few nodes). Nothing shows it is n1's: no ledger line, and it says so."""
    check = "check: container.image /home/u/nope.sif: no such file on n1"
    rig.task = Plan([(1, setup_fails("n1", 1, check)), (1, exits(1))])
    assert rig.run() == 4
    assert rig.ledger() == []
    assert ("n1: container.image /home/u/nope.sif: no such file on n1; no other node got past its checks before the "
            "launch ended, so no node is to blame") in rig.said()
    # once another node got past the checks, the one that failed them is its node's doing
    rig2_check = "check: fabric.socket_ifname=ib0: no such interface on n2 (it has: lo eth0)"
    rig.task = Plan([(1, arrive("n1")), (2, setup_fails("n2", 1, rig2_check)), (2, exits(1))])
    assert rig.run() == 4
    assert rig.ledger() == [("n2", "setup")]


def test_a_setup_that_fails_on_every_node_blames_none_and_says_so_in_one_line(rig):
    """The job script's check of fabric.socket_ifname (a profile naming an interface the
    nodes lack) fails the same on every node: the profile's doing, not the nodes'."""
    check = "check: fabric.socket_ifname=ib0: no such interface on {} (it has: lo eth0)"
    rig.task = Plan([(1, setup_fails("n1", 1, check.format("n1"))), (1, setup_fails("n2", 1, check.format("n2")))])
    assert rig.run() == 4
    assert rig.ledger() == [] and [e["node"] for e in rig.events() if e["event"] == "setup_failed"] == ["n1", "n2"]
    assert ("setup failed on every node (n1 n2), so no node is to blame; n1: fabric.socket_ifname=ib0: "
            "no such interface on n1 (it has: lo eth0)") in rig.said()
    assert rig.summary() == "failed at start-up: setup failed on n1 n2, exit status 4"


def test_a_launch_srun_refuses_as_the_job_is_cancelled_blames_no_node(rig):
    """A cancel as the launch starts: srun fails at once ("job has expired") before the
    cancel's SIGTERM reaches the supervisor, with no node arrived. Slurm says CANCELLED:
    no watchdog, no ledger; the run ends as a cancel."""
    rig.slurm.state = "CANCELLED"
    rig.task = Plan([(1, exits(1))])
    rig.run(rendezvous_timeout=600)
    assert rig.ledger() == [] and "watchdog_timeout" not in rig.names(), rig.names()
    assert "cancelled" in rig.names() and "the job is CANCELLED in Slurm" in rig.said()
    assert "not requeueing" in rig.said() and rig.clock.now() < 10


def test_the_preflight_gate_requeues_without_the_odd_node_out(rig):
    rig.gate_rejects_n3()
    assert rig.run(preflight=True) == 0
    assert rig.names() == ["started", "preflight_failed", "requeue"]
    assert rig.event("preflight_failed")["nodes"] == "n3"
    assert (rig.event("requeue")["reason"], rig.event("requeue")["exclude"]) == ("preflight", "n3")
    assert rig.ledger() == [("n3", "gate")]
    assert rig.launched == ["gate"]  # the task never started on the rejected node
    excluded_and_released(rig)
    assert rig.summary() == "preflight failed on n3; requeued without n3, exit status 0"


def test_the_preflight_gate_at_the_requeue_limit_ends_with_exit_3(rig):
    rig.gate_rejects_n3()
    rig.restarts = 10
    assert rig.run(preflight=True, max_requeues=10) == 3
    assert rig.names()[-2:] == ["preflight_failed", "requeue_limit"]
    assert "requeuehold" not in rig.slurm.names() and rig.launched == ["gate"]


def test_a_passed_preflight_gate_starts_the_task(rig):
    rig.gate = Plan([(1, answers(n1="ok", n2="ok")), (2, exits(0))])
    assert rig.run(preflight=True) == 0
    assert rig.names() == ["started", "preflight_passed", "finished"]
    assert rig.launched == ["gate", "task"]


def test_a_stop_during_the_gate_is_passed_to_the_task_as_it_starts(rig):
    rig.gate = Plan([(1, answers(n1="ok", n2="ok")), (5, exits(0))])
    rig.stopped_at(2)
    code = rig.run(preflight=True)
    assert rig.names() == ["started", "signal", "preflight_passed", "requeue"]
    assert rig.gate_step.sent == [] and rig.step.sent == [(5, STOP)]  # at the launch
    requeued_cleanly(rig, code)


# ---- preemption with a GraceTime -------------------------------------------------------------------

def test_preemption_with_gracetime_is_requeued_when_saved(rig):
    """Slurm signals only the tasks (no signal reaches the supervisor); they stop and the
    launch exits non-zero; the job's PreemptTime says why."""
    rig.task = Plan([JOINS, SAVES, (20, emit("stopped", step=6)), (20, exits(143))])
    rig.slurm.preempt_time = PREEMPTED_AT
    code = rig.run()
    assert rig.names() == ["started", "preempted", "requeue"]
    assert rig.event("preempted")["exit_code"] == 143
    assert rig.step.sent == []
    assert "Slurm preempted the job" in rig.said()
    requeued_cleanly(rig, code)


def test_a_preempted_launch_whose_ranks_tear_down_slowly_after_stopping_is_no_hang(rig):
    """Slurm's SIGTERM reached only the tasks: the program saved and said `stopped`, then a
    rank's launcher took longer than the hang timeout to end (torchrun's shutdown window). No
    rank beats meanwhile, and none is to: a stop under way is no hang."""
    rig.task = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n2", 200)),
                     (3, emit("stopped", step=6)), (40, exits(143))])
    rig.slurm.preempt_time = PREEMPTED_AT
    code = rig.run(hang_timeout=20)
    assert rig.names() == ["started", "first_step", "preempted", "requeue"], rig.names()
    requeued_cleanly(rig, code)


def test_a_preemption_names_no_node_of_a_failure_in_the_batch_logs_last_line(rig, tmp_path):
    """srun says each task it ended (Terminated) or that stopped (exit 75): no node failed."""
    with_batch_log(rig, tmp_path)
    rig.task = Plan([JOINS, SAVES, (20, emit("stopped", step=6)), (20, srun_says("srun: error: n1: task 0: Terminated")),
                     (20, srun_says("srun: error: n2: task 1: Exited with exit code 75")), (20, exits(143))])
    rig.slurm.preempt_time = PREEMPTED_AT
    rig.run()
    assert rig.names() == ["started", "preempted", "requeue"]
    assert "first failure" not in rig.stdout and "exit status 143;" in rig.stdout, rig.stdout


def test_on_slurm_24_11_a_preemption_is_requeued_by_slurm_alone(rig):
    """24.11 requeues a preempted job when its script ends, and its mark outlives a requeue of
    ours: with both, the job ran a third time after it finished. The supervisor asks nothing."""
    rig.slurm.version = "24.11.5"
    rig.bad_node("n3")
    rig.task = Plan([JOINS, SAVES, (20, emit("stopped", step=6)), (20, exits(143))])
    rig.slurm.preempt_time = PREEMPTED_AT
    assert rig.run() == 0
    assert rig.names() == ["started", "preempted", "requeue"]
    assert not {"requeue", "requeuehold", "update"} & set(rig.slurm.names()) and rig.slurm.requeue_flag == 1
    assert rig.summary() == "stopped after a checkpoint; requeued, exit status 143"
    assert "leaving the requeue of job 77 to it; the bad-node ledger's node(s) n3 cannot be left out" in rig.said()


@pytest.mark.parametrize("version, forbidden", [("24.11.5", 0), ("22.05.8", 1)])
def test_a_preempted_job_that_ends_for_good_is_kept_from_slurms_own_requeue(rig, version, forbidden):
    """The requeue limit is reached (or the program saved nothing): 24.11 would requeue the
    job anyway; Requeue=0 keeps it ended. 22.05 ends it as the script says: nothing asked."""
    rig.slurm.version, rig.slurm.restarts, rig.restarts = version, 1, 1
    rig.task = Plan([JOINS, SAVES, (20, emit("stopped", step=6)), (20, exits(143))])
    rig.slurm.preempt_time = PREEMPTED_AT
    assert rig.run(max_requeues=1) == 3
    assert rig.names()[-1] == "requeue_limit" and "requeue" not in rig.slurm.names()
    assert rig.slurm.requeue_flag == forbidden


def _preempted_before(rig, by_slurm: bool = False) -> None:
    """An earlier start of job 77 was preempted (saved, stopped, requeued): restart 1 now."""
    ident = {"job_id": JOB, "launch": 1}
    lines = [{"time": 1.0, "event": "submitted", "job_id": JOB},
             {"time": 2.0, "event": "started", "job_id": JOB, "restart": 0, "launch": 0, "nodes": "n1 n2"},
             {"time": 3.0, "event": "stopped", "step": 5},
             {"time": 4.0, "event": "requeued_by_slurm", "restart": 0, "by": "preemption", **ident} if by_slurm else
             {"time": 4.0, "event": "preempted", "restart": 0, "exit_code": 75, **ident}]
    (rig.run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    rig.slurm.restarts = rig.restarts = 1


@pytest.mark.parametrize("version, forbidden", [("24.11.5", 0), ("22.05.8", 1)])
@pytest.mark.parametrize("by_slurm", [False, True], ids=["stopped-in-time", "grace-time-ran-out"])
def test_a_job_preempted_before_that_fails_is_kept_from_slurms_own_requeue(rig, version, forbidden, by_slurm):
    """From 24.05 Slurm requeues a job it preempted in an earlier start when its script ends
    (the mark stays through the requeue): a program error would start again. Requeue=0 at
    that end; 22.05 is not asked."""
    _preempted_before(rig, by_slurm)
    rig.slurm.version = version
    rig.task = Plan([JOINS, (5, exits(1))])
    assert rig.run() == 1
    assert rig.names()[-1] == "failed" and rig.slurm.requeue_flag == forbidden


def test_a_start_past_the_requeue_limit_after_a_preemption_is_kept_from_slurms_own_requeue(rig):
    """Every end for good passes through one place (Requeue.keep_ended): also the start
    that ends at once, the requeue limit reached, which 24.11 would start again."""
    _preempted_before(rig)
    rig.slurm.version = "24.11.5"
    assert rig.run(max_requeues=0) == 3
    assert rig.launched == [] and rig.slurm.requeue_flag == 0


def test_a_job_requeued_only_at_its_time_limit_is_not_asked_at_its_end(rig):
    rig.slurm.version, rig.slurm.restarts, rig.restarts = "24.11.5", 1, 1
    rig.task = Plan([JOINS, (5, exits(1))])
    assert rig.run() == 1
    assert "config" not in rig.slurm.names() and rig.slurm.requeue_flag == 1


def test_a_job_preempted_before_that_completes_stays_requeueable_and_its_extra_start_ends_at_once(rig):
    """Requeue=0 on a completed job makes Slurm end it PREEMPTED, which a run queued with
    --dependency=afterok never takes: the completed job keeps Requeue=1, and the start Slurm
    makes of it then (24.11 did: a third start of a finished run) ends at once, launching
    nothing and writing no event."""
    _preempted_before(rig)
    rig.slurm.version = "24.11.5"
    assert rig.run() == 0
    assert rig.names()[-1] == "finished" and rig.slurm.requeue_flag == 1
    n = len(events.read(rig.run_dir))
    rig.restarts = rig.slurm.restarts = 2
    rig.launched.clear()
    assert rig.run() == 0
    assert len(events.read(rig.run_dir)) == n and rig.launched == []
    assert "completed in an earlier start and Slurm started it again" in rig.said()


def stopped_now(step_no: int) -> Action:
    """The program writes `stopped` at the rig's wall-clock time (the supervisor times it)."""
    return lambda step: events.append(step.rig.run_dir, "stopped", when=step.rig.clock.wall(), step=step_no)


def test_a_launch_that_runs_on_after_the_program_stopped_is_ended_within_the_grace_time(rig):
    """A preemption's SIGTERM reached the tasks only; the program saved and wrote `stopped`, but
    a rank's process stayed (stuck closing its process group). LINGER_S (or stop_timeout, if
    shorter) after `stopped` the supervisor ends the launch itself, before Slurm's GraceTime
    runs out, and the start ends as a preemption, requeued."""
    rig.task = Plan([JOINS, SAVES, (20, stopped_now(6))])
    rig.slurm.preempt_time = PREEMPTED_AT
    assert rig.run(stop_timeout=90) == 0
    assert rig.names() == ["started", "stop_lingered", "preempted", "requeue"]
    assert (rig.event("stop_lingered")["seconds"], rig.event("stop_lingered")["step"]) == (30, 6)  # LINGER_S
    ended = rig.step.sent[0]
    assert ended[1] == TERM and 20 + 30 <= ended[0] < 20 + 30 + 2, rig.step.sent
    assert "the program stopped after its checkpoint of step 6, but its launch is still running 30 s later" \
        in rig.said()
    assert "requeue" in rig.slurm.names()


@pytest.mark.parametrize("version", ["24.11.5", "22.05.8"])
def test_a_launch_that_outlived_the_preemptions_grace_time_is_a_preemption(rig, tmp_path, version):
    """The launch was still running when the GraceTime ran out: Slurm killed the job (its
    "DUE TO PREEMPTION" line in the batch log) and requeued it, and 24.11 sent the script
    SIGTERM. It was read as an administrator's `scontrol requeue`. Now a preemption, and the
    job already queued again is neither requeued nor kept from Slurm's requeue."""
    with_batch_log(rig, tmp_path)
    rig.slurm.version = version
    kill = srun_says(f"slurmstepd-n1: error: *** JOB {JOB} ON n1 CANCELLED AT {PREEMPTED_AT} DUE TO PREEMPTION ***")
    rig.task = Plan([JOINS, SAVES, (10, kill), (11, exits(143))])
    rig.clock.at(10.5, TERM, cause=lambda: setattr(rig.slurm, "restarts", 1))
    assert rig.run() == 0
    assert rig.names() == ["started", "requeued_by_slurm"]
    assert rig.event("requeued_by_slurm")["by"] == "preemption"
    assert rig.summary() == "preempted; Slurm requeued the job at the end of its grace time, exit status 0"
    assert not {"requeue", "update"} & set(rig.slurm.names()) and rig.slurm.requeue_flag == 1
    from slurmtrain.runs import classify
    out = classify.classify(rig.run_dir)
    assert out.kind == classify.PREEMPTED and "the partition's grace time ran out" in out.detail, out
    assert any("Slurm preempted the job and, its launch still running when the grace time ran out" in line
               for line in classify.history(rig.run_dir))


KILL_LINE = f"slurmstepd-n1: error: *** JOB {JOB} ON n1 CANCELLED AT {PREEMPTED_AT} DUE TO PREEMPTION ***\n"
START_LINE = f"slurmtrain: job {JOB} on n1 n2; run directory /runs/r1: each node's output in logs/...\n"


@pytest.mark.parametrize("log, preempted", [(START_LINE + KILL_LINE, True), (KILL_LINE + START_LINE, False),
                                            (START_LINE + KILL_LINE.replace(JOB, "78"), False)],
                         ids=["in that start", "before that start", "another job's"])
def test_a_start_killed_at_the_end_of_a_preemptions_grace_time_is_named_at_the_next_start(rig, tmp_path, log,
                                                                                          preempted):
    """Slurm 22.05 kills the script with the tasks at the end of the GraceTime: the start ended
    without a word. The next start finds Slurm's "DUE TO PREEMPTION" line naming this job in
    that start's part of the batch log (after its first line): a preemption (was: "a node
    failure, or a kill after ..."). A kill of an earlier start, or another job's, is not."""
    _a_start_that_ended_without_a_word(rig)
    with_batch_log(rig, tmp_path)
    rig.batch_log.write_text(log)
    assert rig.run() == 0
    evs = events.read(rig.run_dir)
    said = [e for e in evs if e["event"] == "requeued_by_slurm"]
    first, last = eventlog.ends(evs)
    if not preempted:
        assert said == [] and "ended without a word" in first.detail, (said, first)
        return
    assert [(e["by"], e["silent"]) for e in said] == [("preemption", True)] and rig.ledger() == []
    assert (first.kind, last.kind) == (eventlog.PREEMPTED, eventlog.COMPLETED), first


# ---- a time-limit warning that never comes -------------------------------------------------------

def end_in(seconds: float) -> str:
    """squeue's end time (local, to the second) ``seconds`` after fake time 0."""
    return datetime.fromtimestamp(WALL0 + seconds).isoformat(timespec="seconds")


def test_a_time_limit_warning_that_never_came_is_given_by_the_supervisor(rig):
    """Slurm 24.11 once sent no warning at all: 10 s after it was due, the run stops as if it had."""
    rig.slurm.end = end_in(100)
    rig.task = Plan([JOINS, SAVES], STOPS_AFTER_SAVING)
    code = rig.run(warning_seconds=40)
    assert rig.names() == ["started", "signal", "requeue"] and rig.event("signal")["signal"] == "USR2"
    [(at, sent)] = rig.step.sent
    assert sent == STOP and 70 <= at < 72
    assert "Slurm's time-limit warning (SIGUSR2 40 s before the end" in rig.said()
    requeued_cleanly(rig, code)


def test_a_raised_time_limit_moves_the_supervisors_own_warning(rig):
    """`scontrol update TimeLimit=...` after the start: no stop at the old end's warning."""
    rig.slurm.end = end_in(100)
    raise_limit = (30, lambda step: setattr(rig.slurm, "end", end_in(1000)))
    rig.task = Plan([JOINS, SAVES, raise_limit, (200, emit("finished", step=9)), (200, exits(0))])
    assert rig.run(warning_seconds=40) == 0
    assert rig.names() == ["started", "finished"] and rig.step.sent == []


def test_no_own_warning_without_a_lead_or_with_the_real_one(rig):
    rig.slurm.end = end_in(100)
    rig.stopped_at(50)  # Slurm's warning came (early, on its tick): nothing more is sent
    code = rig.run(warning_seconds=40)
    assert [s for _, s in rig.step.sent] == [STOP] and "has not come" not in rig.said()
    requeued_cleanly(rig, code)


def test_a_failure_without_preemption_is_not_taken_for_one(rig):
    rig.task = Plan([JOINS, SAVES, (20, exits(143))])
    assert rig.run() == 143
    assert rig.names() == ["started", "failed"]
    assert "show job" in rig.slurm.names()  # it did ask


# ---- bugs: what the tests above would not show ----------------------------------------------------

@pytest.mark.parametrize("bad_nodes", [True, False], ids=["requeuehold", "requeue"])
def test_a_requeue_the_controller_shows_late_still_counts_after_its_sigterm(rig, bad_nodes):
    """As the bash script's FAKE_LAG test: the requeue went through and its SIGTERM killed
    scontrol, but a busy controller shows the new restart count 2 s later."""
    if bad_nodes:
        rig.bad_node("n3")
    rig.stopped_at(10)
    rig.slurm.then("requeuehold" if bad_nodes else "requeue", killed_late(2))
    code = rig.run()
    requeued_cleanly(rig, code)
    if bad_nodes:
        excluded_and_released(rig)


def test_a_show_job_that_times_out_once_keeps_the_jobs_own_exclusions(rig):
    rig.bad_node("n3")
    rig.slurm.excluded = "n9"
    rig.stopped_at(10)
    rig.slurm.then("show job", HUNG)
    requeued_cleanly(rig, rig.run())
    assert rig.slurm.excluded == "n3,n9"


def test_a_signal_recorded_while_take_runs_is_not_lost():
    """The handler runs between two bytecodes of the main thread: at each bytecode of take(),
    a SIGTERM is recorded there (sys.settrace's opcode events). Each must come out of this
    take() or the next one."""
    lost, k = [], 1
    while (taken := take_with_a_signal_at_bytecode(k)) is not None:
        if sorted(taken) != sorted([STOP, TERM]):
            lost.append(k)
        k += 1
    assert k > 3, "take() ran no bytecode traced"
    assert lost == [], f"a SIGTERM recorded at bytecode {lost} of take() was lost"


def test_an_array_task_names_itself_to_slurm_as_array_underscore_task():
    """One task's own SLURM_JOB_ID names the whole array to Slurm (`scontrol requeue 12`
    would requeue every task): the supervisor's commands name ``<array>_<task>``."""
    env = {"SLURM_JOB_ID": "15", "SLURM_ARRAY_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "3",
           "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_NODELIST": "n1"}
    job = Job.from_env(env)
    assert (job.job_id, job.ref, job.tag, job.restarts) == ("15", "12_3", "12_3", 1)
    assert (job.array_job_id, job.array_task, job.array_tasks) == ("12", 3, 4)
    calls: list[list[str]] = []
    slurm = Slurm(job.ref, run=lambda argv, timeout: calls.append(argv) or Answer(0))
    slurm.requeue(), slurm.requeue_hold(), slurm.release(), slurm.signal_steps("TERM"), slurm.end_time()
    assert [c[-1] for c in calls] == ["12_3"] * 4 + ["%e"] and calls[-1][:4] == ["squeue", "-h", "-j", "12_3"]
    plain = Job.from_env({"SLURM_JOB_ID": "15", "SLURM_JOB_NODELIST": "n1"})
    assert (plain.ref, plain.array_task, plain.restarts) == ("15", None, 0)


# ---- restarts inside the job (resilience.restarts_in_job) -----------------------------------------

DIES_AFTER_SAVING = Plan([JOINS, SAVES, (5, exits(137))])           # a rank killed after a checkpoint
RESUMES_AND_FINISHES = Plan([JOINS, (2, emit("resumed", step=5)), (3, emit("finished", step=10)), (4, exits(0))])


KILLED_AFTER_A_MEMORY_COPY = Plan([JOINS, (2, emit("resumed", step=35, tier="memory")), (5, exits(137))])


def test_a_second_crash_after_copies_in_node_memory_is_launched_again(rig, monkeypatch):
    """The memory tier (train.memory_steps): the first launch saved and was killed, the
    second resumed from memory at 35 and was killed at 59 with copies of 40..55 in node
    memory but no durable save since: it was not launched again (no new checkpoint), and
    the run ended a "user error"."""
    monkeypatch.setattr("slurmtrain.job.supervisor.nodememory.newest_step", lambda: 55)
    rig.task = [DIES_AFTER_SAVING, KILLED_AFTER_A_MEMORY_COPY, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.names() == ["started", "relaunched", "relaunched", "finished"], rig.names()
    from slurmtrain.job import decide
    assert decide.progressed([{"event": "resumed", "step": 35}], 35) is False  # nothing newer: not again
    assert decide.progressed([{"event": "resumed", "step": 35}], None) is False
    assert decide.progressed([{"event": "checkpoint_saved", "step": 60}], None) is True


def fails_at(step: int, saved: int | None = None) -> Plan:
    """The program raises at ``step`` (after saving ``saved``, if given)."""
    saves = [(2, emit("checkpoint_saved", step=saved))] if saved is not None else []
    return Plan([JOINS, *saves, (3, emit("train_error", step=step, error="ValueError: bad batch")), (4, exits(1))])


def test_an_in_job_restart_that_starts_below_the_checkpoint_is_warned_of_once(rig):
    """Launched again after a crash that followed the checkpoint of step 5, the program's first
    step with a number is 1 (a beat without one, from a busy thread, comes first): it did not
    resume from it. Said once, in the batch log and as an event."""
    starts_over = Plan([JOINS, (2, beats(0, None, "n1", 100)), (3, beats(0, 1, "n1", 100)),
                        (4, beats(0, 2, "n1", 100)), (6, emit("finished", step=10)), (6, exits(0))])
    rig.task = [DIES_AFTER_SAVING, starts_over]
    assert rig.run(restarts_in_job=3) == 0
    [behind] = [e for e in rig.events() if e["event"] == "resumed_behind"]
    assert (behind["step"], behind["saved"]) == (1, 5), behind
    assert "the program's first step in this launch is 1, but the run saved step 5" in rig.said()


def test_a_rank_that_dies_after_a_checkpoint_is_launched_again_in_the_job(rig):
    rig.task = [DIES_AFTER_SAVING, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.names() == ["started", "relaunched", "finished"]
    assert (rig.event("relaunched")["attempt"], rig.event("relaunched")["exit_code"]) == (1, 137)
    assert rig.launched == ["task", "task"]
    assert not {"requeue", "requeuehold"} & set(rig.slurm.names())  # no queue, no new job start
    assert "starting it again in this allocation on n1 n2 (1 of 3)" in rig.said()
    assert "node" not in rig.event("relaunched")  # srun named no node
    assert rig.summary() == "finished, exit status 0"


def test_an_in_job_restart_names_the_node_srun_saw_fail_first(rig, tmp_path):
    with_batch_log(rig, tmp_path)
    rig.task = [Plan([*DIES_AFTER_SAVING.at[:-1], (4.5, srun_says("srun: error: n2: task 1: Exited with exit code 1")),
                      (5, exits(1))]), RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.event("relaunched")["node"] == "n2"
    assert "the program failed on n2 (exit status 1) after a new checkpoint; starting it again" in rig.said()


def test_a_failure_before_any_new_checkpoint_is_not_launched_again(rig):
    rig.task = [fails_at(3)]
    assert rig.run(restarts_in_job=3) == 1
    assert rig.names() == ["started", "failed"] and rig.launched == ["task"]


def test_the_same_error_at_the_same_step_twice_is_a_program_error(rig):
    """Each launch saves (progress) and then fails at the same step with the same error:
    launched again once, then the second identical failure ends the run."""
    rig.task = [fails_at(7, saved=5), fails_at(7, saved=6), RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == 1
    assert rig.names() == ["started", "relaunched", "failed"] and rig.launched == ["task", "task"]
    assert rig.summary() == "failed, exit status 1"


def test_a_failure_the_spent_budget_alone_ends_says_so(rig, tmp_path):
    """A rank killed after a checkpoint, twice, with one in-job restart: the second ends the
    run, and the batch log, the event and status say the budget was spent (it would have
    started again), with the root cause the supervisor read, not a peer's follow-on error."""
    from slurmtrain.runs import classify

    with_batch_log(rig, tmp_path)
    peer = emit("train_error", step=9, error="RuntimeError: Connection reset by peer")
    killed = srun_says("srun: error: n2: task 1: Killed")
    rig.task = [DIES_AFTER_SAVING, Plan([*DIES_AFTER_SAVING.at[:-1], (4, peer), (4.5, killed), (5, exits(137))])]
    assert rig.run(restarts_in_job=1) == 137
    assert rig.names() == ["started", "relaunched", "failed"]
    assert rig.event("failed")["restarts_spent"] == 1
    assert "; resilience.restarts_in_job (1) is spent: not requeueing" in rig.said()
    out = classify.classify(rig.run_dir)
    assert out.kind == classify.USER_ERROR and out.detail == (
        "the command failed with exit status 137 (a task on n2 was killed by SIGKILL (out of memory, or a kill), at "
        "step 9); resilience.restarts_in_job (1) was spent; not requeued"), out


def srun_says(line: str) -> Action:
    """srun writes a line to the batch log (its task errors name the node)."""
    def act(step: FakeStep) -> None:
        with open(step.rig.batch_log, "a") as log:
            log.write(line + "\n")
    return act


def with_batch_log(rig: Rig, tmp_path) -> None:
    rig.batch_log = tmp_path / "job-77.out"
    rig.batch_log.write_text("")


UNREACHED_N2 = Plan([(1, arrive("n1")),
                     (2, srun_says("srun: error: Task launch for StepId=77.0 failed on node n2: Communication connection "
                                   "failure")), (2, srun_says("srun: error: Application launch failed")), (3, exits(1))])


def test_a_node_srun_could_not_reach_at_start_up_is_launched_again_in_the_job(rig_on_wall, tmp_path):
    """A link down for a moment as the launch starts: srun cannot start the tasks on n2 and
    ends at once. Nothing ran there; the launch starts again in the job, which completes."""
    rig = rig_on_wall
    with_batch_log(rig, tmp_path)
    rig.task = [UNREACHED_N2, UNREACHED_N2, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, rendezvous_timeout=120) == 0
    assert rig.names() == ["started", "relaunched", "relaunched", "finished"] and rig.ledger() == []
    again = [e for e in rig.events() if e["event"] == "relaunched"]
    assert [(e["cause"], e["nodes"], e["attempt"]) for e in again] == [("launch failed", "n2", 1),
                                                                         ("launch failed", "n2", 2)], again
    assert ("srun could not start the tasks on n2 (n2: Communication connection failure); starting the launch "
            "again in this allocation in 5 s (1 of 3)") in rig.said()
    assert "again in this allocation in 10 s (2 of 3)" in rig.said()  # backing off: not in step with a flapping link
    assert again[1]["time"] - again[0]["time"] >= 5 + 3  # the first pause, and the second launch's 3 s
    kinds, _ = faults_said(rig)
    assert kinds == [("launch failed", "srun could not start the tasks on n2; launched again")] * 2, kinds


def test_a_task_srun_could_not_connect_to_at_start_up_is_its_nodes_and_launched_again(rig_on_wall, tmp_path):
    """srun's shorter line names the task, not the node: the slurmd took the launch but could
    not open the task's I/O back to srun (its link down a moment). Task 1 is n2's."""
    rig = rig_on_wall
    with_batch_log(rig, tmp_path)
    cut = Plan([(1, arrive("n1")), (2, srun_says("srun: error: task 1 launch failed: Slurmd could not connect IO")),
                (2, srun_says("srun: forcing job termination")), (3, exits(1))])
    rig.task = [cut, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, rendezvous_timeout=120) == 0
    assert rig.names() == ["started", "relaunched", "finished"] and rig.ledger() == []
    [again] = [e for e in rig.events() if e["event"] == "relaunched"]
    assert (again["cause"], again["nodes"]) == ("launch failed", "n2"), again
    assert "srun could not start the tasks on n2 (n2: Slurmd could not connect IO)" in rig.said()


def test_a_node_srun_never_reaches_ends_the_start_up_saying_so_once_the_restarts_are_spent(rig, tmp_path):
    with_batch_log(rig, tmp_path)
    rig.task = [UNREACHED_N2, UNREACHED_N2]
    assert rig.run(restarts_in_job=1, rendezvous_timeout=120) == 4
    assert rig.names() == ["started", "relaunched", "watchdog_timeout"] and rig.ledger() == [("n2", "watchdog")]
    assert rig.summary() == "failed at start-up: srun could not start the tasks on n2, exit status 4"
    assert "did not join within" not in rig.said() and "with no in-job restart left" in rig.said()


def test_the_same_program_error_first_on_the_same_node_twice_blames_the_program_not_the_node(rig, tmp_path):
    """Which rank raises a deterministic error first is chance: it must not make the node a
    bad one, and the run ends as the program's failure, not a requeue without the node."""
    with_batch_log(rig, tmp_path)
    first_on_n2 = (3.5, srun_says("srun: error: n2: task 1: Exited with exit code 1"))
    rig.task = [Plan([*fails_at(7, saved=5).at, first_on_n2]), Plan([*fails_at(7, saved=6).at, first_on_n2])]
    assert rig.run(restarts_in_job=3) == 1
    assert rig.names() == ["started", "relaunched", "failed"] and rig.ledger() == []


def node_log(node: str, *lines: str) -> Action:
    """A node's log gets lines (the task's output: logs/<job>-<node>.out)."""
    def act(step: FakeStep) -> None:
        logs = step.rig.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{JOB}-{node}.out", "a") as log:
            log.write("".join(line + "\n" for line in lines))
    return act


def test_the_failure_is_named_on_the_node_whose_log_holds_the_programs_error_not_where_srun_saw_it_first(
        rig, tmp_path):
    """Rank 1 raised on n1; n2's launcher exited first, its ranks on a connection closed:
    the relaunch names n1. What n1's log said in the launch before does not count."""
    with_batch_log(rig, tmp_path)
    crash = ["[rank1]: Traceback (most recent call last):", "[rank1]: RuntimeError: deliberate crash at step 7"]
    follow = ["[rank2]: Traceback (most recent call last):", "[rank2]: RuntimeError: [gloo] Connection closed by peer"]
    first = Plan([*fails_at(7, saved=5).at[:-1], (3.4, node_log("n1", *crash)), (3.4, node_log("n2", *follow)),
                  (3.5, srun_says("srun: error: n2: task 1: Exited with exit code 1")),
                  (3.5, srun_says("srun: error: n1: task 0: Terminated")), fails_at(7, saved=5).at[-1]])
    second = Plan([*fails_at(7, saved=6).at[:-1], (3.4, node_log("n2", *crash)), (3.4, node_log("n1", *follow)),
                   (3.5, srun_says("srun: error: n1: task 0: Exited with exit code 1")),
                   (3.5, srun_says("srun: error: n2: task 1: Terminated")), fails_at(7, saved=6).at[-1]])
    rig.task = [first, second, FINISHES_ON_N1_N3]
    rig.run(restarts_in_job=1)
    assert [(e.get("node"), e.get("error")) for e in rig.events() if e["event"] == "relaunched"] == [
        ("n1", "RuntimeError: deliberate crash at step 7")], rig.events()
    assert "the program failed on n1 (exit status 1: RuntimeError: deliberate crash at step 7)" in rig.said()
    assert "first failure on node n2" in rig.stdout, rig.stdout  # the second launch: n2 raised
    n1 = (rig.run_dir / "logs" / f"{JOB}-n1.out").read_text().splitlines()
    heads = [line for line in n1 if line.startswith("----- slurmtrain: ")]  # where each launch begins
    assert heads[0].startswith(f"----- slurmtrain: job {JOB}, launch 1 on n1 n2, "), heads
    assert heads[1].startswith(f"----- slurmtrain: job {JOB}, launch 2 (in-job restart 1) on n1 n2, "), heads
    assert n1.index(heads[0]) < n1.index(crash[1]) < n1.index(heads[1]) < n1.index(follow[1]), n1


def test_a_task_srun_says_was_killed_is_named_killed_not_exit_status_1(rig, tmp_path):
    """The srun launcher (a task a process), a rank killed with kill -9: its log says
    nothing, srun says "Killed", srun's own status is 1. The relaunch said "the program
    failed on n2 (exit status 1)"."""
    with_batch_log(rig, tmp_path)
    killed = Plan([*fails_at(7, saved=5).at[:-1], (3.5, srun_says("srun: error: n2: task 3: Killed")),
                   (3.5, srun_says("srun: error: n1: task 0: Terminated")), fails_at(7, saved=5).at[-1]])
    rig.task = [killed, FINISHES_ON_N1_N3]
    rig.run(restarts_in_job=1)
    assert [(e.get("node"), e.get("error")) for e in rig.events() if e["event"] == "relaunched"] == [
        ("n2", "a task on n2 was killed by SIGKILL (out of memory, or a kill)")], rig.events()


def _raises_on_n2(error: str, saved: int | None) -> Plan:
    """A user's program (no train_error events of its own) raises on n2, after saving ``saved``."""
    saves = [(2, emit("checkpoint_saved", step=saved))] if saved is not None else []
    return Plan([JOINS, *saves, (3.4, node_log("n2", "[rank2]: Traceback (most recent call last):", f"[rank2]: {error}")),
                 (3.5, srun_says("srun: error: n2: task 1: Exited with exit code 1")),
                 (3.5, srun_says("srun: error: n1: task 0: Terminated")), (4, exits(1))])


def test_a_user_programs_same_error_again_is_its_own_failure_not_its_nodes(rig, tmp_path):
    """A Hugging Face Trainer script raises at step 15 every time; the relaunch resumes from
    step 10 and raises again, on the same node. That node is not to blame (it was left out,
    the run requeued to wait for it, and put in the bad-node ledger): the run fails, saying why."""
    with_batch_log(rig, tmp_path)
    boom = "RuntimeError: boom on rank 2 at step 15"
    rig.task = [_raises_on_n2(boom, saved=10), _raises_on_n2(boom, saved=None)]
    assert rig.run(restarts_in_job=3) == 1
    assert rig.names() == ["started", "relaunched", "failed"] and rig.ledger() == [], rig.names()
    assert rig.event("relaunched")["error"] == rig.event("failed")["error"] == boom
    assert f"the command failed with exit status 1 ({boom}); not requeueing" in rig.said(), rig.said()


def test_a_node_fault_said_twice_on_the_same_node_is_still_the_nodes(rig, tmp_path):
    with_batch_log(rig, tmp_path)
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    rig.task = [_raises_on_n2(ecc, saved=10), _raises_on_n2(ecc, saved=None)]
    rig.run(restarts_in_job=3)
    assert "nodes_lost" in rig.names() and rig.ledger() == [("n2", "in_job")], (rig.names(), rig.ledger())


def test_the_failed_tasks_exit_status_not_sruns_143_from_ending_the_others(rig, tmp_path):
    with_batch_log(rig, tmp_path)
    rig.task = Plan([JOINS, (3, srun_says("srun: error: n2: task 1: Exited with exit code 3")),
                     (3, srun_says("srun: error: n1: task 0: Terminated")), (4, exits(143))])
    assert rig.run() == 3
    assert (rig.names(), rig.event("failed")["exit_code"]) == (["started", "failed"], 3)
    assert "the command failed with exit status 3" in rig.said(), rig.said()


def test_a_rank_that_dies_first_on_the_same_node_twice_leaves_it_out(rig, tmp_path):
    """Killed twice on n2 (no error line of the program's): the node, not the program."""
    with_batch_log(rig, tmp_path)
    on_three_nodes(rig)
    dies_on_n2 = Plan([*DIES_AFTER_SAVING.at[:-1], (4.5, srun_says("srun: error: n2: task 1: Killed")),
                       DIES_AFTER_SAVING.at[-1]])
    rig.task = [dies_on_n2, dies_on_n2, FINISHES_ON_N1_N3]
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n2"], ["n1", "n3"]]
    assert rig.ledger() == [("n2", "in_job")]


KILLED_ON_N2_AT_ONCE = Plan([JOINS, (1, srun_says("srun: error: n2: task 1: Killed")),
                             (1, srun_says("srun: launch/slurm: _step_signal: Terminating StepId=77.0")),
                             (1, srun_says("slurmstepd-n1: error: *** STEP 77.0 ON n1 CANCELLED AT 2026-11-27T05:30:39 ***")),
                             (1.5, exits(137))])


def _n2_lost_in_the_last_start(rig) -> None:
    lines = [{"time": 1.0, "event": "started", "job_id": JOB, "restart": 0, "launch": 0, "nodes": "n1 n2"},
             {"time": 3.0, "event": "checkpoint_saved", "step": 5},
             {"time": 4.0, "event": "nodes_lost", "job_id": JOB, "restart": 0, "launch": 1, "nodes": "n2"},
             {"time": 4.1, "event": "requeue", "job_id": JOB, "restart": 0, "launch": 1, "exclude": "",
              "waits_for": "n2"}]
    (rig.run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    rig.restarts = rig.slurm.restarts = 1


def test_slurms_kill_of_the_last_starts_step_is_launched_again_even_before_a_checkpoint(rig, tmp_path):
    """Seen in CI on the 3-node sandbox: after a requeue that waited for n2, Slurm's kill of
    the last start's step (the same job and step ids) reached the new start's step on n2,
    back in service, at once: SIGKILLed before any save. Not the program's failure: launched
    again, and n2 is no bad node for it."""
    with_batch_log(rig, tmp_path)
    _n2_lost_in_the_last_start(rig)
    rig.task = [KILLED_ON_N2_AT_ONCE, KILLED_ON_N2_AT_ONCE, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == 0
    mine = [e for e in rig.events() if e.get("restart") == 1]
    assert [e["event"] for e in mine][-3:] == ["relaunched", "relaunched", "finished"], mine
    assert [e.get("why") for e in mine if e["event"] == "relaunched"] == ["stray kill"] * 2
    assert rig.ledger() == []
    assert "(exit status 137) as Slurm killed it (its kill of an earlier start's step); starting it again" in rig.said()


@pytest.mark.parametrize("case", ["first start", "a node not lost before", "the task exited"])
def test_a_failure_before_a_checkpoint_is_the_programs_unless_slurms_stray_kill(rig, tmp_path, case):
    """srun's own cancel of the step after a task fails prints the same CANCELLED line: only a
    SIGKILL on a node the job lost in an earlier start is Slurm's stray kill."""
    with_batch_log(rig, tmp_path)
    plan = KILLED_ON_N2_AT_ONCE
    if case != "first start":
        _n2_lost_in_the_last_start(rig)
    if case == "a node not lost before":
        plan = Plan([(a, srun_says("srun: error: n1: task 0: Killed")) if i == 1 else (a, act)
                     for i, (a, act) in enumerate(KILLED_ON_N2_AT_ONCE.at)])
    if case == "the task exited":
        plan = Plan([(a, srun_says("srun: error: n2: task 1: Exited with exit code 1")) if i == 1 else (a, act)
                     for i, (a, act) in enumerate(KILLED_ON_N2_AT_ONCE.at)])
    rig.task = [plan, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3) == (1 if case == "the task exited" else 137)  # the task's own, where said
    assert "relaunched" not in rig.names() and rig.names()[-1] == "failed" and rig.launched == ["task"]


def test_a_hang_that_names_every_node_blames_none(rig, monkeypatch):
    """Ranks in lockstep beat within the same second: such a hang names them all, and says
    nothing of any one node; two of them leave no node out."""
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    both_stop = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n2", 200))])
    rig.task = [both_stop, both_stop, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert [e["nodes"] for e in rig.events() if e["event"] == "hang"] == ["n1 n2", "n1 n2"]
    assert "nodes_lost" not in rig.names() and rig.ledger() == []


def test_in_job_restarts_stop_at_the_budget(rig):
    rig.task = [DIES_AFTER_SAVING, DIES_AFTER_SAVING, DIES_AFTER_SAVING]
    assert rig.run(restarts_in_job=2) == 137
    assert rig.names() == ["started", "relaunched", "relaunched", "failed"]
    assert rig.launched == ["task", "task", "task"]


def test_a_preemption_after_a_checkpoint_is_requeued_not_launched_again(rig):
    """With a GraceTime Slurm signals the tasks only; they save and exit non-zero: Slurm's
    PreemptTime says it was a preemption, which goes back to the queue as before."""
    rig.slurm.preempt_time = PREEMPTED_AT
    rig.task = [DIES_AFTER_SAVING, RESUMES_AND_FINISHES]
    requeued_cleanly(rig, rig.run(restarts_in_job=3))
    assert "relaunched" not in rig.names() and rig.launched == ["task"]


# ---- hangs (resilience.hang_timeout) ------------------------------------------------------------

def beats(rank: int, step: int | None, node: str, pid: int, ms: float | None = None) -> Action:
    """Rank ``rank`` reports progress (slurmtrain.heartbeat.beat), at this fake time; ``ms``:
    its compute probe's time."""
    def act(step_: FakeStep) -> None:
        import os
        folder = step_.rig.run_dir / f".heartbeat-{JOB}"
        folder.mkdir(exist_ok=True)
        (folder / str(rank)).write_text(f"{'-' if step is None else step} {node} {pid}" +
                                        ("" if ms is None else f" {ms}") + "\n")
        os.utime(folder / str(rank), (step_.rig.clock.wall(), step_.rig.clock.wall()))
    return act


HANGS_ON_N2 = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n2", 200)),
                    (6, beats(0, 5, "n1", 100))])   # rank 1 on n2 stops at 2 s; rank 0 waits in a collective
# ... the same hang with rank 1 on the spare n3: where it hung on n2, now on another node.
HANGS_ON_N3 = Plan([(1, arrive("n1", "n3")), SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n3", 300)),
                    (6, beats(0, 5, "n1", 100))])


def test_a_hangs_seconds_count_the_time_its_stacks_took(rig, monkeypatch):
    """A node that does not answer holds the stacks 10 s: the event said the timeout
    (20 s), and goodput counted those 10 s of quiet as lost steps."""
    from slurmtrain.job import hangs
    real = hangs.dump_stacks

    def slow(*args, **kwargs):
        import time
        time.sleep(1.5)
        return real(*args, **kwargs)
    monkeypatch.setattr("slurmtrain.job.faults.hangs.dump_stacks", slow)
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    rig.task = [HANGS_ON_N2, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert 21 <= rig.event("hang")["seconds"] <= 24, rig.event("hang")


def test_a_launch_whose_ranks_stop_beating_is_a_hang_named_recorded_and_launched_again(rig, monkeypatch):
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: "/opt/bin/py-spy")
    monkeypatch.setenv("SLURMD_NODENAME", "n1")  # the supervisor's own node
    rig.slurm.then("sh", Answer(0, "Thread 100 (idle): MainThread\n"))  # py-spy's dump: no state line before it
    rig.slurm.then("srun", Answer(0, "Thread 200 (idle): MainThread\n"))
    rig.task = [HANGS_ON_N2, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert rig.names() == ["started", "first_step", "hang", "relaunched", "finished"]
    first, relaunched = rig.event("first_step"), rig.event("relaunched")
    assert first["step"] == 4 and first["at"] <= first["time"]   # the heartbeat's own time: goodput's start-up
    hang = rig.event("hang")
    assert relaunched["last_progress"] - first["at"] == 4  # the newest beat (rank 0's at 6 s; the first at 2 s)
    assert relaunched["last_step"] == 5  # goodput places a node-memory copy between the first step and this one
    assert (hang["ranks"], hang["nodes"], hang["step"]) == ("1", "n2", 4)
    assert 20 <= hang["seconds"] <= 22
    stacks = rig.run_dir / "stacks" / f"{JOB}-0-1"
    assert (stacks / "rank0-n1.txt").read_text().startswith("Thread 100")   # py-spy here
    assert (stacks / "rank1-n2.txt").read_text().startswith("Thread 200")   # through srun on n2
    on_n2, probe = rig.slurm.argvs("srun")  # py-spy on n2, then the probe of the launch's nodes (all alive)
    assert on_n2[:6] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", "n2"] and "--nonblocking" in on_n2[8]
    assert on_n2[6:8] == ["sh", "-c"] and on_n2[9:] == ["/opt/bin/py-spy", "200"]  # its state, then py-spy's dump
    assert "the last to report: rank(s) 1 on n2" in rig.said()
    assert rig.launched == ["task", "task"] and "requeue" not in rig.slurm.names()


STOPS_ON_N2 = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n2", 200))])  # both quiet from 2 s


def test_a_hung_rank_its_peers_stopped_beating_with_is_named_by_its_stack(rig, monkeypatch):
    """Rank 1 was SIGSTOPped: rank 0 blocks in its next collective and stops beating too, so
    the beats name both; the process state (T) and the stacks tell rank 1 apart, and the
    in-job restart names its node, not the node whose task srun saw killed first."""
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: "/opt/bin/py-spy")
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    rig.slurm.then("sh", Answer(0, 'S\nThread 100 (idle): "MainThread"\n'
                                   "    all_reduce (torch/distributed/distributed_c10d.py:2800)\n"))
    rig.slurm.then("srun", Answer(0, 'T\nThread 200 (idle): "MainThread"\n    on_step_end (train.py:64)\n'))
    rig.task = [STOPS_ON_N2, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    hang, again = rig.event("hang"), rig.event("relaunched")
    assert (hang["ranks"], hang["stuck_ranks"], hang["stuck_nodes"]) == ("0 1", "1", "n2"), hang
    assert hang["why"] == "process state T (stopped: SIGSTOP, or a debugger)"
    assert "of them rank(s) 1 on n2: process state T" in rig.said()
    assert (again["cause"], again.get("node")) == ("hang", "n2"), again
    assert "the launch hung on n2 and was ended" in rig.said(), rig.said()
    stacks = rig.run_dir / "stacks" / f"{JOB}-0-1"
    assert (stacks / "rank1-n2.txt").read_text().startswith("# process state: T (stopped: SIGSTOP, or a debugger)\n")


def test_a_program_that_never_beats_is_not_watched_for_hangs(rig):
    rig.task = Plan([JOINS, (500, exits(0))])  # quiet for 500 s: no heartbeat, so no judgement
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert "hang" not in rig.names()


def test_the_derived_hang_timeout_follows_the_slowest_gap_and_has_a_floor(rig):
    """Beats 1 s apart and one 90 s gap (a checkpoint): the derived timeout is 10 x 90 s, not the
    600 s floor; a program quiet for 700 s is still within it."""
    plan = [JOINS] + [(t, beats(0, t, "n1", 100)) for t in (2, 3, 93)] + [(793, beats(0, 94, "n1", 100)),
                                                                         (800, exits(0))]
    rig.task = Plan(plan)
    assert rig.run(restarts_in_job=3) == 0 and "hang" not in rig.names()


def test_a_hang_with_no_restart_left_ends_the_run(rig, monkeypatch):
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    rig.task = [HANGS_ON_N2]
    assert rig.run(restarts_in_job=0, hang_timeout=20) == 143
    assert rig.names() == ["started", "first_step", "hang", "failed"]
    assert rig.summary() == "hung; no in-job restart left, exit status 143"
    assert "pip install py-spy" in (rig.run_dir / "stacks" / f"{JOB}-0-1" / "rank1-n2.txt").read_text()



def test_sigchld_only_wakes_the_loop(rig):
    """The supervisor listens for SIGCHLD so that srun's end wakes it at once (not at its
    next one-second tick); the signal itself decides nothing."""
    rig.task = Plan([JOINS, (4, exits(0))])
    rig.clock.at(2, signal.SIGCHLD)
    assert rig.run() == 0
    assert rig.names() == ["started", "finished"] and rig.step.sent == []


# ---- nodes lost in the job (slurm.spare_nodes, nodes.py) ----------------------------------

def dies(node: str) -> Action:
    """The machine dies hard: it answers nothing any more (its peers' collectives fail)."""
    return lambda step: step.rig.slurm.dead.append(node)


def on_three_nodes(rig: Rig) -> None:
    rig.slurm.nodes = ["n1", "n2", "n3"]


FINISHES_ON_N1_N3 = Plan([(1, arrive("n1", "n3")), (5, emit("resumed", step=5)), (20, emit("finished", step=9)),
                          (20, exits(0))])


def test_a_node_that_wrote_the_programs_error_is_not_taken_for_dead_by_a_probe_it_missed(rig):
    """Under load the probe's srun got no answer from n2, whose ranks had just written the
    program's error there: n2 ran the program to its failure. Not lost, not in the ledger;
    the failure is the program's (a walk-through saw a healthy node left out, and every
    later two-node submit refused)."""
    on_three_nodes(rig)
    slow = lambda step: rig.slurm.dead.append("n2")  # noqa: E731  the probe's srun fails on it
    crash = node_log("n2", "[rank1]: Traceback (most recent call last):",
                     "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'x'")
    rig.task = [Plan([JOINS, SAVES, (4, crash), (4, slow), (5, exits(1))]),
                Plan([JOINS, (2, lambda step: rig.slurm.dead.clear()), (3, emit("finished", step=9)), (3, exits(0))])]
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert "nodes_lost" not in rig.names() and rig.ledger() == [], (rig.names(), rig.ledger())
    assert "node probe: n2 did not answer (srun: error: Task launch failed on node n2), but its ranks wrote the " \
           "program's error there: taken for alive" in rig.said()
    assert rig.event("relaunched")["cause"] == "crash" and rig.on_nodes == [["n1", "n2"], ["n1", "n2"]]


def test_a_dead_node_is_replaced_by_the_spare_and_the_run_goes_on_in_the_job(rig):
    on_three_nodes(rig)
    rig.task = [Plan([JOINS, (10, dies("n2")), (10, exits(137))]), FINISHES_ON_N1_N3]  # before any new checkpoint
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert rig.overlaps == [False, True]  # the old step holds n1 until Slurm hears from n2, which it never will
    assert rig.names() == ["started", "nodes_lost", "relaunched", "finished"]
    assert rig.event("started")["spares"] == "n3"
    assert {k: rig.event("nodes_lost")[k] for k in ("nodes", "spares", "left")} == {"nodes": "n2", "spares": "n3",
                                                                                   "left": 0}
    assert rig.ledger() == [("n2", "node_failure")]
    assert "going on in this allocation on n1 n3 (spare n3 in their place)" in rig.said()
    # srun's words for the node that did not answer: in the batch log and the ledger's reason
    assert "slurmtrain: node probe: n2 did not answer: srun: error: Task launch failed on node n2" in rig.said()
    assert rig.event("relaunched")["why"] == "nodes lost"
    from slurmtrain.runs import classify
    assert any(line.endswith("the launch ended with exit status 137 as nodes were lost: started again in the job from "
                             "the newest checkpoint (in-job restart 1)") for line in classify.history(rig.run_dir))
    assert not {"requeue", "requeuehold"} & set(rig.slurm.names())


def test_a_node_slurm_holds_down_is_lost_even_when_it_still_answers(rig):
    on_three_nodes(rig)
    rig.task = [Plan([JOINS, (10, do(lambda: rig.slurm.unhealthy.append("n1"))), (10, exits(1))]),
                Plan([(1, arrive("n2", "n3")), (20, emit("finished", step=9)), (20, exits(0))])]
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n2", "n3"]]  # the first node is the new head: MASTER_ADDR moves
    assert rig.ledger() == [("n1", "node_failure")]


def test_without_a_spare_a_dead_node_requeues_the_job_without_it_not_a_program_error(rig):
    """The peers' collectives fail before Slurm sees the node die: the probe names it, and
    the run is a node failure that goes back to the queue without it."""
    rig.task = [Plan([JOINS, (10, dies("n2")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.names() == ["started", "nodes_lost", "requeue"]
    assert rig.event("requeue")["exclude"] == "n2" and rig.slurm.excluded == "n2"
    assert rig.event("nodes_lost")["spares"] == "none"
    assert rig.ledger() == [("n2", "node_failure")]
    assert rig.summary() == "node(s) n2 lost; requeued without n2, exit status 0"
    from slurmtrain.runs import classify
    assert classify.classify(rig.run_dir).kind == classify.NODE_FAILURE


def test_a_dead_node_the_partition_cannot_spare_is_not_left_out_and_the_job_waits_for_it(rig):
    """A partition of two nodes cannot run a job of two without one: excluded, the job would
    pend for ever (Reason=BadConstraints). It is requeued with its node list as it was, to start
    once the node is back in service, and the batch log, the event and the summary say so."""
    rig.slurm.partition = ["n1", "n2"]
    rig.task = [Plan([JOINS, (10, dies("n2")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.names() == ["started", "nodes_lost", "requeue"]
    assert rig.slurm.excluded == "(null)" and rig.event("requeue")["exclude"] == ""
    assert rig.event("requeue")["waits_for"] == "n2"
    assert rig.ledger() == [("n2", "node_failure")]  # in the ledger still
    assert ("slurmtrain: not leaving out n2: partition debug has 2 node(s) for a job of 2; the requeued job "
            "starts once n2 is back in service") in rig.said()
    assert rig.summary() == ("node(s) n2 lost; requeued, to start when n2 is back in service (too few nodes "
                             "without it), exit status 0")
    # and `status` says the same of the start, while the job waits for n2
    outcome = eventlog.latest(events.read(rig.run_dir))
    assert outcome.detail.startswith("node(s) n2 were lost and no spare was left; requeued, to start when n2 is "
                                     "back in service (too few nodes without it)"), outcome


def test_peers_of_dead_nodes_are_not_blamed_for_failing_first_and_the_job_waits_for_the_dead(rig, tmp_path):
    """Two nodes and a spare on a partition of three. n2 dies: the spare takes its place. Then
    n3 dies. Each time n1's rank fails first (its peer's connection reset): the dead nodes
    explain both failures, so n1 is not named twice and left out (it was, and the requeue
    then excluded the healthy batch host and kept the dead node). The requeue asks for all
    three nodes again: n3 is not left out, the job waits for it."""
    with_batch_log(rig, tmp_path)
    on_three_nodes(rig)
    rig.slurm.partition = ["n1", "n2", "n3"]
    rig.slurm.num_nodes = 2  # Slurm removed n2 from the job (--no-kill); its requeue asks for 3 again
    n1_first = (0.5, srun_says("srun: error: n1: task 0: Exited with exit code 1"))
    rig.task = [Plan([JOINS, SAVES, (5, dies("n2")), n1_first, (10, exits(1))]),
                Plan([(1, arrive("n1", "n3")), SAVES, (5, dies("n3")), n1_first, (10, exits(1))])]
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert [e["nodes"] for e in rig.events() if e["event"] == "nodes_lost"] == ["n2", "n3"]
    assert (rig.event("requeue")["exclude"], rig.event("requeue")["waits_for"]) == ("", "n3")
    assert rig.slurm.excluded == "(null)"
    assert sorted(rig.ledger()) == [("n2", "node_failure"), ("n3", "node_failure")]


def test_a_job_slurm_shrank_is_requeued_plainly_not_held(rig, tmp_path):
    """As above on a partition of four: n3 could be left out, but Slurm (22.05) takes no
    change to a job it shrank (--no-kill) until the requeue is through, KillWait after it,
    when the supervisor is gone: a held requeue stayed held for good. So it is requeued as
    it is, and the batch log says why n3 was not left out."""
    with_batch_log(rig, tmp_path)
    on_three_nodes(rig)
    rig.slurm.partition = ["n1", "n2", "n3", "n7"]
    rig.slurm.num_nodes = 2
    rig.task = [Plan([JOINS, SAVES, (5, dies("n2")), (10, exits(1))]),
                Plan([(1, arrive("n1", "n3")), SAVES, (5, dies("n3")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert "requeuehold" not in rig.slurm.names() and "requeue" in rig.slurm.names()
    assert (rig.event("requeue")["exclude"], rig.event("requeue").get("waits_for")) == ("", None)
    assert ("slurmtrain: not leaving out n3: Slurm takes no change to job 77 since it removed a lost node from it"
            in rig.said())


def test_without_spares_a_job_slurm_shows_smaller_still_leaves_the_dead_node_out(rig):
    """Slurm may show a job of 2 with one node while it ends it on a failed node; without
    spares (no --no-kill) the job is not resized, and its requeue leaves the node out."""
    rig.slurm.partition = ["n1", "n2", "n7"]
    rig.slurm.num_nodes = 1
    rig.task = [Plan([JOINS, (10, dies("n2")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.slurm.excluded == "n2" and "requeuehold" in rig.slurm.names()


def test_a_job_slurm_shows_smaller_as_it_ends_it_is_not_left_too_few_nodes(rig):
    """A walk-through's race: n2 was excluded already (the ledger), the job of 2 ran on n1 n3
    of a partition of three, n3's link went down and Slurm, ending the job for the node
    failure, showed it with 1 node. Read as a job of 1, n3 was left out too: the requeue
    could never start (BadConstraints, for ever). It needs 2, so it waits for n3."""
    rig.slurm.partition = ["n1", "n2", "n3"]
    rig.slurm.nodes, rig.slurm.excluded, rig.slurm.num_nodes = ["n1", "n3"], "n2", 1
    rig.task = [Plan([(1, arrive("n1", "n3")), (10, dies("n3")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.slurm.excluded == "n2" and rig.event("requeue")["waits_for"] == "n3"
    assert "not leaving out n3: partition debug has 2 node(s) for a job of 2" in rig.said()


def test_a_partition_with_room_leaves_the_dead_node_out(rig):
    rig.slurm.partition = ["n1", "n2", "n7"]
    rig.task = [Plan([JOINS, (10, dies("n2")), (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 0
    assert rig.slurm.excluded == "n2" and "waits_for" not in rig.event("requeue")
    assert "not leaving out" not in rig.said()


def test_a_node_whose_rank_hangs_twice_is_left_out_and_the_spare_takes_its_place(rig, monkeypatch):
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    on_three_nodes(rig)
    rig.task = [HANGS_ON_N2, HANGS_ON_N2, FINISHES_ON_N1_N3]
    assert rig.run(restarts_in_job=3, hang_timeout=20, spare_nodes=1) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n2"], ["n1", "n3"]]  # once is chance, twice is the node
    assert [e["event"] for e in rig.events() if e["event"] in ("hang", "nodes_lost")] == ["hang", "hang", "nodes_lost"]
    assert rig.ledger() == [("n2", "in_job")]


def test_a_hang_that_follows_its_ranks_to_another_node_is_the_programs(rig, monkeypatch):
    """Rank 1 hangs at step 4 on n2, twice: n2 is named twice and left out, the spare n3
    takes its place, and rank 1 hangs at step 4 again, on n3: a bug of the program's (a
    collective only rank 1 skips), not a node's. The run ends there, n3 is neither left out
    nor put in the ledger, and status says so."""
    from slurmtrain.runs import classify

    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    on_three_nodes(rig)
    rig.task = [HANGS_ON_N2, HANGS_ON_N2, HANGS_ON_N3, FINISHES_ON_N1_N3]
    assert rig.run(restarts_in_job=3, hang_timeout=20, spare_nodes=1) != 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n2"], ["n1", "n3"]]
    assert [e["nodes"] for e in rig.events() if e["event"] == "nodes_lost"] == ["n2"]
    assert rig.ledger() == [("n2", "in_job")]
    assert rig.event("failed")["hung_again"] is True
    assert "hung again at the step and on the ranks it hung before, on other nodes: the program's hang" in rig.said()
    out = classify.classify(rig.run_dir)
    assert out.kind == classify.HANG and "on other nodes: the program's hang, not a node's" in out.detail, out


def test_a_dead_node_with_no_restart_left_requeues_without_it(rig):
    on_three_nodes(rig)
    rig.task = [Plan([JOINS, (10, dies("n1")), (10, exits(1))])]
    assert rig.run(restarts_in_job=0, spare_nodes=1) == 0
    assert rig.names() == ["started", "nodes_lost", "requeue"] and rig.slurm.excluded == "n1"


def test_the_preflight_gate_leaves_a_failing_node_out_when_a_spare_can_take_its_place(rig):
    on_three_nodes(rig)
    rig.gate = Plan([(1, answers(n1="ok 2.13", n2="ok 2.13", n3="ok 2.13")),
                     (1, do(lambda: (rig.gate_step.gate_dir / "n1.ok").unlink())), (2, exits(1))])
    rig.task = Plan([(1, arrive("n2", "n3")), (20, emit("finished", step=9)), (20, exits(0))])
    assert rig.run(preflight=True, spare_nodes=1) == 0
    assert rig.on_nodes == [["n2", "n3"]]
    assert rig.names() == ["started", "preflight_failed", "nodes_lost", "finished"]
    assert rig.ledger() == [("n1", "gate")]
    assert "going on without them" in rig.said()


def test_the_probe_of_a_healthy_launch_answers_at_once_and_a_program_error_stays_one(rig):
    """A failure with every node answering is the program's: one srun, then as before."""
    rig.task = [Plan([JOINS, (10, exits(1))])]
    assert rig.run(restarts_in_job=3) == 1
    assert rig.names() == ["started", "failed"]
    [probe] = rig.slurm.argvs("srun")
    assert probe[:6] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "-w", "n1,n2"]


def test_srun_waiting_for_a_dead_node_after_a_task_failed_is_ended_and_the_node_replaced(rig, tmp_path):
    """Its peers failed at once; srun waits for the dead node's tasks until Slurm marks the
    node down (SlurmdTimeout). STUCK_S after srun's first task error the supervisor probes
    the launch's nodes itself, ends the launch and goes on without the dead one."""
    on_three_nodes(rig)
    rig.batch_log = tmp_path / "job-77.out"
    rig.batch_log.write_text("slurmtrain: job 77 on n1 n2 n3\n")

    def n2_dies_and_n1_fails(step: FakeStep) -> None:
        rig.slurm.dead.append("n2")
        with open(rig.batch_log, "a") as log:
            log.write("srun: error: n1: task 0: Exited with exit code 1\n")
    rig.task = [Plan([JOINS, SAVES, (10, n2_dies_and_n1_fails)]), FINISHES_ON_N1_N3]  # srun never ends by itself
    assert rig.run(restarts_in_job=3, spare_nodes=1) == 0
    assert "a task failed 15 s ago and srun still waits: node(s) n2 do not answer; ending the launch" in rig.said()
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert rig.names() == ["started", "nodes_lost", "relaunched", "finished"]
    probes = [a for a in rig.slurm.argvs("srun") if a[-1] == 'echo "$SLURMD_NODENAME"']
    assert sorted(a[a.index("-w") + 1] for a in probes) == ["n1", "n2"]  # one per node at once, and only once


def test_a_node_that_dies_after_joining_before_the_first_step_is_found_by_the_probe(rig):
    """Every node ran its setup lines, then n2 died: its peers wait for it in the rendezvous,
    no task fails, no rank beats. rendezvous_timeout after the join the supervisor probes,
    ends the launch and the spare takes n2's place (before: Slurm's SlurmdTimeout)."""
    on_three_nodes(rig)
    rig.task = [Plan([JOINS, (2, lambda step: rig.slurm.dead.append("n2"))]),  # srun waits for ever
                FINISHES_ON_N1_N3]
    assert rig.run(spare_nodes=1, rendezvous_timeout=30, restarts_in_job=3) == 0, rig.said()
    assert "no heartbeat from any rank 30 s after every node joined: node(s) n2 do not answer; ending the launch" \
        in rig.said()
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert rig.names() == ["started", "nodes_lost", "relaunched", "finished"]
    assert rig.event("nodes_lost")["nodes"] == "n2" and rig.ledger() == [("n2", "node_failure")]


def test_without_a_spare_a_node_dead_before_the_first_step_is_left_out_of_a_requeue(rig):
    rig.slurm.partition = ["n1", "n2", "n7"]
    rig.task = Plan([JOINS, (2, lambda step: rig.slurm.dead.append("n2"))])
    assert rig.run(rendezvous_timeout=30, restarts_in_job=3) == 0
    assert rig.names() == ["started", "nodes_lost", "requeue"] and rig.slurm.excluded == "n2"


def test_a_long_first_step_with_every_node_answering_is_waited_for(rig):
    """No rank has stepped by the deadline, but every node answers: a long load or first
    step, not a fault. Said once; the run goes on."""
    rig.task = Plan([JOINS, (50, beats(0, 1, "n1", 100, 5.0)), (60, emit("finished", step=9)), (60, exits(0))])
    assert rig.run(rendezvous_timeout=30) == 0
    assert rig.said().count("no heartbeat from any rank 30 s after every node joined; every node answers") == 1
    assert rig.names() == ["started", "first_step", "finished"]


# ---- stragglers (resilience.straggler_pct) ------------------------------------------------

def beats_with(rank: int, node: str, pid: int, ms: float, step: int) -> Action:
    return beats(rank, step, node, pid, ms)


def test_a_node_computing_slower_is_named_in_the_events_the_log_and_the_ledger(rig):
    ticks = [(t, beats_with(0, "n1", 100, 5.0, t)) for t in range(2, 30)]
    ticks += [(t, beats_with(1, "n2", 200, 9.0, t)) for t in range(2, 30)]
    rig.task = Plan([JOINS, *ticks, (30, emit("finished", step=30)), (30, exits(0))])
    assert rig.run(straggler_pct=30) == 0
    s = rig.event("straggler")
    assert (s["node"], s["compute_ms"], s["others_ms"], s["pct"]) == ("n2", 9.0, 5.0, 80)
    assert rig.ledger() == [("n2", "straggler")]
    assert "straggler: n2 computes 80% slower than the other nodes (9.0 ms against 5.0 ms" in rig.said()
    assert rig.names()[-1] == "finished"  # named, not stopped: the run goes on


def test_a_straggler_is_replaced_by_the_spare_at_a_checkpoint(rig):
    """With an idle spare the supervisor stops the launch (the stop file and signal: the
    program saves and exits 75) and starts it again with the spare in the straggler's
    place, in the job: no requeue."""
    on_three_nodes(rig)
    ticks = [(t, beats_with(0, "n1", 100, 5.0, t)) for t in range(2, 40)]
    ticks += [(t, beats_with(1, "n2", 200, 9.0, t)) for t in range(2, 40)]
    rig.task = [Plan([JOINS, *ticks], on={STOP: [(2, emit("checkpoint_saved", step=30)), (2, emit("stopped", step=30)),
                                              (2, exits(75))]}), FINISHES_ON_N1_N3]
    assert rig.run(straggler_pct=30, spare_nodes=1, restarts_in_job=3) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert rig.names() == ["started", "first_step", "straggler", "nodes_lost", "relaunched", "finished"]
    assert rig.event("nodes_lost")["why"] == "straggler" and rig.event("relaunched")["why"] == "straggler"
    assert not (rig.run_dir / f".stop-{JOB}").exists() and "requeue" not in rig.slurm.names()
    from slurmtrain.runs import classify, goodput
    said = classify.history(rig.run_dir)
    assert any(line.endswith("n2 left out of the job (a straggler); spare in its place: n3") for line in said)
    [fault] = goodput.of_events(events.read(rig.run_dir)).faults
    assert (fault.kind, fault.detail) == ("straggler", "n2 replaced by n3 at a checkpoint")


def test_a_time_limit_during_the_straggler_stop_is_a_stop_and_a_requeue(rig):
    on_three_nodes(rig)
    ticks = [(t, beats_with(0, "n1", 100, 5.0, t)) for t in range(2, 40)]
    ticks += [(t, beats_with(1, "n2", 200, 9.0, t)) for t in range(2, 40)]
    rig.clock.at(23, STOP)  # the time limit's warning, just after the straggler's stop began
    rig.task = [Plan([JOINS, *ticks], on={STOP: [(3, emit("checkpoint_saved", step=30)), (3, emit("stopped", step=30)),
                                              (3, exits(75))]})]
    assert rig.run(straggler_pct=30, spare_nodes=1, restarts_in_job=3) == 0
    assert "signal" in rig.names() and rig.names()[-1] == "requeue" and "nodes_lost" not in rig.names()


def test_a_straggler_stop_that_must_be_forced_still_puts_the_spare_in_its_place(rig):
    """A rank that cannot stop (stalled): the stop window ends in SIGTERM and SIGKILL; the
    launch starts again in the job without the straggler, from the newest checkpoint."""
    on_three_nodes(rig)
    ticks = [(t, beats_with(0, "n1", 100, 5.0, t)) for t in range(2, 40)]
    ticks += [(t, beats_with(1, "n2", 200, 9.0, t)) for t in range(2, 40)]
    rig.task = [Plan([JOINS, SAVES, *ticks], on={STOP: []}), FINISHES_ON_N1_N3]  # ignores the stop signal
    assert rig.run(straggler_pct=30, spare_nodes=1, restarts_in_job=3) == 0
    assert rig.on_nodes == [["n1", "n2"], ["n1", "n3"]]
    assert [n for n in rig.names() if n != "first_step"] == ["started", "straggler", "stop_timeout", "stop_escalated",
                                                             "nodes_lost", "relaunched", "finished"]
    assert "requeue" not in rig.slurm.names()


def test_a_preemption_during_the_straggler_stop_is_a_preemption(rig):
    """Slurm's SIGTERM reaches the tasks only: the launch ends, and Slurm's PreemptTime
    says why; the job is requeued, not launched again in an allocation Slurm takes back."""
    on_three_nodes(rig)
    ticks = [(t, beats_with(0, "n1", 100, 5.0, t)) for t in range(2, 40)]
    ticks += [(t, beats_with(1, "n2", 200, 9.0, t)) for t in range(2, 40)]
    rig.slurm.preempt_time = PREEMPTED_AT
    rig.task = [Plan([JOINS, *ticks], on={STOP: [(2, emit("checkpoint_saved", step=30)), (2, emit("stopped", step=30)),
                                              (2, exits(75))]})]
    assert rig.run(straggler_pct=30, spare_nodes=1, restarts_in_job=3) == 0
    assert rig.names()[-1] == "requeue" and "nodes_lost" not in rig.names()


# ---- one cause per fault: a node lost, seen first as a hang -------------------------------------

# n2 dies at 3 s: rank 1 there beats no more, and rank 0 on n1 waits for it in a collective, so no
# rank beats either: with a hang timeout of 20 s the hang verdict comes before anything else does.
DIES_SEEN_AS_A_HANG = Plan([JOINS, SAVES, (2, beats(0, 4, "n1", 100)), (2, beats(1, 4, "n2", 200)), (3, dies("n2"))])


@pytest.fixture
def rig_on_wall(rig, monkeypatch) -> Rig:
    """The rig, its events stamped with its fake wall clock (heartbeats are): goodput's
    costs then follow the plan, not how fast this machine runs it; no py-spy."""
    from types import SimpleNamespace
    monkeypatch.setattr("slurmtrain.events.time", SimpleNamespace(time=rig.clock.wall))
    monkeypatch.setattr("slurmtrain.job.hangs.find_py_spy", lambda: None)
    return rig


def faults_said(rig: Rig) -> tuple[list[tuple[str, str]], list[str]]:
    """(kind, detail) of each fault in goodput, and the lines `status` prints for them."""
    from slurmtrain.cli.runs import _goodput_rows
    from slurmtrain.runs import goodput
    report = goodput.of_events(events.read(rig.run_dir)).to_json()
    lines = [text for _, text in _goodput_rows(report)[1:]]
    return [(f["kind"], f["detail"]) for f in report["faults"]], lines


FINISHES_AT_5 = [JOINS, (2, beats(0, 9, "n1", 100)), (4, beats(0, 10, "n1", 100)), (5, emit("finished", step=10))]


def test_a_program_that_finished_and_tears_down_slowly_is_no_hang(rig_on_wall):
    """The last beat at 4 s, `finished` at 5 s, the exit at 40 s (a last save of the model,
    the process group closing on a busy machine): 36 s without a beat is no hang for a
    program that said it finished."""
    rig = rig_on_wall
    rig.task = Plan(FINISHES_AT_5 + [(40, exits(0))])
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert rig.names() == ["started", "first_step", "finished"]  # the supervisor's
    assert rig.step.sent == [] and rig.summary().startswith("finished")


def test_a_program_that_finished_and_never_exits_is_a_hang_at_exit_and_the_run_completes(rig_on_wall):
    """Still there hangs.BUSY_S after its `finished`: a hang (its stacks tell where the exit
    waits), the launch is ended, and the run is complete: the program said so."""
    rig = rig_on_wall
    rig.task = Plan(FINISHES_AT_5)
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert rig.names() == ["started", "first_step", "hang", "finished"]
    hang = rig.event("hang")
    assert hang["seconds"] >= 600 - 4 and hang["time"] - rig.event("first_step")["time"] >= 600, hang
    assert rig.events()[-1]["launch_exit"] == 143 and "relaunched" not in rig.names()


def test_a_node_that_died_seen_first_as_a_hang_is_a_node_lost_in_the_events_status_and_goodput(rig_on_wall):
    rig = rig_on_wall
    on_three_nodes(rig)
    rig.task = [DIES_SEEN_AS_A_HANG, FINISHES_ON_N1_N3]
    assert rig.run(restarts_in_job=3, hang_timeout=20, spare_nodes=1) == 0
    assert rig.names() == ["started", "first_step", "hang", "nodes_lost", "relaunched", "finished"]  # hang first
    assert [e["launch"] for e in rig.events()] == [0, 1, 1, 1, 2, 2]  # `relaunched` opens the next launch
    # ... and the readers' cut (the outcome's, goodput's) is the supervisor's numbering
    from slurmtrain import eventlog
    chunks = eventlog.by_launch(events.read(rig.run_dir))
    assert [sorted({e["launch"] for e in chunk if "launch" in e} - {0}) for chunk in chunks] == [[1], [2]]
    for name in ("nodes_lost", "relaunched"):
        assert (rig.event(name)["cause"], rig.event(name)["seen_as"]) == ("node lost", "hang"), rig.event(name)
    assert rig.ledger() == [("n2", "node_failure")]
    assert "node(s) n2 lost (seen first as a hang); going on in this allocation on n1 n3" in rig.said()
    kinds, lines = faults_said(rig)
    assert [k for k, _ in kinds] == ["node lost"], kinds
    assert kinds[0][1].startswith("node(s) n2 lost; in their place: n3; seen first as a hang (no progress for 2")
    [line] = lines
    assert " node lost (in the job): node(s) n2 lost; in their place: n3; seen first as a hang" in line, line


def test_a_hang_whose_nodes_all_answer_is_still_a_hang(rig_on_wall):
    """The other order's check: the same hang with n2 alive is the hang it looks like."""
    rig = rig_on_wall
    rig.task = [HANGS_ON_N2, RESUMES_AND_FINISHES]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert rig.event("relaunched")["cause"] == "hang" and "seen_as" not in rig.event("relaunched")
    kinds, lines = faults_said(rig)
    assert [k for k, _ in kinds] == ["hang"] and " hang (in the job): no progress for " in lines[0], lines


def test_a_node_left_out_for_hanging_twice_is_a_hang_that_names_it(rig_on_wall):
    """Alive, named twice: the second fault is the hang it was; goodput says the node went."""
    rig = rig_on_wall
    on_three_nodes(rig)
    # Started again from the checkpoint of step 5, it hangs past it (at step 4 would be a
    # launch that did not resume: resumed_behind, a fault of its own).
    again = Plan([JOINS, (2, beats(0, 6, "n1", 100)), (2, beats(1, 6, "n2", 200)), (6, beats(0, 7, "n1", 100))])
    rig.task = [HANGS_ON_N2, again, FINISHES_ON_N1_N3]
    assert rig.run(restarts_in_job=3, hang_timeout=20, spare_nodes=1) == 0
    assert [e["cause"] for e in rig.events() if e["event"] == "relaunched"] == ["hang", "hang"]
    assert "seen_as" not in rig.event("nodes_lost")
    kinds, lines = faults_said(rig)
    assert [k for k, _ in kinds] == ["hang", "hang"], kinds
    assert kinds[1][1].endswith("; node(s) n2 left out, in their place: n3"), kinds


def test_a_node_that_died_seen_first_as_a_hang_with_no_spare_requeues_as_a_node_lost(rig_on_wall):
    rig = rig_on_wall
    rig.task = [DIES_SEEN_AS_A_HANG]
    assert rig.run(restarts_in_job=3, hang_timeout=20) == 0
    assert rig.names() == ["started", "first_step", "hang", "nodes_lost", "requeue"]
    assert (rig.event("requeue")["cause"], rig.event("requeue")["seen_as"]) == ("node lost", "hang")
    assert rig.summary() == "node(s) n2 lost (seen first as a hang); requeued without n2, exit status 0"
    from slurmtrain.runs import classify
    outcome = classify.classify(rig.run_dir)
    assert outcome.kind == classify.NODE_FAILURE and "seen first as a hang" in outcome.detail, outcome
    kinds, lines = faults_said(rig)
    assert [k for k, _ in kinds] == ["node lost"], kinds
    assert " node lost (ended the start): node(s) n2 lost, no spare left; seen first as a hang (no progress for 2" in lines[0], lines


def test_node_memory_knows_its_newest_step(tmp_path, monkeypatch):
    from slurmtrain import nodememory
    monkeypatch.setenv("SLURMTRAIN_MEMORY_DIR", str(tmp_path))
    assert nodememory.newest_step("n1") is None
    for step, whole in ((50, True), (55, True), (60, False)):  # 60: its write had not finished
        folder = tmp_path / "n1" / f"step_{step}-w2n2"
        folder.mkdir(parents=True)
        (folder / ("rank0.pt" if whole else ".rank0.123")).write_bytes(b"x")
    assert nodememory.newest_step("n1") == 55


def test_the_clean_end_knows_this_nodes_folders_of_the_jobs_earlier_starts(monkeypatch):
    """A start that was requeued left its copies on the node the run then completed on."""
    from slurmtrain import nodememory
    env = {"SLURM_JOB_ID": "1509", "SLURM_RESTART_COUNT": "2"}
    assert nodememory.earlier_starts("stnode3", env) == [nodememory.ROOT / "1509-0" / "stnode3",
                                                          nodememory.ROOT / "1509-1" / "stnode3"]
    assert nodememory.earlier_starts("stnode3", {**env, "SLURMTRAIN_MEMORY_DIR": "/tmp/x"}) == []
