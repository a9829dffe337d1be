"""What the supervisor does when nodes fail or lag inside the job: a mixin of
:class:`~slurmtrain.job.supervisor.Supervisor`, kept apart so that the loop (supervisor.py)
reads on its own. It uses the supervisor's pool of nodes (nodes.py), heartbeats (hangs.py),
Slurm, events and ledger, and its ``requeue_without`` when the job cannot go on here.

* :meth:`NodeFaults.lost_nodes` after a launch failed by itself: the probe of its nodes,
  and the nodes named twice;
* :meth:`NodeFaults.check_stuck` while srun waits for a dead node after a task failed;
* :meth:`NodeFaults.check_stragglers` and :meth:`NodeFaults.replaced`: a straggler named,
  and put out of the launch at a checkpoint when a spare is idle.
"""

from __future__ import annotations

from . import decide
from . import nodes as nodes_mod
from ..slurmtext import SRUN_NODE_FAILURE, SRUN_TASK_ERROR
from ..eventlog import Ev

STUCK_S = 15           # srun still runs this long after a task failed: probe the launch's nodes for a dead one


class NodeFaults:
    def check_stuck(self) -> bool:
        """True when a task failed STUCK_S ago, srun still waits, and a probe finds a node of
        the launch dead: srun waits for a dead node's tasks until Slurm marks it down
        (SlurmdTimeout, minutes), its peers have failed already."""
        if self.failed_at is None:
            if self.first_failure(self.log_mark) is None:
                return False
            self.failed_at = self.clock.now()
        if self.dead_seen or self.failed_at < 0 or self.clock.now() < self.failed_at + STUCK_S:
            return False
        self.failed_at = -1.0  # probed once per launch
        self.dead_seen = nodes_mod.dead(self.slurm, self.pool.active, suspect=True)
        if self.dead_seen:
            self.say(f"slurmtrain: a task failed {STUCK_S} s ago and srun still waits: node(s) "
                     f"{' '.join(self.dead_seen)} do not answer; ending the launch")
        return bool(self.dead_seen)

    def check_stragglers(self) -> None:
        """Name a node whose ranks compute slower than the others' (stragglers.py): the
        batch log, a `straggler` event, the bad-node ledger; with an idle spare, the launch
        is stopped at a checkpoint and started again with the spare in its place."""
        for s in self.stragglers.check(self.hangs.beats, self.clock.wall()):
            self.say(f"slurmtrain: straggler: {s.node} computes {s.pct:.0f}% slower than the other nodes "
                     f"({s.compute_ms:.1f} ms against {s.others_ms:.1f} ms for the same work)")
            self.event(Ev.STRAGGLER, node=s.node, compute_ms=round(s.compute_ms, 2), others_ms=round(s.others_ms, 2),
                       pct=round(s.pct))
            self.ledger_add(s.node, "straggler", f"computed {s.pct:.0f}% slower than the other nodes of job "
                            f"{self.job.ref}")
            if self.pool.idle and not self.stopping and s.node in self.pool.active:
                self.say(f"slurmtrain: stopping at a checkpoint to put spare {self.pool.idle[0]} in {s.node}'s place")
                self.replacing, self.stopping, self.stop_at = s.node, True, self.clock.now()
                self.stop_file.touch()
                if self.step is not None:
                    self.step.send(self.cfg.stop_signal)

    def replaced(self, facts: decide.Facts) -> bool:
        """After the stop that replaces a straggler: True when the spare takes its place and
        the next launch starts (from the checkpoint the stop saved, or, when the stop had to
        be forced, from the newest there is, as after a crash); False when the program
        finished, or Slurm ended the job meanwhile (a cancel, a requeue, a preemption, whose
        SIGTERM reached only the tasks): decide as after any launch."""
        node, self.replacing = self.replacing, None
        if facts.program_finished or facts.cancelled or facts.slurm_requeued or self.slurm.preempted():
            return False
        spares = self.pool.leave_out([node])
        self.event(Ev.NODES_LOST, nodes=node, spares=" ".join(spares) or "none", left=len(self.pool.idle),
                   why="straggler")
        self.event(Ev.RELAUNCHED, attempt=0, exit_code=facts.status, why="straggler", launch=self.launches + 1,
                   **({"last_progress": round(self.hangs.last, 3)} if self.hangs.last else {}))
        self.say(f"slurmtrain: {node} left out (a straggler); starting again in this allocation on "
                 f"{' '.join(self.pool.active)}")
        self.stop_file.unlink(missing_ok=True)
        self.stopping, self.stop_at, self.term_at, self.killed = False, None, None, False
        self.clear_marks()
        return True

    def lost_nodes(self, blame: bool) -> tuple[list[str], list[str]]:
        """After a launch failed by itself: (its nodes that are dead, those alive that this
        job start has now named twice: the first to fail, the last to report before a hang;
        not when ``blame`` is off: the same training error at the same step is the program's,
        and which node raised it first is chance); each goes to the bad-node ledger."""
        active = self.pool.active
        gone = self.dead_seen or nodes_mod.dead(self.slurm, active)
        named = self.hang_nodes if self.hung else [n for n in [self.first_failure(self.log_mark)] if n]
        # A hang that names every node (ranks in lockstep beat within the same second) says nothing of one.
        named = named if blame and not set(active) <= set(named) else []
        twice = [n for n in self.pool.blame([n for n in named if n in active]) if n not in gone]
        for node in gone:
            self.ledger_add(node, "node_failure", f"did not answer after a failed launch of job {self.job.ref} "
                            "(dead, or Slurm holds it down)")
        for node in twice:
            what = "hung" if self.hung else "failed first"
            self.ledger_add(node, "in_job", f"its ranks {what} in {nodes_mod.BLAME_LIMIT} launches of job "
                            f"{self.job.ref}")
        return sorted(gone), sorted(set(twice))

    def first_failure(self, since: int) -> str | None:
        """The node of srun's first task error in the batch log after byte ``since``."""
        if self.batch_log is None:
            return None
        try:
            with open(self.batch_log, "rb") as f:
                f.seek(since)
                found = SRUN_TASK_ERROR.search(f.read().decode(errors="replace"))
        except OSError:
            return None
        return found["node"] if found else None

    def srun_node_failures(self, since: int) -> list[str]:
        """The nodes srun said failed ("srun: error: Node failure on <node>") after byte ``since``."""
        if self.batch_log is None:
            return []
        try:
            with open(self.batch_log, "rb") as f:
                f.seek(since)
                return sorted(set(SRUN_NODE_FAILURE.findall(f.read().decode(errors="replace"))))
        except OSError:
            return []

    def go_on_without(self, lost: list[str], relaunches: int, cause: dict[str, str]) -> None:
        """Leave ``lost`` out; the spares take their place. Without enough spares, or with no
        in-job restart left, requeue the job without them (End). ``cause``: what ended the
        launch (decide.launch_fault), on the events."""
        names = " ".join(lost)
        seen = " (seen first as a hang)" if cause.get("seen_as") else ""
        if self.pool.can_run_without(lost) and relaunches < self.cfg.restarts_in_job:
            spares = self.pool.leave_out(lost)
            self.say(f"slurmtrain: node(s) {names} lost{seen}; going on in this allocation on "
                     f"{' '.join(self.pool.active)}" + (f" (spare {' '.join(spares)} in their place)" if spares else ""))
            self.event(Ev.NODES_LOST, nodes=names, spares=" ".join(spares) or "none", left=len(self.pool.idle), **cause)
            return
        self.event(Ev.NODES_LOST, nodes=names, spares="none", left=len(self.pool.idle), **cause)
        self.requeue_without(lost, f"node(s) {names} lost{seen}", "node", cause)
