"""What the supervisor does when nodes fail or lag inside the job: the probe and the blame
after a failed launch, a straggler named and replaced, lost nodes left out. Which of these
happens is decided in decide.py; here are the probes, the events and the ledger's lines."""

from __future__ import annotations

import time
from pathlib import Path

from . import decide, hangs
from . import nodes as nodes_mod
from ..eventlog import Ev
from .config import Job
from .record import Record
from .slurm import Slurm


class NodeFaults:
    def __init__(self, slurm: Slurm, job: Job, record: Record, pool: nodes_mod.Pool):
        self.slurm, self.job, self.record, self.pool = slurm, job, record, pool

    def lost(self, dead_seen: tuple[str, ...], named: list[str], hung: bool, blame: bool) -> tuple[list[str], list[str]]:
        """After a launch failed by itself: (its nodes that are dead, those alive that this job
        start has now named twice: ``named``, the first to fail or the last to report before a
        hang, as decide.blamed counts them); each goes to the bad-node ledger."""
        active, why = self.pool.active, {}
        gone = list(dead_seen) or nodes_mod.dead(self.slurm, active, why=why)
        # A node whose ranks wrote the program's own error ran the program to its failure: a
        # probe it did not answer (a machine slow under load) does not make it dead, unless
        # Slurm holds it down. Its error is the failure's cause, and blamed as such below.
        alive = [n for n in gone if not dead_seen and why.get(n) != nodes_mod.HELD_DOWN
                 and self.record.wrote_own_error(n)]
        for node in alive:
            self.record.say(f"slurmtrain: node probe: {node} did not answer ({why.get(node, 'no answer')}), but its "
                            "ranks wrote the program's error there: taken for alive")
        gone = [n for n in gone if n not in alive]
        # A dead node explains the failure: its peers fail first (a connection reset), which
        # is not held against them (a batch host whose ranks failed first as two nodes died
        # in turn was named twice, and left out).
        named = [] if gone else named
        twice = [n for n in self.pool.blame(decide.blamed(named, active, blame)) if n not in gone]
        for node in gone:
            probe = f": {why[node]}" if why.get(node) else ""
            if probe:
                self.record.say(f"slurmtrain: node probe: {node} did not answer{probe}")
            self.record.ledger_add(node, "node_failure", f"did not answer after a failed launch of job {self.job.ref} "
                                   f"(dead, or Slurm holds it down){probe}")
        for node in twice:
            what = "hung" if hung else "failed first"
            self.record.ledger_add(node, "in_job", f"its ranks {what} in {nodes_mod.BLAME_LIMIT} launches of job "
                                   f"{self.job.ref}")
        return sorted(gone), sorted(set(twice))

    def do_report_straggler(self, s, replacing: bool) -> None:
        """Name a node whose ranks compute slower than the others' (stragglers.py): the batch
        log, a `straggler` event, the bad-node ledger; ``replacing``: the launch stops at a
        checkpoint to start again with an idle spare in its place."""
        say = self.record.say
        say(f"slurmtrain: straggler: {s.node} computes {s.pct:.0f}% slower than the other nodes "
            f"({s.compute_ms:.1f} ms against {s.others_ms:.1f} ms for the same work)")
        self.record.event(Ev.STRAGGLER, node=s.node, compute_ms=round(s.compute_ms, 2),
                          others_ms=round(s.others_ms, 2), pct=round(s.pct))
        self.record.ledger_add(s.node, "straggler", f"computed {s.pct:.0f}% slower than the other nodes of job "
                               f"{self.job.ref}")
        if replacing:
            say(f"slurmtrain: stopping at a checkpoint to put spare {self.pool.idle[0]} in {s.node}'s place")

    def hang(self, hang: hangs.Hang, folder: Path) -> list[str]:
        """The launch hangs (hangs.py): its stacks recorded, the ranks that reported last named,
        and of them the ones their stacks tell apart (a rank stopped, or outside the collective
        its peers wait in): their nodes, returned."""
        began = time.monotonic()
        stacks = hangs.dump_stacks(self.slurm, hang.beats, folder, hang.folder)
        # the stacks took time too (10 s for a node that does not answer): the event's
        # `seconds` is the quiet up to it, so goodput's hang ends where its lost steps do not
        quiet = hang.quiet + (time.monotonic() - began)
        odd, why = hangs.odd_ranks(hang.beats, stacks)
        ranks = " ".join(str(b.rank) for b in odd)
        nodes = " ".join(sorted({b.node for b in odd})) or hang.nodes
        named = f"; of them rank(s) {ranks} on {nodes}: {why}" if odd else ""
        self.record.say(f"slurmtrain: error: hang: no rank reported progress for {hang.quiet:.0f} s (hang timeout "
                        f"{hang.timeout:.0f} s); the last to report: rank(s) {hang.ranks} on {hang.nodes}{named}; "
                        f"their stacks in {stacks}")
        self.record.event(Ev.HANG, seconds=round(quiet), ranks=hang.ranks, nodes=hang.nodes, step=hang.step,
                          stacks=str(stacks), **({"stuck_ranks": ranks, "stuck_nodes": nodes, "why": why} if odd
                                                 else {}))
        return nodes.split()

    def replace(self, node: str, status: int, launch_next: int, last: dict) -> None:
        """The stop for the straggler is over: the spare takes its place for the next launch
        (from the checkpoint the stop saved, or, when it had to be forced, the newest there is)."""
        spares = self.pool.leave_out([node])
        self.record.event(Ev.NODES_LOST, nodes=node, spares=" ".join(spares) or "none", left=len(self.pool.idle),
                          why="straggler")
        self.record.event(Ev.RELAUNCHED, attempt=0, exit_code=status, why="straggler", launch=launch_next, **last)
        self.record.say(f"slurmtrain: {node} left out (a straggler); starting again in this allocation on "
                        f"{' '.join(self.pool.active)}")

    def leave_out(self, lost: list[str], cause: dict[str, str], here: bool) -> None:
        """``lost`` leave the launch: the spares take their place (``here``), or the job is
        requeued without them. ``cause``: what ended the launch (decide.launch_fault)."""
        names = " ".join(lost)
        if not here:
            self.record.event(Ev.NODES_LOST, nodes=names, spares="none", left=len(self.pool.idle), **cause)
            return
        spares = self.pool.leave_out(lost)
        seen = " (seen first as a hang)" if cause.get("seen_as") else ""
        self.record.say(f"slurmtrain: node(s) {names} lost{seen}; going on in this allocation on "
                        f"{' '.join(self.pool.active)}" + (f" (spare {' '.join(spares)} in their place)" if spares
                                                           else ""))
        self.record.event(Ev.NODES_LOST, nodes=names, spares=" ".join(spares) or "none", left=len(self.pool.idle),
                          **cause)
