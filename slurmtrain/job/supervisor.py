"""The loop: start the task, watch it, take every decision in one place.

One run of the batch step is one *start* of the job (Slurm's restart count says which).
The sequence: refuse a start past the requeue limit; write ``started``; run the
preflight gate if asked; launch; watch (signals, the start-up watchdog, the stop
window's escalation) until the launch ends; then ``decide.after_launch`` says finish,
fail or requeue. Every way out is an :class:`End` carrying the summary line's words.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, NoReturn, Protocol

from .. import arrivals, dependents, eventlog, events, heartbeat, ledger, slurmversion
from . import decide, hangs
from . import nodes as nodes_mod
from . import stragglers
from .faults import NodeFaults
from .slurm import Slurm
from .step import Launch, Step
from ..eventlog import Ev

TERM_GRACE_S = 15      # after the SIGTERM that ends tasks still running past stop_timeout, SIGKILL
TICK_S = 1.0           # the loop's longest sleep: arrival marks and escalations are polled
# How long after the moment Slurm's time-limit warning was due the supervisor stops the run
# itself when none came (Slurm sends it on a 30-second tick, up to that much early).
WARNING_LATE_S = 10


class Clock(Protocol):
    """Time and signals (:class:`signals.Signals`; a controllable one in the tests)."""

    def now(self) -> float: ...
    def wall(self) -> float: ...
    def wait(self, seconds: float) -> None: ...
    def take(self) -> list[int]: ...


@dataclass(frozen=True)
class Config:
    """The knobs the job script passes (the profile's resilience keys)."""

    run_dir: Path
    stop_signal: int
    stop_timeout: int
    max_requeues: int
    restarts_in_job: int
    hang_timeout: int              # 0: derived from the run (hangs.py)
    rendezvous_timeout: int
    requeue_always: bool
    bad_node_hours: float
    preflight: bool
    spare_nodes: int = 0           # slurm.spare_nodes: allocated beyond the run's, idle until a node is lost
    straggler_pct: float = 0       # resilience.straggler_pct (0: off)
    warning_seconds: int = 0       # resilience.signal_seconds: the time-limit warning's lead (0: no own timer)


@dataclass(frozen=True)
class Job:
    """Who this job is, from Slurm's environment."""

    job_id: str
    ref: str                       # how Slurm commands name it: "<array>_<task>" for an array task
    tag: str                       # how file names name it: the job id, or "<array>_<task>"
    restarts: int
    nodelist: str
    array_job_id: str = ""
    array_task: int | None = None
    array_tasks: int | None = None

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "Job":
        job_id, task = env.get("SLURM_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
        if task.isdigit():
            array = env.get("SLURM_ARRAY_JOB_ID", job_id)
            ref = f"{array}_{task}"
            return cls(job_id, ref, ref, int(env.get("SLURM_RESTART_COUNT") or 0), env.get("SLURM_JOB_NODELIST", ""),
                       array, int(task), int(env.get("SLURM_ARRAY_TASK_COUNT") or 0) or None)
        return cls(job_id, job_id, job_id, int(env.get("SLURM_RESTART_COUNT") or 0), env.get("SLURM_JOB_NODELIST", ""))


class End(Exception):
    """This start is over: ``outcome`` for the summary line (None: already printed)."""

    def __init__(self, outcome: str | None, code: int):
        super().__init__(outcome)
        self.outcome, self.code = outcome, code




class Supervisor(NodeFaults):
    def __init__(self, cfg: Config, job: Job, slurm: Slurm, clock: Clock, launch: Launch,
                 out: Callable[[str], None] | None = None, batch_log: Path | None = None):
        self.cfg, self.job, self.slurm, self.clock, self.launch = cfg, job, slurm, clock, launch
        self._out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.run_dir = cfg.run_dir
        self.stop_file = self.run_dir / f".stop-{job.job_id}"
        self.arrived_dir = arrivals.marks_dir(self.run_dir, job.job_id)
        self.batch_log, self.log_start = batch_log, _size(batch_log)
        self.nodes: list[str] = []     # the allocation's
        self.pool = nodes_mod.Pool([])  # ... which of them the launch runs on (spares, nodes left out)
        self.hang_nodes: list[str] = []
        self.failed_at: float | None = None  # when srun reported this launch's first task error
        self.dead_seen: list[str] = []       # ... and the nodes a probe then found dead
        self.log_mark = 0              # the batch log's size when the launch began: its srun lines follow
        self.step: Step | None = None
        self.end_at_start = ""
        self.planned_end = ""          # the end a time-limit warning is expected before (check_warning_due)
        # What the signals said; set only by handle_signal, read by the decisions.
        self.stopping = False
        self.stop_at: float | None = None
        self.term_at: float | None = None
        self.killed = False
        self.slurm_requeued = False
        self.down_nodes: list[str] = []  # the job's nodes Slurm held down when it requeued the job
        self.requeue_said = False        # ... and the `requeued_by_slurm` event is written
        self.cancelled = False
        self.requeuing = False         # our own requeue is under way: its SIGTERM is expected
        self.replacing: str | None = None  # a straggler the supervisor stopped the launch to replace
        self.kept: list[int] = []      # signals taken during a pause, for take_signals
        self.beats_dir = heartbeat.folder(self.run_dir, job.job_id)
        self.hangs = hangs.HangWatch(self.beats_dir, cfg.hang_timeout)
        self.stragglers = stragglers.StragglerWatch(cfg.straggler_pct)
        self.hung = False              # this launch hung: the supervisor ended it
        self.launches = 0

    # ---- the sequence ------------------------------------------------------------------

    def run(self) -> int:
        try:
            self.begin()
            if self.cfg.preflight:
                self.gate()
                self.clear_marks()  # the gate's nodes ran their setup lines too: not the task's arrival
            self.finish(self.launch_until_done())
        except End as end:
            if end.outcome is not None:
                self.summary(end.outcome, end.code)
            return end.code

    def begin(self) -> None:
        j, c = self.job, self.cfg
        if j.restarts > c.max_requeues:
            self.say(f"slurmtrain: requeue limit reached ({j.restarts} requeues, max_requeues={c.max_requeues}); "
                     "not starting again")
            self.event(Ev.REQUEUE_LIMIT, max_requeues=c.max_requeues)
            raise End("not started again: requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT)
        self.nodes = self.retry(3, lambda: self.slurm.hostnames(j.nodelist)) or []
        if not self.nodes:
            raise End(f"failed: scontrol could not expand the node list {j.nodelist!r}", eventlog.EXIT_FAILED)
        self.pool = nodes_mod.Pool(list(self.nodes), c.spare_nodes)
        self.event(Ev.STARTED, nodes=" ".join(self.nodes), **({"array_tasks": j.array_tasks} if j.array_tasks else {}),
                   **({"spares": " ".join(self.pool.idle)} if self.pool.idle else {}))
        if j.restarts > 0:
            self.event(Ev.RESTARTED)
        self.stop_file.unlink(missing_ok=True)
        self.clear_marks()
        # Asked again if Slurm does not answer: without it every time-limit SIGTERM would read as a cancel.
        self.end_at_start = str(self.retry(3, self.slurm.end_time) or "")
        self.planned_end = self.end_at_start
        self.say(f"slurmtrain: job {j.ref} on {' '.join(self.nodes)}; run directory {self.run_dir}: each node's "
                 f"output in logs/{j.tag}-<node>.out, events in events.jsonl")

    def watch(self, step: Step) -> int:
        """Until the launch ends: signals, the start-up watchdog, the stop window."""
        self.step = step
        if self.stopping:  # a stop came before the launch (during the gate): pass it on
            step.send(self.cfg.stop_signal)
        deadline = self.clock.now() + self.cfg.rendezvous_timeout
        joined = False
        while True:
            self.take_signals()
            status = step.poll()
            if not joined:
                joined = self.check_start(status, deadline)
            if status is not None:
                return status
            self.escalate()
            if joined and not self.stopping and (self.check_hang() or self.check_stuck()):
                self.end_launch()
                return step.poll()
            if joined:
                self.check_stragglers()
            if not self.stopping:
                self.check_warning_due()
            self.clock.wait(TICK_S)

    def launch_until_done(self) -> decide.Facts:
        """Launch; after a failure of the program that followed a new checkpoint, launch again
        in this allocation (resilience.restarts_in_job): no queue, no new job start."""
        relaunches = 0
        while True:
            mark = len(events.read(self.run_dir))  # this launch's events are the ones after it
            self.launches += 1
            self.hung = False
            self.hangs.launch()
            self.log_mark, self.failed_at, self.dead_seen = _size(self.batch_log), None, []
            facts = self.facts(self.watch(self.launch.start_task(self.pool.active, overlap=bool(self.pool.left_out))))
            mine = eventlog.of_task(events.read(self.run_dir)[mark:], self.job.array_task)
            progressed = any(e.get("event") == eventlog.Ev.CHECKPOINT_SAVED for e in mine)
            if self.replacing is not None:
                if not self.replaced(facts):
                    return facts
                continue
            repeated = self.repeated_error(mine)
            dead, twice = self.lost_nodes(blame=not repeated) if decide.failed_by_itself(facts) else ([], [])
            lost, cause = sorted(set(dead) | set(twice)), decide.launch_fault(self.hung, dead)
            if lost:
                self.go_on_without(lost, relaunches, cause)  # or End: requeued without them
            elif not decide.relaunch(facts, progressed, repeated, relaunches, self.cfg.restarts_in_job):
                return facts
            relaunches += 1
            why = f"as node(s) {' '.join(lost)} were lost" if lost else "after a new checkpoint"
            self.say(f"slurmtrain: the program failed (exit status {facts.status}) {why}; starting it again in "
                     f"this allocation on {' '.join(self.pool.active)} ({relaunches} of {self.cfg.restarts_in_job})")
            last = {"last_progress": round(self.hangs.last, 3)} if self.hangs.last else {}
            self.event(Ev.RELAUNCHED, attempt=relaunches, exit_code=facts.status, **last, launch=self.launches + 1,
                       **({"why": "nodes lost"} if lost else {}), **cause)
            self.clear_marks()

    def repeated_error(self, mine: list[dict]) -> bool:
        """This launch's training error is one an earlier launch of this start had, at the same step."""
        errors = [e for e in mine if e.get("event") == eventlog.Ev.TRAIN_ERROR]
        if not errors:
            return False
        earlier = eventlog.since_start(eventlog.of_task(events.read(self.run_dir), self.job.array_task))
        key = (errors[-1].get("step"), errors[-1].get("error"))
        return sum(1 for e in earlier if e.get("event") == eventlog.Ev.TRAIN_ERROR
                   and (e.get("step"), e.get("error")) == key) > 1

    def facts(self, status: int) -> decide.Facts:
        """What is known once the launch ended with ``status``."""
        if self.slurm_requeued:
            self.slurm_requeued_by(final=True)
        evs, task = events.read(self.run_dir), self.job.array_task
        finished, stop = eventlog.finished_since_start(evs, task), self.stop_file.exists()
        # Asked of Slurm only where it decides: a failure that no signal explains.
        ask = status != 0 and not (stop or finished or self.cancelled or self.slurm_requeued)
        return decide.Facts(
            status=status, stop_requested=stop, program_finished=finished, saved=eventlog.saved_in_run(evs, task),
            slurm_requeued=self.slurm_requeued, cancelled=self.cancelled,
            preempted=ask and bool(self.retry(3, self.slurm.preempted, lambda v: v is not None)),
            restarts=self.job.restarts, max_requeues=self.cfg.max_requeues, requeue_always=self.cfg.requeue_always,
            hung=self.hung, down_nodes=tuple(self.down_nodes))

    def finish(self, facts: decide.Facts) -> NoReturn:
        """The launch is over: decide, act, and end this start (End)."""
        v = decide.after_launch(facts)
        for name, fields in v.events:
            self.event(name, **fields)
        if v.say:
            self.say(v.say)
        if v.action == "node_failure":
            for node in self.down_nodes:
                self.ledger_add(node, "node_failure", f"Slurm requeued job {self.job.ref} after a node failure; "
                                "the node was down or not responding")
        if v.action != "requeue":
            if facts.preempted and self.slurm_requeues_preempted():
                self.slurm.forbid_requeue()  # else Slurm starts the job again after this end
            if decide.ends_uncompleted(v):
                self.tell_dependents(v.outcome)
            raise End(v.outcome, v.code)
        self.summary(v.outcome, v.code)  # before the requeue: Slurm ends this process soon after it
        if facts.preempted and self.slurm_requeues_preempted():
            self.leave_the_requeue_to_slurm()
        else:
            self.requeue()
        raise End(None, eventlog.EXIT_OK)

    def tell_dependents(self, outcome: str) -> None:
        """Runs queued to start after this one completed (a chain) never will: say so in
        each (Slurm cancels their jobs itself). A sweep's point answers for its sweep."""
        manifest = self.run_dir / "manifest.json"
        upstream = self.run_dir
        try:
            upstream = Path(json.loads(manifest.read_text()).get("sweep_dir") or self.run_dir)
        except (OSError, ValueError):
            pass
        told = dependents.never(upstream, self.job.ref, outcome)
        if told:
            self.say(f"slurmtrain: {', '.join(told)} waited for this run to complete; "
                     "Slurm cancels them (dependency never satisfied)")

    def slurm_requeues_preempted(self) -> bool:
        """The controller requeues a preempted job itself when this script ends (Slurm 24.05+):
        a requeue of ours as well would start the job once more after it finished."""
        return slurmversion.requeues_preempted(self.retry(3, self.slurm.version))

    def leave_the_requeue_to_slurm(self) -> None:
        bad = ledger.excluded(self.run_dir.parent, self.cfg.bad_node_hours)
        left = (f"; the bad-node ledger's node(s) {','.join(bad)} cannot be left out of Slurm's own requeue "
                "(Slurm changes a job's node list only while it waits)") if bad else ""
        self.say(f"slurmtrain: Slurm requeues a preempted job itself when its script ends: leaving the requeue of "
                 f"job {self.job.ref} to it{left}")

    # ---- signals -----------------------------------------------------------------------

    def take_signals(self) -> None:
        got, self.kept = self.kept + self.clock.take(), []
        for signum in got:
            self.handle_signal(signum)

    def handle_signal(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return  # a child ended (srun, or a Slurm command): it only woke the loop
        if signum == signal.SIGTERM:
            if self.requeuing:
                return  # Slurm ends the job for our own requeue: expected
            if self.slurm_requeued or self.cancelled:
                return
            cause = decide.term_cause(self.slurm.restarts(), self.job.restarts, self.end_at_start,
                                      self.slurm.end_time())
            if self.stopping and cause == decide.TIME_LIMIT and self.replacing is None:
                return  # the time limit came during the stop window: the stop goes on
            if cause == decide.REQUEUED:
                self.slurm_requeued = True
                self.slurm_requeued_by()
                return
            if cause == decide.CANCEL:
                self.cancelled = True
                self.event(Ev.CANCELLED)
                return
        elif self.stopping and self.replacing is None:
            return
        self.replacing = None  # a stop of Slurm's during the supervisor's own: it is Slurm's now
        self.request_stop(signal.Signals(signum).name.removeprefix("SIG"))

    def check_warning_due(self) -> None:
        """Slurm's time-limit warning (``--signal=B:<stop>@warning_seconds``) is WARNING_LATE_S
        overdue: stop as if it had come. Slurm 24.11 on the sandbox once sent none, and the
        job ran into its limit unwarned and unsaved. The end is asked again before acting: a
        limit raised meanwhile (``scontrol update TimeLimit``) moves it."""
        end = _epoch(self.planned_end)
        if not self.cfg.warning_seconds or end is None:
            return
        # Not past the end either: an end already behind is no time limit to warn of (a clock
        # off, a stand-in Slurm); Slurm's own TERM comes then.
        if not end - self.cfg.warning_seconds + WARNING_LATE_S <= self.clock.wall() < end:
            return
        now_end = str(self.slurm.end_time() or "")
        if now_end and now_end != self.planned_end:
            self.planned_end = now_end
            return
        self.planned_end = ""  # once
        name = signal.Signals(self.cfg.stop_signal).name.removeprefix("SIG")
        self.say(f"slurmtrain: Slurm's time-limit warning (SIG{name} {self.cfg.warning_seconds} s before the end "
                 f"at {now_end or end}) has not come; stopping as if it had")
        self.request_stop(name)

    def slurm_requeued_by(self, final: bool = False) -> None:
        """Who requeued the job: Slurm after a node failure (a node of the job is down, or srun
        said "Node failure on <node>") or someone's `scontrol requeue` (an administrator, another
        program): the event says. No node found at the SIGTERM is asked again once the launch
        has ended (``final``): Slurm may show the node down, and srun name it, only later."""
        if self.requeue_said:
            return
        self.down_nodes = self.slurm.unhealthy(self.job.nodelist) or self.srun_node_failures(self.log_mark)
        if not self.down_nodes and not final:
            return
        self.requeue_said = True
        by = eventlog.BY_NODE_FAILURE if self.down_nodes else eventlog.BY_ADMIN
        self.event(Ev.REQUEUED_BY_SLURM, by=by, **({"nodes": " ".join(self.down_nodes)} if self.down_nodes else {}))

    def request_stop(self, name: str) -> None:
        """Every task is asked to checkpoint and stop; tasks still running after stop_timeout
        are ended (escalate)."""
        self.stopping, self.stop_at = True, self.clock.now()
        self.stop_file.touch()
        # What a stop signal means is decided here, where it came: a SIGTERM reaches this
        # point only at the planned end (handle_signal), the stop signal is the time limit's
        # warning, Slurm's or the supervisor's own.
        self.event(Ev.SIGNAL, signal=name, cause=eventlog.TIME_LIMIT)
        self.say(f"slurmtrain: received SIG{name}; asking every task to checkpoint and stop")
        if self.step is not None:
            self.step.send(self.cfg.stop_signal)  # srun passes it on to every process of its tasks

    def escalate(self) -> None:
        """stop_timeout after the stop: SIGTERM to the tasks (through Slurm: SIGTERM to srun
        itself would SIGKILL them at once); TERM_GRACE_S later, SIGKILL (SIGTERM to srun)."""
        now = self.clock.now()
        if self.stop_at is None or self.killed:
            return
        if self.term_at is None and now >= self.stop_at + self.cfg.stop_timeout:
            self.say(f"slurmtrain: tasks still running {self.cfg.stop_timeout} s after the stop request; "
                     "sending them SIGTERM")
            self.event(Ev.STOP_TIMEOUT, seconds=self.cfg.stop_timeout)
            self.term_at = now
            self.slurm.signal_steps("TERM")
        elif self.term_at is not None and now >= self.term_at + TERM_GRACE_S:
            self.say(f"slurmtrain: tasks still running {TERM_GRACE_S} s after SIGTERM; killing them")
            self.event(Ev.STOP_ESCALATED, seconds=TERM_GRACE_S)
            self.killed = True
            # Not scancel --signal=KILL: Slurm takes that as cancelling the whole job.
            self.step.send(signal.SIGTERM)

    # ---- start-up ----------------------------------------------------------------------

    def check_start(self, status: int | None, deadline: float) -> bool:
        """True once every node ran its setup lines. A failed setup line, a launch that
        ended with nodes missing, or the deadline ends this start (exit 4)."""
        missing = [n for n in self.pool.active if n not in arrivals.arrived(self.arrived_dir)]
        if not missing:
            return True
        failed = arrivals.setup_failures(self.arrived_dir)
        if not failed and status is None and self.clock.now() < deadline:
            return False
        # The failures seen before the launch is ended: a setup line killed by that end (a hung
        # `module load` past the deadline) is the watchdog's timeout, not the line's own failure.
        self.end_launch()
        for f in failed.values():
            self.event(Ev.SETUP_FAILED, node=f.node, line=f.line, exit_code=f.status)
            self.ledger_add(f.node, "setup", f.describe())
        if failed:
            why = "; ".join(f"{f.node}: {f.describe()}" for f in failed.values())
            self.say(f"slurmtrain: error: start-up watchdog: node(s) {' '.join(missing)} did not start: {why}; "
                     "stopping the job")
        else:
            self.say(f"slurmtrain: error: start-up watchdog: node(s) {' '.join(missing)} did not join within "
                     f"{self.cfg.rendezvous_timeout} s (launch.setup, container start or file system on those "
                     "nodes); stopping the job")
        self.event(Ev.WATCHDOG_TIMEOUT, missing=" ".join(missing))
        for node in (n for n in missing if n not in failed):
            self.ledger_add(node, "watchdog", "start-up watchdog: did not join (its setup, container or launcher "
                            f"start failed, or {self.cfg.rendezvous_timeout} s passed)")
        what = f"setup failed on {' '.join(failed)}" if failed else f"node(s) {' '.join(missing)} did not join"
        raise End(f"failed at start-up: {what}", eventlog.EXIT_START_UP)

    def clear_marks(self) -> None:
        """No arrival mark or heartbeat from before: a requeued start keeps its job id, the
        gate's nodes ran the setup lines too, and an in-job restart is a new launch."""
        for folder in (self.arrived_dir, self.beats_dir):
            folder.mkdir(parents=True, exist_ok=True)
            for mark in folder.iterdir():
                mark.unlink(missing_ok=True)

    # ---- hangs -------------------------------------------------------------------------

    def check_hang(self) -> bool:
        """True when the launch hangs (hangs.py): its stacks recorded, the ranks that reported
        last named."""
        seen = self.hangs.first
        hang = self.hangs.check(self.clock.wall())
        if seen is None and self.hangs.first is not None:  # where start-up ends, for goodput
            self.event(Ev.FIRST_STEP, step=self.hangs.first.step, at=round(self.hangs.first.time, 3))
        if hang is None:
            return False
        stacks = hangs.dump_stacks(self.slurm, hang.beats, self.run_dir / "stacks" /
                                   f"{self.job.tag}-{self.job.restarts}-{self.launches}")
        self.say(f"slurmtrain: error: hang: no rank reported progress for {hang.quiet:.0f} s (hang timeout "
                 f"{hang.timeout:.0f} s); the last to report: rank(s) {hang.ranks} on {hang.nodes}; their stacks "
                 f"in {stacks}")
        self.event(Ev.HANG, seconds=round(hang.quiet), ranks=hang.ranks, nodes=hang.nodes, step=hang.step,
                   stacks=str(stacks))
        self.hang_nodes = hang.nodes.split()
        self.hung = True
        return True

    def end_launch(self) -> None:
        """End the launch now and wait for srun (it SIGKILLs its tasks on SIGTERM); an srun
        that outlives TERM_GRACE_S after that gets SIGKILL itself."""
        if self.step is None:
            return
        self.step.send(signal.SIGTERM)
        give_up = self.clock.now() + TERM_GRACE_S
        while self.step.poll() is None:
            if self.clock.now() >= give_up:
                self.step.send(signal.SIGKILL)
                give_up = float("inf")
            self.take_signals()
            self.clock.wait(0.2)

    def gate(self) -> None:
        """resilience.preflight: every node runs its setup lines and doctor's fast checks;
        a node that fails, or answers unlike most nodes, is left out by a requeue."""
        gate_dir = self.run_dir / f".preflight-{self.job.job_id}-{self.job.restarts}"
        gate_dir.mkdir(parents=True, exist_ok=True)
        for old in gate_dir.iterdir():
            old.unlink(missing_ok=True)
        step = self.launch.start_gate(self.nodes, gate_dir)
        deadline = self.clock.now() + self.cfg.rendezvous_timeout
        while step.poll() is None:
            self.take_signals()
            if self.clock.now() >= deadline:
                step.send(signal.SIGTERM)
                deadline = float("inf")
            self.clock.wait(0.5)
        answers = {p.stem: p.read_text(errors="replace") for p in gate_dir.glob("*.ok")}
        bad = decide.gate_rejects(self.nodes, answers)
        if not bad:
            self.event(Ev.PREFLIGHT_PASSED, nodes=" ".join(self.nodes))
            return
        names = " ".join(bad)
        go_on = self.pool.can_run_without(bad)  # the spares take their place
        self.say(f"slurmtrain: error: preflight: node(s) {names} failed the checks (their logs in logs/, answers "
                 f"in {gate_dir}); " + ("going on without them" if go_on else "requeueing without them"))
        self.event(Ev.PREFLIGHT_FAILED, nodes=names)
        for node in bad:
            self.ledger_add(node, "gate", f"preflight gate failed in job {self.job.ref}")
        if go_on:
            spares = self.pool.leave_out(bad)
            self.event(Ev.NODES_LOST, nodes=names, spares=" ".join(spares) or "none", left=len(self.pool.idle))
            return
        self.requeue_without(bad, f"preflight failed on {names}", "preflight")

    def requeue_without(self, bad: list[str], what: str, reason: str, cause: dict[str, str] | None = None) -> NoReturn:
        """Requeue this job with ``bad`` excluded (End), unless the requeue limit is reached;
        ``cause``: what ended the launch, when one did (decide.launch_fault)."""
        names = " ".join(bad)
        if self.job.restarts >= self.cfg.max_requeues:
            self.event(Ev.REQUEUE_LIMIT, max_requeues=self.cfg.max_requeues, **(cause or {}))
            raise End(f"{what}; requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT)
        self.event(Ev.REQUEUE, reason=reason, exclude=names, **(cause or {}))
        self.summary(f"{what}; requeued without them", 0)
        ok, why = self.requeue_excluding(bad)
        if not ok:
            self.event(Ev.REQUEUE_FAILED, message=why)
            raise End(f"{what}; the requeue failed: {why}", eventlog.EXIT_FAILED)
        raise End(None, eventlog.EXIT_OK)

    # ---- requeue -----------------------------------------------------------------------

    def requeue(self) -> None:
        """Requeue this job, without the bad-node ledger's nodes when it has any."""
        bad = ledger.excluded(self.run_dir.parent, self.cfg.bad_node_hours)
        if bad:
            self.say(f"slurmtrain: requeueing without the bad-node ledger's node(s) {','.join(bad)}")
            ok, why = self.requeue_excluding(bad)
            if ok:
                return
            if self.requeuing:  # the hold went through, the release did not: requeued, but held
                self.say(f"slurmtrain: error: {why}; release it with `scontrol release {self.job.ref}`")
                self.event(Ev.REQUEUE_FAILED, message=why)
                raise End("stopped after a checkpoint; requeued but held", eventlog.EXIT_OK)
            self.say(f"slurmtrain: scontrol requeuehold failed: {why}; requeueing with the job's node list as it is")
        self.requeuing = True
        answer = self.slurm.requeue()
        if answer.ok or self.went_through():
            return
        if "pending execution" in answer.text:  # requeued already: Slurm after a node failure, or someone
            self.say(f"slurmtrain: job {self.job.ref} was requeued already (by Slurm or someone's `scontrol requeue`)")
            self.slurm_requeued_by(final=True)
            return
        self.say(f"slurmtrain: scontrol requeue failed: {answer.text}; continue the run with "
                 f"`slurmtrain resubmit {self.run_dir}`")
        self.event(Ev.REQUEUE_FAILED, message=answer.text)
        raise End("stopped after a checkpoint; the requeue failed", eventlog.EXIT_OK)

    def requeue_excluding(self, nodes: list[str]) -> tuple[bool, str]:
        """Requeue with ``nodes`` added to the job's ExcNodeList. Slurm changes the list only
        while the job is pending: hold the requeue (pending at once, restart count up), set
        the list, release. Setting and releasing are retried: both are harmless twice, and
        Slurm's SIGTERM for this very requeue may kill any scontrol that runs then."""
        def ask():
            found = self.slurm.excluded()
            return None if found is None else (found,)
        asked = self.retry(3, ask)  # a busy controller: without the job's own list, the update would drop it
        if not asked:
            self.say("slurmtrain: warning: Slurm did not show the job's ExcNodeList; setting it to "
                     f"{','.join(nodes)} (exclusions it had may be lost)")
        excluded = sorted(set(asked[0] if asked else []) | set(nodes))
        self.requeuing = True
        held = self.slurm.requeue_hold()
        pending = False
        if not held.ok:
            if "pending execution" in held.text:  # Slurm requeued it already (a node failure)
                pending = True
                self.event(Ev.REQUEUED_BY_SLURM)
            elif not self.went_through():
                self.requeuing = False
                return False, held.text
        if not self.retry(20, lambda: self.slurm.set_excluded(excluded).ok):
            self.say(f"slurmtrain: warning: Slurm refused ExcNodeList={','.join(excluded)} for 20 s; the job may "
                     f"start on {','.join(nodes)} again")
        if pending or self.retry(20, lambda: self.slurm.release().ok):
            return True, ""
        return False, f"the job is requeued but held: scontrol release {self.job.ref} failed for 20 s"

    def went_through(self) -> bool:
        """Slurm's restart count went up since this start: a requeue happened even though
        the command that asked for it died (Slurm's SIGTERM) or was not answered. A busy
        controller shows it a moment late: asked for up to 5 s."""
        return bool(self.retry(5, lambda: (self.slurm.restarts() or 0) > self.job.restarts))

    # ---- helpers -----------------------------------------------------------------------

    def retry(self, tries: int, attempt: Callable[[], object], done: Callable[[object], bool] = bool) -> object:
        """``attempt()`` until ``done`` says its value is an answer (default: truthy), ``tries``
        times a second apart; its last value."""
        value: object = None
        for i in range(tries):
            value = attempt()
            if done(value):
                return value
            if i + 1 < tries:
                self.pause(1.0)
        return value

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``. A signal not yet taken ends every ``clock.wait`` at once (Slurm's
        SIGTERM for our own requeue would make 20 tries a second apart 20 tries at once): it
        is kept for ``take_signals``, and acted on there, not here."""
        until = self.clock.now() + seconds
        while self.clock.now() < until:
            self.kept += self.clock.take()
            self.clock.wait(until - self.clock.now())

    def event(self, name: str, **fields) -> None:
        j = self.job
        # `launch`: which launch of this start it belongs to (0: before the first), the one way
        # readers mark launches off; a `relaunched` opens the next and says that one's number.
        ident: dict = {"job_id": j.job_id, "restart": j.restarts, "launch": self.launches}
        if j.array_task is not None:
            ident.update(array_job_id=j.array_job_id, array_task=j.array_task)
        events.append(self.run_dir, name, **{**ident, **fields})

    def ledger_add(self, node: str, source: str, reason: str) -> None:
        ledger.add(self.run_dir.parent, node, reason, run=self.run_dir.name, job_id=self.job.job_id, source=source)

    def say(self, text: str) -> None:
        self._out(text)

    def summary(self, outcome: str, code: int) -> None:
        """The batch log's last line: how this start ended, and the node of the first
        failure (srun's own error line in this start's part of the batch log)."""
        first = self.first_failure(self.log_start)
        node = f", first failure on node {first}" if first else ""
        print(f"slurmtrain: job {self.job.ref}: {outcome}, exit status {code}{node}; run directory {self.run_dir}",
              flush=True)


def _size(path: Path | None) -> int:
    try:
        return os.stat(path).st_size if path is not None else 0
    except OSError:
        return 0


def _epoch(end: str) -> float | None:
    """Seconds since the epoch of squeue's end time ("2026-11-25T02:10:21", local), else None."""
    try:
        return datetime.fromisoformat(end).timestamp()
    except ValueError:
        return None  # "", "N/A", "Unknown": no limit to warn of
