"""The executor of the supervisor's state machine (decide.step): it observes, feeds what it
saw to ``step``, and carries out the actions ``step`` returns, feeding their answers back.

One run of the batch step is one *start* of the job (Slurm's restart count says which). One
loop waits for everything (signals, the step's exit, deadlines) on the clock's wake-up fd;
each round observes in a fixed order: the time, the signals taken, the gate's or the launch's
exit, the arrivals, the heartbeats, the stragglers, and last the deadlines (``Due``). The
phases and what moves them are drawn in docs/supervisor.md.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Callable

from .. import eventlog, events, exits, nodememory, programlog, slurmversion
from ..eventlog import Ev
from . import decide, hangs
from . import nodes as nodes_mod
from . import stragglers
from .config import Clock, Config, Job
from .decide import Phase, Stop
from .faults import NodeFaults
from .record import Record
from .requeue import Requeue
from .startup import StartUp
from .slurm import Slurm
from .step import Launch, Step

TICK_S = 1.0           # the loop's longest sleep: arrival marks and escalations are polled
SRUN_TERMINATED, SRUN_KILLED = 143, 137  # srun's status when its last tasks were ended by SIGTERM, SIGKILL


class Supervisor:
    def __init__(self, cfg: Config, job: Job, slurm: Slurm, clock: Clock, launch: Launch,
                 out: Callable[[str], None] | None = None, batch_log=None):
        self.cfg, self.job, self.slurm, self.clock, self.launch = cfg, job, slurm, clock, launch
        self.state = decide.State(decide.Knobs(_name(cfg.stop_signal), cfg.stop_timeout, cfg.rendezvous_timeout,
                                               cfg.warning_seconds))
        self.record = Record(cfg.run_dir, job, lambda: self.state.launch, out, batch_log)
        self.requeue = Requeue(cfg, job, slurm, self.record, self.retry, lambda: self.log_mark, clock.now,
                               lambda: len(self.nodes), lambda: self.hangs.last)
        self.startup = StartUp(cfg, job, self.record, launch)
        self.clear_marks = self.startup.clear_marks
        self.stop_file = cfg.run_dir / f".stop-{job.job_id}"
        self.hangs = hangs.HangWatch(self.startup.beats_dir, cfg.hang_timeout)
        self.stragglers = stragglers.StragglerWatch(cfg.straggler_pct)
        self.nodes: list[str] = []      # the allocation's
        self.pool = nodes_mod.Pool([])  # ... which of them the launch runs on (spares, nodes left out)
        self.faults = NodeFaults(slurm, job, self.record, self.pool)
        self.step: Step | None = None   # the launch's srun; the gate's while the gate runs
        self.hang_nodes: list[str] = []
        self.unreached = 0              # launches srun could not start on a node, in this job start
        self.log_mark = 0               # the batch log's size when the launch began: its srun lines follow
        self.events_mark = 0            # the run's events before the launch: this launch's follow
        self.behind_checked = False     # this launch's first step was compared with the run's checkpoint
        self.end_at_start = ""
        self.kept: list[int] = []        # signals taken during a pause, for the loop

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> int:
        self.feed(decide.Tick(self.clock.now(), self.clock.wall()))
        self.feed(self.begin())
        while self.state.phase in decide.WATCHING:
            self.round()
        return self.state.code if self.state.code is not None else eventlog.EXIT_FAILED

    def feed(self, o: decide.Observation) -> None:
        self.state, actions = decide.step(self.state, o)
        for a in actions:
            doer = next(d for d in (self, self.startup, self.requeue, self.faults) if hasattr(d, f"do_{a.what}"))
            answer = getattr(doer, f"do_{a.what}")(*a.args)
            if answer is not None:
                self.feed(answer)

    def round(self) -> None:
        self.feed(decide.Tick(self.clock.now(), self.clock.wall()))
        got, self.kept = self.kept + self.clock.take(), []
        for signum in got:
            self.feed(decide.Sig(_name(signum)))
        phase, status = self.state.phase, self.step.poll() if self.step else None
        if phase == Phase.GATE and status is not None:
            self.step = None
            return self.feed(self.startup.gate_answers(self.nodes, self.pool))
        if phase == Phase.JOINING:
            seen = self.startup.arrivals(self.pool.active, status is not None)
            if seen.exited and seen.missing and not seen.failed:  # srun refused, or the nodes? Slurm says
                seen = replace(seen, job_state=self.slurm.state())
            self.feed(seen)
        if status is not None and phase != Phase.GATE:
            return self.feed(decide.Exited(status))
        if self.state.phase == Phase.RUNNING:
            self.watch_running()
        self.feed(decide.Due())
        self.clock.wait({Phase.GATE: 0.5, Phase.ENDING: 0.2}.get(self.state.phase, TICK_S))

    def watch_running(self) -> None:
        """The heartbeats' verdict and the task errors (while no stop is under way), then the
        stragglers."""
        if self.state.stop == Stop.NONE:
            seen = self.hangs.first
            hang = self.hangs.check(self.clock.wall())
            if hang is not None and self.finishing():
                hang = None
            if seen is None and self.hangs.first is not None:  # where start-up ends, for goodput
                self.record.event(Ev.FIRST_STEP, step=self.hangs.first.step, at=round(self.hangs.first.time, 3))
            self.say_if_behind()
            if hang is None and self.state.failed_at is None and self.record.first_failure(self.log_mark):
                self.feed(decide.TaskFailed())
            self.feed(decide.Beats(hang, stepping=self.hangs.first is not None, stopped=self.record.stopped_since(self.events_mark)))
            if self.state.phase != Phase.RUNNING:
                return
        for s in self.stragglers.check(self.hangs.beats, self.clock.wall()):
            self.feed(decide.Lagging(s, bool(self.pool.idle) and s.node in self.pool.active))

    def finishing(self) -> bool:
        """The program said it finished, or in this launch that it stopped after a checkpoint
        (a preemption's SIGTERM reaches the tasks, not the supervisor), less than hangs.BUSY_S
        ago: its ranks tear down (a last save of the model, closing the process group, a
        launcher's shutdown window), which need not beat. Longer than that is a hang at exit,
        recorded as one; the run is complete (or stopped) all the same."""
        evs, task = events.read(self.cfg.run_dir), self.job.array_task
        said = [t for t in (eventlog.finished_at(evs, task), eventlog.stopped_at(evs[self.events_mark:], task))
                if t is not None]
        return bool(said) and self.clock.wall() - max(said) < hangs.BUSY_S

    # ---- the start ---------------------------------------------------------------------

    def begin(self) -> decide.Began | decide.Over:
        j, c = self.job, self.cfg
        if self.requeue.completed_before():
            return decide.Over(None, eventlog.EXIT_OK)
        if (counted := self.requeue.counted()) > c.max_requeues:
            self.say(f"slurmtrain: requeue limit reached ({counted} counted requeues, max_requeues={c.max_requeues}); "
                     "not starting again")
            self.record.event(Ev.REQUEUE_LIMIT, max_requeues=c.max_requeues)
            return decide.Over("not started again: requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT)
        self.nodes = self.retry(3, lambda: self.slurm.hostnames(j.nodelist)) or []
        if not self.nodes:
            return decide.Over(f"failed: scontrol could not expand the node list {j.nodelist!r}", eventlog.EXIT_FAILED)
        self.pool = self.faults.pool = nodes_mod.Pool(list(self.nodes), c.spare_nodes)
        self.requeue.note_silent_end()
        self.record.event(Ev.STARTED, nodes=" ".join(self.nodes),
                          **({"array_tasks": j.array_tasks} if j.array_tasks else {}),
                          **({"spares": " ".join(self.pool.idle)} if self.pool.idle else {}))
        if j.restarts > 0:
            self.record.event(Ev.RESTARTED)
        self.stop_file.unlink(missing_ok=True)
        self.clear_marks()
        # Asked again if Slurm does not answer: without it every time-limit SIGTERM would read as a cancel.
        self.end_at_start = decide.end_at_start(str(self.retry(3, self.slurm.end_time) or ""), self.clock.wall())
        self.say(f"slurmtrain: job {j.ref} on {' '.join(self.nodes)}; run directory {c.run_dir}: each node's "
                 f"output in logs/{j.tag}-<node>.out, events in events.jsonl")
        self.feed(decide.Tick(self.clock.now(), self.clock.wall()))
        return decide.Began(c.preflight, self.end_at_start)

    # ---- the actions decide.step returns -----------------------------------------------

    def do_say(self, text: str) -> None:
        self.say(text)

    def do_event(self, name: str, fields: dict) -> None:
        self.record.event(name, **fields)

    def do_end(self, outcome: str | None, code: int) -> None:
        # This start's copies in node memory (train.memory_steps) are of no use to the next,
        # which is a requeue or nothing; the trainer removes its own when it ends cleanly.
        nodememory.remove_start()
        if outcome is not None:
            self.requeue.keep_ended(code, self.state.slurm_requeued)  # every end for good passes here
            self.record.summary(outcome, code)

    def do_touch_stop_file(self) -> None:
        self.stop_file.touch()

    def do_send_stop(self) -> None:
        self.step.send(self.cfg.stop_signal)  # srun passes it on to every process of its tasks

    def do_send_step(self, name: str) -> None:
        self.step.send(signal.SIGKILL if name == "KILL" else signal.SIGTERM)

    def do_signal_steps(self, name: str) -> None:
        self.slurm.signal_steps(name)

    def do_ask_term_cause(self) -> decide.TermCause:
        return decide.TermCause(decide.term_cause(self.slurm.restarts(), self.job.restarts, self.end_at_start,
                                                  self.slurm.end_time()))

    def do_ask_end_time(self) -> decide.EndTime:
        return decide.EndTime(str(self.slurm.end_time() or ""))

    def do_probe(self) -> decide.Probed:
        return decide.Probed(tuple(nodes_mod.dead(self.slurm, self.pool.active, suspect=True)))

    def do_start_gate(self) -> None:
        self.step = self.startup.start_gate(self.nodes)

    def do_gate_passed(self) -> None:
        self.startup.gate_said(self.nodes, (), True, self.pool)

    def do_gate_failed(self, bad: tuple[str, ...], go_on: bool) -> None:
        self.startup.gate_said(self.nodes, bad, go_on, self.pool)

    def do_start_launch(self) -> None:
        self.events_mark = len(events.read(self.cfg.run_dir))  # this launch's events are the ones after it
        self.behind_checked = False
        self.hangs.launch()
        self.log_mark = self.record.log_size()
        self.record.mark_node_logs(self.pool.active, self.state.launch)
        self.step = self.launch.start_task(self.pool.active, overlap=bool(self.pool.left_out))

    # ---- after the launch --------------------------------------------------------------

    def do_settle(self, status: int) -> decide.Settled | decide.Over:
        """The launch is over: the spare in a straggler's place, lost nodes left out, the
        program started again here after a failure (resilience.restarts_in_job), or the end
        of this start (finish)."""
        facts = self.facts(status)
        last = {"last_progress": round(self.hangs.last, 3), **self.hangs.last_step()} if self.hangs.last else {}
        if self.state.replacing is not None:
            return self.replace_straggler(facts, last)
        return self.after_failure(facts, last)

    def replace_straggler(self, facts: decide.Facts, last: dict) -> decide.Settled | decide.Over:
        """The supervisor stopped the launch to put the spare in a straggler's place."""
        preempted = decide.replacement_goes_on(facts, False) and bool(self.slurm.preempted())  # asked if it decides
        if not decide.replacement_goes_on(facts, preempted):
            return self.finish(facts)
        self.faults.replace(self.state.replacing, facts.status, self.state.launch + 1, last)
        self.stop_file.unlink(missing_ok=True)
        self.clear_marks()
        return decide.Settled("replace")

    def after_failure(self, facts: decide.Facts, last: dict) -> decide.Settled | decide.Over:
        """Lost nodes left out, the program started again here (resilience.restarts_in_job),
        or the end of this start (finish): decide.after_failure, carried out."""
        st = self.state
        every = events.read(self.cfg.run_dir)
        evs, mine = (eventlog.of_task(e, self.job.array_task) for e in (every, every[self.events_mark:]))
        if st.hung:  # ended by the supervisor: srun's first "failure" is its own kill of the tasks
            first, facts = (self.hang_nodes[0] if len(self.hang_nodes) == 1 else None), replace(facts, error=None)
        else:
            first = self.record.first_failure(self.log_mark)
        error = facts.error
        own = None if error is None or programlog.node_fault(error) else error  # the program's, not its node's
        hung_again = st.hung and decide.repeated_hang(mine, evs)
        facts = replace(facts, hung_again=hung_again)
        repeated = decide.repeated_error(mine, eventlog.since_start(evs), own) or hung_again
        blame = not (repeated or facts.stray_kill)
        dead, twice = self.lost_nodes(blame) if decide.failed_by_itself(facts) else ([], [])
        lost, cause = sorted(set(dead) | set(twice)), decide.launch_fault(st.hung, dead)
        covered = bool(lost) and self.pool.can_run_without(lost)
        progressed = decide.progressed(mine, nodememory.newest_step())
        then = decide.after_failure(facts, lost, bool(cause.get("seen_as")), covered, progressed, repeated,
                                    st.relaunches, self.cfg.restarts_in_job)
        if lost:
            self.faults.leave_out(lost, cause, then.action == "relaunch")
        if then.action == "requeue_without":
            return decide.Settled("requeue_without", (tuple(lost), then.words, "node", cause))
        if then.action == "finish":
            spent = decide.spent_budget(facts, progressed, repeated, st.relaunches, self.cfg.restarts_in_job)
            return self.finish(replace(facts, restarts_spent=spent))
        said, fields = decide.relaunch_said(then, facts, first, st.relaunches + 1, self.cfg.restarts_in_job,
                                            self.pool.active)
        self.say(said)
        self.record.event(Ev.RELAUNCHED, **fields, **last, launch=st.launch + 1, **cause)
        self.clear_marks()
        return decide.Settled("relaunch")

    def do_start_up_failed(self, missing: tuple[str, ...],
                           setup_failed: tuple[str, ...]) -> decide.Settled | decide.Over:
        """The launch ended before every node joined. Where srun could not start the tasks on
        a node (its link down a moment, its slurmd restarting) and no setup line failed,
        nothing ran: it is launched again here while resilience.restarts_in_job lasts.
        Else the start-up watchdog's end (StartUp)."""
        active = list(self.pool.active)
        unreached = self.record.launch_failures(self.log_mark, lambda task: self.launch.node_of_task(active, task))
        st, budget = self.state, self.cfg.restarts_in_job
        wait = decide.launch_again_in(bool(unreached), bool(setup_failed), st.relaunches, budget, self.unreached)
        if wait is None:
            return self.startup.do_start_up_failed(missing, setup_failed, unreached)
        n, names = st.relaunches + 1, " ".join(sorted(unreached))
        why = "; ".join(f"{node}: {text}" for node, text in sorted(unreached.items()))
        self.unreached += 1
        self.say(f"slurmtrain: srun could not start the tasks on {names} ({why}); starting the launch again in "
                 f"this allocation in {wait:g} s ({n} of {budget})")
        self.record.event(Ev.RELAUNCHED, attempt=n, launch=st.launch + 1, cause=eventlog.LAUNCH_FAILED, nodes=names)
        self.clear_marks()
        self.pause(wait)
        return decide.Settled("relaunch")

    def lost_nodes(self, blame: bool) -> tuple[list[str], list[str]]:
        named = self.hang_nodes if self.state.hung else [n for n in [self.record.first_failure(self.log_mark)] if n]
        return self.faults.lost(self.state.dead, named, self.state.hung, blame)

    def say_if_behind(self) -> None:
        """The launch's first beat with a step (a beat from a busy thread may carry none) below
        the run's latest checkpoint: the program did not resume from it. Judged once a launch."""
        stepped = [b for b in self.hangs.beats if b.step is not None]
        if self.behind_checked or not stepped:
            return
        self.behind_checked, step = True, min(stepped, key=lambda b: b.time).step
        every = events.read(self.cfg.run_dir)
        before, mine = (eventlog.of_task(e, self.job.array_task) for e in (every[:self.events_mark],
                                                                          every[self.events_mark:]))
        found = decide.resumed_behind(before, mine, step)
        if found is not None:
            self.record.event(Ev.RESUMED_BEHIND, **found[0])
            self.say(found[1])

    def do_record_hang(self, hang: hangs.Hang) -> None:
        self.hang_nodes = self.faults.hang(hang, self.cfg.run_dir / "stacks" /
                                           f"{self.job.tag}-{self.job.restarts}-{self.state.launch}")

    def facts(self, status: int) -> decide.Facts:
        """What is known once the launch ended with ``status``."""
        st = self.state
        if st.slurm_requeued:
            self.requeue.by_slurm(final=True)
        evs, task = events.read(self.cfg.run_dir), self.job.array_task
        finished, stop = eventlog.finished_since_start(evs, task), self.stop_file.exists()
        # Asked of Slurm only where it decides: a failure that no signal explains.
        ask = status != 0 and not (stop or finished or st.cancelled or st.slurm_requeued)
        if status in (SRUN_TERMINATED, SRUN_KILLED):  # srun's own, from ending the other tasks:
            first = self.record.task_exit_code(self.log_mark)  # the failed task's says more
            # ... after a stop, where the stop signal itself killed that task (no handler yet)
            if first is not None and (ask or (stop and exits.signal_of(first) == self.cfg.stop_signal)):
                status = first
        stray = status != 0 and self.record.stray_kill(self.log_mark)  # Slurm's kill: it says so itself
        error = self.record.failure_words(self.record.first_failure(self.log_mark), self.log_mark) \
            if ask and not stray else None
        return decide.Facts(
            status=status, stop_requested=stop, program_finished=finished, saved=eventlog.saved_in_run(evs, task),
            slurm_requeued=st.slurm_requeued, cancelled=st.cancelled,
            preempted=(st.slurm_requeued and self.requeue.by == eventlog.BY_PREEMPTION)
            or (ask and bool(self.retry(3, self.slurm.preempted, lambda v: v is not None))),
            restarts=self.requeue.counted(), max_requeues=self.cfg.max_requeues, requeue_always=self.cfg.requeue_always,
            hung=st.hung, down_nodes=tuple(self.requeue.down_nodes),
            stray_kill=stray, error=error, progressed=eventlog.progressed_since_start(evs, task),
            program_stopped=eventlog.stopped_at(evs[self.events_mark:], task) is not None,
            stop_signal=self.cfg.stop_signal)

    def finish(self, facts: decide.Facts) -> decide.Settled | decide.Over:
        """The end of this start: decide.after_launch's verdict, carried out."""
        v = decide.after_launch(facts)
        for name, fields in v.events:
            self.record.event(name, **fields)
        if v.say:
            self.say(v.say)
        if v.action == "node_failure":
            for node in self.requeue.down_nodes:
                self.record.ledger_add(node, "node_failure", f"Slurm requeued job {self.job.ref} after a node "
                                       "failure; the node was down or not responding")
        srp = facts.preempted and slurmversion.requeues_preempted(self.retry(3, self.slurm.version))
        whose = decide.whose_requeue(v.action, facts.preempted, srp)
        if v.action != "requeue":
            if decide.ends_uncompleted(v):
                self.record.tell_dependents(v.outcome)
            return decide.Over(v.outcome, v.code)
        self.record.summary(v.outcome, v.code)  # before the requeue: Slurm ends this process soon after it
        return decide.Settled("requeue", (whose == "slurm",))

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
        is kept for the loop, and acted on there, not here."""
        until = self.clock.now() + seconds
        while self.clock.now() < until:
            self.kept += self.clock.take()
            self.clock.wait(until - self.clock.now())

    def say(self, text: str) -> None:
        self.record.say(text)


def _name(signum: int) -> str:
    return signal.Signals(signum).name.removeprefix("SIG")
