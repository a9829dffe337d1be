"""Asking Slurm to requeue the job: plainly, or with nodes left out. The decisions between
the steps are decide's (after_requeue_excluding, after_requeue); here are the commands."""

from __future__ import annotations

from typing import Callable

from .. import eventlog, events, ledger, slurmversion
from ..eventlog import Ev
from .config import Config, Job
from . import decide
from .decide import Over
from .record import Record
from .slurm import Slurm

Retry = Callable[..., object]
# How long a held requeue waits for Slurm to take its ExcNodeList before releasing the job
# without it. Slurm SIGKILLs the supervisor KillWait (often 30 s) after the requeue's
# SIGTERM: a job never released would pend for ever. A job that lost a node (spares,
# --no-kill) is being resized, and Slurm refuses its updates, 5 s each, until the requeue
# is through.
EXCLUDE_S = 12


class Requeue:
    def __init__(self, cfg: Config, job: Job, slurm: Slurm, record: Record, retry: Retry, log_mark: Callable[[], int],
                 now: Callable[[], float], allocated: Callable[[], int],
                 last_progress: Callable[[], float | None] = lambda: None):
        self.cfg, self.job, self.slurm, self.record, self.retry, self.now = cfg, job, slurm, record, retry, now
        self.last_progress = last_progress  # the launch's last heartbeat progress (hangs.py), None before any
        self.allocated = allocated       # how many nodes this start was given: a requeue asks for them again
        self.log_mark = log_mark         # where the launch's part of the batch log begins
        self.down_nodes: list[str] = []  # the job's nodes Slurm held down when it requeued the job
        self.said = False                # ... and the `requeued_by_slurm` event is written
        self.by = ""                     # ... its `by`: who requeued the job

    def counted(self) -> int:
        """The requeues so far that count toward resilience.max_requeues: Slurm's restart
        count less the requeues after a start that moved the run on (eventlog.free_requeues)."""
        evs = events.read(self.cfg.run_dir)
        return self.job.restarts - eventlog.free_requeues(evs, self.job.job_id, self.job.array_task)

    def by_slurm(self, final: bool = False) -> None:
        """Who requeued the job: Slurm after a node failure (a node of the job is down, or srun
        said "Node failure on <node>"), Slurm at the end of a preemption's GraceTime (the launch
        outlived it: slurmstepd's "DUE TO PREEMPTION" line) or someone's `scontrol requeue` (an
        administrator, another program): the event says. No node found at the SIGTERM is asked
        again once the launch has ended (``final``): Slurm may show the node down, and srun name
        it, only later."""
        if self.said:
            return
        self.down_nodes = self.slurm.unhealthy(self.job.nodelist) or self.record.srun_node_failures(self.log_mark())
        if not self.down_nodes and not final:
            return
        self.said = True
        by = self.by = eventlog.BY_NODE_FAILURE if self.down_nodes else \
            eventlog.BY_PREEMPTION if self.record.preempted_kill(self.log_mark()) else \
            eventlog.BY_LIGHTNING if self.record.lightning_requeued() else eventlog.BY_ADMIN
        # Slurm noticed the node SlurmdTimeout after it went quiet: goodput counts that wait
        # as a hang's (nothing trained, nothing noticed), not as steps trained then lost.
        progress = self.last_progress() if self.down_nodes else None
        self.record.event(Ev.REQUEUED_BY_SLURM, by=by, **({"nodes": " ".join(self.down_nodes)} if self.down_nodes
                                                           else {}),
                          **({"last_progress": round(progress, 3)} if progress else {}))

    def note_silent_end(self) -> None:
        """The previous start ended without a word (its batch host died, the supervisor with
        it, or Slurm killed it at the end of a preemption's GraceTime) and Slurm started the
        job again: where Slurm holds some of that start's nodes down, it was a node failure,
        said for that start (before this one's ``started``), naming them, and they go to the
        bad-node ledger; where the batch log has Slurm's preemption kill in that start's part,
        a preemption."""
        if self.job.restarts == 0:
            return
        evs = eventlog.of_task(events.read(self.cfg.run_dir), self.job.array_task)
        starts = [s for s in eventlog.split(evs) if s.started is not None]
        if not starts or eventlog.outcome(starts[-1]).kind != eventlog.RUNNING:
            return  # no earlier start, or it said how it ended
        nodes = str(starts[-1].started.get("nodes") or "").split()
        down = self.slurm.unhealthy(",".join(nodes)) if nodes else []
        if not down:
            # Slurm 22.05 (24.11 at times) kills the script too at the end of a preemption's
            # GraceTime: the "DUE TO PREEMPTION" line in that start's part of the batch log.
            if self.record.preempted_kill(self.record.start_said_at()):
                self.record.event(Ev.REQUEUED_BY_SLURM, by=eventlog.BY_PREEMPTION, silent=True)
            return
        self.record.event(Ev.REQUEUED_BY_SLURM, by=eventlog.BY_NODE_FAILURE, nodes=" ".join(down), silent=True)
        for node in down:
            self.record.ledger_add(node, "node_failure", f"down in Slurm when job {self.job.ref} started again "
                                   "after its previous start ended without a word (its batch host died)")

    def keep_ended(self, code: int, requeued: bool) -> None:
        """At an end for good (exit status ``code``; ``requeued``: Slurm queued the job again
        already): Requeue=0 where Slurm 24.05+ would start the job again
        (decide.forbids_requeue), its version asked only after a preemption."""
        j = self.job
        preempted = eventlog.preempted_in_job(events.read(self.cfg.run_dir), j.job_id, j.array_task)
        if decide.forbids_requeue(code, requeued, preempted) and \
                slurmversion.requeues_preempted(self.retry(3, self.slurm.version)):
            self.slurm.forbid_requeue()

    def completed_before(self) -> bool:
        """An earlier start of this job completed, and Slurm started it again: from 24.05 it
        requeues a job it once preempted when its script ends, even completed (a completed
        job keeps its Requeue: decide.forbids_requeue). Said; this start has nothing to do."""
        j = self.job
        if j.restarts == 0 or not eventlog.completed_in_job(events.read(self.cfg.run_dir), j.job_id, j.array_task):
            return False
        self.record.say(f"slurmtrain: job {j.ref} completed in an earlier start and Slurm started it again (it "
                        "requeues a job it once preempted when its script ends); ending at once (to train on: "
                        "slurmtrain resubmit)")
        return True

    def do_note_requeue(self, final: bool) -> None:
        self.by_slurm(final)

    def do_requeue(self, slurm_does_it: bool) -> Over:
        """The job stopped after a checkpoint: requeue it, without the bad-node ledger's nodes
        when it has any; or leave the requeue to Slurm, which requeues a preempted job itself."""
        bad = ledger.excluded(self.cfg.run_dir.parent, self.cfg.bad_node_hours)
        say = self.record.say
        if slurm_does_it:
            left = (f"; the bad-node ledger's node(s) {','.join(bad)} cannot be left out of Slurm's own requeue "
                    "(Slurm changes a job's node list only while it waits)") if bad else ""
            say(f"slurmtrain: Slurm requeues a preempted job itself when its script ends: leaving the requeue of "
                f"job {self.job.ref} to it{left}")
            return Over(None, eventlog.EXIT_OK)
        bad = self.fitting(bad)[0] if bad else bad
        if bad:
            say(f"slurmtrain: requeueing without the bad-node ledger's node(s) {','.join(bad)}")
            ok, held, why = self.excluding(bad)
            then = decide.after_requeue_excluding(ok, held)
            if then == "done":
                return Over(None, eventlog.EXIT_OK)
            if then == "held":
                say(f"slurmtrain: error: {why}; release it with `scontrol release {self.job.ref}`")
                self.record.event(Ev.REQUEUE_FAILED, message=why)
                return Over("stopped after a checkpoint; requeued but held", eventlog.EXIT_OK)
            say(f"slurmtrain: scontrol requeuehold failed: {why}; requeueing with the job's node list as it is")
        return self.plain()

    def plain(self) -> Over:
        answer = self.slurm.requeue()
        then = decide.after_requeue(answer.ok, answer.ok or self.went_through(), answer.text)
        if then == "done":
            return Over(None, eventlog.EXIT_OK)
        if then == "already":
            self.record.say(f"slurmtrain: job {self.job.ref} was requeued already (by Slurm or someone's "
                            "`scontrol requeue`)")
            self.by_slurm(final=True)
            return Over(None, eventlog.EXIT_OK)
        self.record.say(f"slurmtrain: scontrol requeue failed: {answer.text}; continue the run with "
                        f"`slurmtrain resubmit {self.cfg.run_dir}`")
        self.record.event(Ev.REQUEUE_FAILED, message=answer.text)
        return Over("stopped after a checkpoint; the requeue failed", eventlog.EXIT_OK)

    def do_requeue_without(self, bad: tuple[str, ...], what: str, reason: str, cause: dict[str, str] | None = None) -> Over:
        """Requeue with ``bad`` excluded, unless the requeue limit is reached; ``cause``: what
        ended the launch, when one did (decide.launch_fault)."""
        if self.counted() >= self.cfg.max_requeues:
            self.record.event(Ev.REQUEUE_LIMIT, max_requeues=self.cfg.max_requeues, **(cause or {}))
            return Over(f"{what}; requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT)
        out, waits = self.fitting(list(bad))
        fields = {"reason": reason, "exclude": " ".join(out), **(cause or {}),
                  **({"waits_for": " ".join(waits)} if waits else {})}
        self.record.event(Ev.REQUEUE, **fields)
        self.record.summary(f"{what}; {eventlog.requeued_how(fields)}", 0)
        if not out:  # nothing to leave out: the job's node list as it is
            return self.plain()
        ok, _, why = self.excluding(out)
        if not ok:
            self.record.event(Ev.REQUEUE_FAILED, message=why)
            return Over(f"{what}; the requeue failed: {why}", eventlog.EXIT_FAILED)
        return Over(None, eventlog.EXIT_OK)

    def fitting(self, nodes: list[str]) -> tuple[list[str], list[str]]:
        """(the nodes of ``nodes`` the job can be requeued without, those it waits for). A
        partition of 2 nodes cannot run a job of 2 without one (Slurm would hold it PENDING
        for ever, Reason=BadConstraints): such nodes stay in the job's reach, where Slurm
        starts it once they are back in service (they stay in the bad-node ledger); said in
        the batch log."""
        room = self.slurm.room()
        if room is None:  # Slurm did not say: leave them out, as asked
            return nodes, []
        parts, pool, shown = room
        # The requeued job asks for all it was given again, whatever Slurm shows now: a job
        # with spares (--no-kill) that lost a node shows fewer; one without may too while
        # Slurm ends it on a failed node (it read as a job of 1, and the requeue left out a
        # node it could not start without: held for ever, BadConstraints).
        shrunk = bool(self.cfg.spare_nodes) and shown < self.allocated()
        need = max(shown, self.allocated())
        already = set(self.slurm.excluded() or [])
        others = [n for n in pool if n not in already]
        spare = max(len(others) - need, 0)
        out = [n for n in nodes if n in already or n not in pool] + [n for n in nodes if n in others][:spare]
        waits = [n for n in nodes if n not in out]
        say = self.record.say
        if waits:
            say(f"slurmtrain: not leaving out {','.join(waits)}: partition {parts} has {len(others)} node(s) for a "
                f"job of {need}; the requeued job starts once {eventlog.back_in_service(waits)} (in the bad-node "
                "ledger still)")
        if out and shrunk:
            # Slurm 22.05 takes no change to a job it shrank until the requeue is through,
            # KillWait after it, when the supervisor is gone: a held requeue stayed held.
            say(f"slurmtrain: not leaving out {','.join(out)}: Slurm takes no change to job {self.job.ref} since it "
                "removed a lost node from it; the requeued job may start on them once they are in service (they are "
                "in the bad-node ledger)")
            out = []
        return out, waits

    def excluding(self, nodes: list[str]) -> tuple[bool, bool, str]:
        """Requeue with ``nodes`` added to the job's ExcNodeList: (done, held, why not). Slurm
        changes the list only while the job is pending: hold the requeue (pending at once,
        restart count up), set the list, release. Setting and releasing are retried: both are
        harmless twice, and Slurm's SIGTERM for this very requeue may kill any scontrol then."""
        def ask():
            found = self.slurm.excluded()
            return None if found is None else (found,)
        asked = self.retry(3, ask)  # a busy controller: without the job's own list, the update would drop it
        if not asked:
            self.record.say("slurmtrain: warning: Slurm did not show the job's ExcNodeList; setting it to "
                            f"{','.join(nodes)} (exclusions it had may be lost)")
        excluded = sorted(set(asked[0] if asked else []) | set(nodes))
        held = self.slurm.requeue_hold()
        pending = False
        if not held.ok:
            if "pending execution" in held.text:  # Slurm requeued it already (a node failure)
                pending = True
                self.record.event(Ev.REQUEUED_BY_SLURM)
            elif not self.went_through():
                return False, False, held.text
        until = self.now() + EXCLUDE_S
        if not self.retry(EXCLUDE_S, lambda: self.slurm.set_excluded(excluded).ok, lambda ok: ok or self.now() >= until):
            self.record.say(f"slurmtrain: warning: Slurm refused ExcNodeList={','.join(excluded)} for {EXCLUDE_S} s; "
                            f"releasing the job without it: it may start on {','.join(nodes)} again")
        if pending or self.retry(20, lambda: self.slurm.release().ok):
            return True, True, ""
        return False, True, f"the job is requeued but held: scontrol release {self.job.ref} failed for 20 s"

    def went_through(self) -> bool:
        """Slurm's restart count went up since this start: a requeue happened even though
        the command that asked for it died (Slurm's SIGTERM) or was not answered. A busy
        controller shows it a moment late: asked for up to 5 s."""
        return bool(self.retry(5, lambda: (self.slurm.restarts() or 0) > self.job.restarts))

