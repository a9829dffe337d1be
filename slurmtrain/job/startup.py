"""The start of a launch, as the supervisor carries it out: the arrival marks and heartbeats
cleared, the preflight gate (resilience.preflight) and the start-up watchdog's verdict
written down. What the gate's answers and the arrivals mean is decided in decide.py."""

from __future__ import annotations

from .. import arrivals, eventlog, heartbeat
from ..eventlog import Ev
from . import decide
from . import nodes as nodes_mod
from .config import Config, Job
from .record import Record
from .step import Launch, Step


class StartUp:
    def __init__(self, cfg: Config, job: Job, record: Record, launch: Launch):
        self.cfg, self.job, self.record, self.launch = cfg, job, record, launch
        self.arrived_dir = arrivals.marks_dir(cfg.run_dir, job.job_id)
        self.beats_dir = heartbeat.folder(cfg.run_dir, job.job_id)
        self.gate_dir = cfg.run_dir / f".preflight-{job.job_id}-{job.restarts}"

    def clear_marks(self) -> None:
        """No arrival mark or heartbeat from before: a requeued start keeps its job id, the
        gate's nodes ran the setup lines too, and an in-job restart is a new launch."""
        for folder in (self.arrived_dir, self.beats_dir):
            folder.mkdir(parents=True, exist_ok=True)
            for mark in folder.iterdir():
                mark.unlink(missing_ok=True)

    def arrivals(self, active: list[str], exited: bool) -> decide.Arrivals:
        here = arrivals.arrived(self.arrived_dir)
        failed = arrivals.setup_failures(self.arrived_dir)
        return decide.Arrivals(tuple(n for n in active if n not in here), tuple(failed), exited)

    def start_gate(self, nodes: list[str]) -> Step:
        """resilience.preflight: every node runs its setup lines and doctor's fast checks."""
        self.gate_dir.mkdir(parents=True, exist_ok=True)
        for old in self.gate_dir.iterdir():
            old.unlink(missing_ok=True)
        return self.launch.start_gate(nodes, self.gate_dir)

    def gate_answers(self, nodes: list[str], pool: nodes_mod.Pool) -> decide.GateAnswered:
        """A node that failed, or answers unlike most nodes, is left out."""
        answers = {p.stem: p.read_text(errors="replace") for p in self.gate_dir.glob("*.ok")}
        bad = decide.gate_rejects(nodes, answers)
        return decide.GateAnswered(tuple(bad), pool.can_run_without(bad))

    def gate_said(self, nodes: list[str], bad: tuple[str, ...], go_on: bool, pool: nodes_mod.Pool) -> None:
        self.clear_marks()  # the gate's nodes ran their setup lines too: not the task's arrival
        if not bad:
            self.record.event(Ev.PREFLIGHT_PASSED, nodes=" ".join(nodes))
            return
        names = " ".join(bad)
        self.record.say(f"slurmtrain: error: preflight: node(s) {names} failed the checks (their logs in logs/, "
                        f"answers in {self.gate_dir}); " + ("going on without them" if go_on else
                                                            "requeueing without them"))
        self.record.event(Ev.PREFLIGHT_FAILED, nodes=names)
        for node in bad:
            self.record.ledger_add(node, "gate", f"preflight gate failed in job {self.job.ref}")
        if go_on:
            spares = pool.leave_out(list(bad))
            self.record.event(Ev.NODES_LOST, nodes=names, spares=" ".join(spares) or "none", left=len(pool.idle))

    def do_start_up_failed(self, missing: tuple[str, ...], failed_nodes: tuple[str, ...],
                           unreached: dict[str, str] | None = None) -> decide.Over:
        """The start-up watchdog ended the launch: a setup line failed, the launch ended with
        nodes missing (``unreached``: those srun could not start the tasks on, and why), or
        rendezvous_timeout passed. The failures are those seen before the launch was ended:
        a setup line killed by that end is the watchdog's timeout."""
        failed = {n: f for n, f in arrivals.setup_failures(self.arrived_dir).items() if n in failed_nodes}
        r = self.record
        # A setup that failed on every node says nothing of any one node: the profile's or the
        # program's doing (a missing interface, a module that is nowhere), not for the ledger.
        passed = bool(arrivals.arrived(self.arrived_dir))
        everywhere = len(failed) > 1 and set(failed) >= set(missing) and not passed
        # The script's own checks (container.image, container.runtime, fabric.socket_ifname) test
        # one profile value on every node: failing on one node while no other got past them, it
        # is as likely the value as the node (the others' failures may come after the end).
        unproven = {n for n, f in failed.items() if f.line.startswith(arrivals.CHECK) and not passed}
        for f in failed.values():
            r.event(Ev.SETUP_FAILED, node=f.node, line=f.line, exit_code=f.status)
            if not everywhere and f.node not in unproven:
                r.ledger_add(f.node, "setup", f.describe())
        if everywhere:
            first = next(iter(failed.values()))
            r.say(f"slurmtrain: error: setup failed on every node ({' '.join(failed)}), so no node is to blame; "
                  f"{first.node}: {first.describe()}; stopping the job")
        elif unproven and set(unproven) == set(failed):
            first = next(iter(failed.values()))
            r.say(f"slurmtrain: error: {first.node}: {first.describe()}; no other node got past its checks before "
                  "the launch ended, so no node is to blame (the profile's value, most likely); stopping the job")
        elif failed:
            why = "; ".join(f"{f.node}: {f.describe()}" for f in failed.values())
            r.say(f"slurmtrain: error: start-up watchdog: node(s) {' '.join(missing)} did not start: {why}; "
                  "stopping the job")
        elif unreached:
            why = "; ".join(f"{node}: {text}" for node, text in sorted(unreached.items()))
            r.say(f"slurmtrain: error: srun could not start the tasks on {' '.join(sorted(unreached))} ({why}), "
                  f"with no in-job restart left; stopping the job")
        else:
            r.say(f"slurmtrain: error: start-up watchdog: node(s) {' '.join(missing)} did not join within "
                  f"{self.cfg.rendezvous_timeout} s (launch.setup, container start or file system on those "
                  "nodes); stopping the job")
        r.event(Ev.WATCHDOG_TIMEOUT, missing=" ".join(missing))
        # Where a setup line failed, srun ended every node's task: the others' absence is its doing.
        unreached = unreached or {}
        for node in missing if not failed else ():
            r.ledger_add(node, "watchdog", f"srun could not start the tasks: {unreached[node]}" if node in unreached
                         else "start-up watchdog: did not join (its setup, container or launcher start failed, "
                         f"or {self.cfg.rendezvous_timeout} s passed)")
        what = (f"setup failed on {' '.join(failed)}" if failed else
                f"srun could not start the tasks on {' '.join(sorted(unreached))}" if unreached else
                f"node(s) {' '.join(missing)} did not join")
        return decide.Over(f"failed at start-up: {what}", eventlog.EXIT_START_UP)
