"""What the supervisor leaves behind: events, the bad-node ledger, the batch log's lines,
and what it reads back of srun's own lines there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from .. import dependents, eventlog, events, ledger, perms, programlog
from ..eventlog import Ev
from ..slurmtext import (PREEMPTION_KILL, SRUN_LAUNCH_FAILED, SRUN_NODE_FAILURE, SRUN_TASK_ERROR,
                         SRUN_TASK_LAUNCH_FAILED)
from .config import Job


class Record:
    def __init__(self, run_dir: Path, job: Job, launch: Callable[[], int], out: Callable[[str], None] | None = None,
                 batch_log: Path | None = None):
        self.run_dir, self.job, self._launch = run_dir, job, launch
        self._out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.batch_log = batch_log
        self.log_start = self.log_size()
        self.node_marks: dict[str, int] = {}  # each node log's size when the launch began
        self._stopped_seen: tuple[tuple[int, int], tuple[float, int] | None] = ((-1, -1), None)  # stopped_since's

    def event(self, name: str, **fields) -> None:
        j = self.job
        # `launch`: which launch of this start it belongs to (0: before the first), the one way
        # readers mark launches off; a `relaunched` opens the next and says that one's number.
        ident: dict = {"job_id": j.job_id, "restart": j.restarts, "launch": self._launch()}
        if j.array_task is not None:
            ident.update(array_job_id=j.array_job_id, array_task=j.array_task)
        events.append(self.run_dir, name, **{**ident, **fields})

    def ledger_add(self, node: str, source: str, reason: str) -> None:
        # A runs directory the job may write its run into but not the ledger beside it (a
        # shared one, made read-only) must not end the supervisor: say it, the run goes on.
        failed = ledger.record(self.run_dir.parent, node, reason, run=self.run_dir.name, job_id=self.job.job_id,
                               source=source)
        if failed:
            self.say(f"slurmtrain: {failed}")

    def say(self, text: str) -> None:
        self._out(text)

    def summary(self, outcome: str, code: int) -> None:
        """The batch log's last line: how this start ended, and the node of the first
        failure (srun's own error line in this start's part of the batch log) where it
        failed: after a stop, a cancel or a requeue, srun's lines are the teardown's (a
        launcher exits 1 or 143 when its ranks stop with 75), and no node is to blame."""
        first = self.first_failure(self.log_start) if outcome.startswith("failed") else None
        node = f", first failure on node {first}" if first else ""
        print(f"slurmtrain: job {self.job.ref}: {outcome}, exit status {code}{node}; run directory {self.run_dir}",
              flush=True)

    def log_size(self) -> int:
        try:
            return os.stat(self.batch_log).st_size if self.batch_log is not None else 0
        except OSError:
            return 0

    def _log_since(self, since: int) -> str:
        if self.batch_log is None:
            return ""
        try:
            with open(self.batch_log, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def mark_node_logs(self, nodes: list[str], launch: int) -> None:
        """A launch begins: a line in each of its nodes' logs says so (a job's launches append
        to the same files), and what they say from here on is its own."""
        j = self.job
        start = f" after requeue {j.restarts}" if j.restarts else ""
        again = f" (in-job restart {launch - 1})" if launch > 1 else ""
        line = programlog.launch_line(f"job {j.ref}{start}, launch {launch}{again} on {' '.join(nodes)}, "
                                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        try:
            (self.run_dir / "logs").mkdir(exist_ok=True)
            for node in nodes:
                with open(self.run_dir / "logs" / f"{j.tag}-{node}.out", "a") as f:
                    f.write(line)
        except OSError:  # the run directory unwritable: the launch says so itself
            pass
        marks = {}
        try:
            for p in (self.run_dir / "logs").glob(f"{self.job.tag}-*.out"):
                marks[p.name] = p.stat().st_size
        except OSError:  # a log gone, the folder unreadable: read from the start, as before any mark
            pass
        self.node_marks = marks

    def wrote_own_error(self, node: str) -> bool:
        """``node``'s log of this launch holds the program's own error, one a sound node's
        program raises (programlog.proves_node_sound: not about the network, which a rank cut
        off from its peers speaks of, nor the machine): its ranks ran to their failure there."""
        name = f"{self.job.tag}-{node}.out"
        lines = programlog.tail_lines(self.run_dir / "logs" / name, self.node_marks.get(name, 0))
        found = programlog.program_error(lines)
        return found is not None and found.root and programlog.proves_node_sound(found.line, lines)

    def lightning_requeued(self) -> bool:
        """A node log of this launch has Lightning's SLURM auto-requeue at work (its
        SLURMEnvironment, on its signal, runs `scontrol requeue` itself)."""
        for name, mark in self.node_marks.items():
            if any(programlog.LIGHTNING_REQUEUE.search(line)
                   for line in programlog.tail_lines(self.run_dir / "logs" / name, mark)):
                return True
        return False

    def first_failure(self, since: int) -> str | None:
        """The node of the failure srun reported in the batch log after byte ``since``: of
        the nodes it saw fail, in its order, the first whose log (this launch's part) holds
        the program's own error, not a peer's seen through a collective: when a rank
        raises, its peers' launchers often exit first, on a connection closed."""
        failed = list(dict.fromkeys(m["node"] for m in SRUN_TASK_ERROR.finditer(self._log_since(since))))
        if len(failed) < 2:
            return failed[0] if failed else None

        def lines_of(node: str) -> list[str]:
            name = f"{self.job.tag}-{node}.out"
            return programlog.tail_lines(self.run_dir / "logs" / name, self.node_marks.get(name, 0))
        return programlog.root_node(failed, lines_of)

    def failure_words(self, node: str | None, since: int) -> str | None:
        """What the program said of its failure in ``node``'s log, this launch's part: its own
        error (a rank killed by a signal, an exception), not a peer's seen through a collective;
        else srun's word after byte ``since`` of the batch log that a task there was killed."""
        if node is None:
            return None
        name = f"{self.job.tag}-{node}.out"
        found = programlog.program_error(programlog.tail_lines(self.run_dir / "logs" / name,
                                                               self.node_marks.get(name, 0)))
        if found is not None:
            return found.line if found.root else None
        # A process killed says nothing; srun says "Killed" (one task a process: the srun
        # launcher; or a launcher agent killed): the signal, not srun's exit status 1.
        killed = next((m for m in SRUN_TASK_ERROR.finditer(self._log_since(since))
                       if m["node"] == node and m["how"] == "Killed"), None)
        return f"a task on {node} was killed by SIGKILL (out of memory, or a kill)" if killed else None

    def task_exit_code(self, since: int) -> int | None:
        """The exit status of the first task srun saw fail with one after byte ``since`` (not
        a stop's 75)."""
        for m in SRUN_TASK_ERROR.finditer(self._log_since(since)):
            if m["how"].startswith("Exited with exit code "):
                code = int(m["how"].rsplit(" ", 1)[1])
                if code not in (0, eventlog.EXIT_STOPPED):
                    return code
        return None

    def launch_failures(self, since: int, node_of_task: Callable[[int], str | None]) -> dict[str, str]:
        """The nodes srun could not start the tasks on after byte ``since``, with its reason.
        srun names the node, or only the task: ``node_of_task`` tells where that task ran."""
        text = self._log_since(since)
        found = {m["node"]: m["why"].strip() for m in SRUN_LAUNCH_FAILED.finditer(text)}
        for m in SRUN_TASK_LAUNCH_FAILED.finditer(text):
            node = node_of_task(int(m["task"]))
            if node is not None:
                found.setdefault(node, m["why"].strip())
        return found

    def stray_kill(self, since: int) -> bool:
        """srun's first task error after byte ``since`` is a task SIGKILLed (srun: "Killed",
        not an exit status) on a node this job lost in an earlier start: Slurm's kill of that
        start's step (it has the same job and step ids) reaching this one once the node is
        back in service, seen at once after a requeue. Not the program's failure."""
        found = SRUN_TASK_ERROR.search(self._log_since(since))
        return (self.job.restarts > 0 and found is not None and found["how"] == "Killed"
                and found["node"] in self.nodes_lost_before())

    def nodes_lost_before(self) -> set[str]:
        """The nodes this job lost in its earlier starts: left out, excluded or waited for."""
        j, out = self.job, set()
        for e in eventlog.of_task(events.read(self.run_dir), j.array_task):
            name, restart = e.get("event"), int(e.get("restart", j.restarts))
            if e.get("job_id") != j.job_id or (restart >= j.restarts and name != Ev.REQUEUED_BY_SLURM):
                continue  # (Slurm's requeue after a node failure is said by the start after it)
            keys = {Ev.NODES_LOST: ("nodes",), Ev.REQUEUE: ("exclude", "waits_for"),
                    Ev.REQUEUED_BY_SLURM: ("nodes",)}.get(name, ())
            out.update(n for k in keys for n in str(e.get(k) or "").replace(",", " ").split())
        return out

    def stopped_since(self, mark: int) -> tuple[float, int] | None:
        """(when, step) the program last said `stopped` among the run's events after the first
        ``mark``. Asked every round: the events are read again only when the file has grown."""
        try:
            size = (self.run_dir / events.EVENTS_FILE).stat().st_size
        except OSError:
            size = -1
        if (mark, size) != self._stopped_seen[0]:
            evs = eventlog.of_task(events.read(self.run_dir)[mark:], self.job.array_task)
            e = next((e for e in reversed(evs) if e.get("event") == Ev.STOPPED and "time" in e), None)
            self._stopped_seen = ((mark, size), None if e is None else (float(e["time"]), e.get("step")))
        return self._stopped_seen[1]

    def preempted_kill(self, since: int) -> bool:
        """Slurm killed this job at the end of a preemption's GraceTime (slurmstepd's "DUE TO
        PREEMPTION" line naming it), after byte ``since`` of the batch log."""
        return any(m["job"] in (self.job.job_id, self.job.ref)
                   for m in PREEMPTION_KILL.finditer(self._log_since(since)))

    def start_said_at(self) -> int:
        """Where the latest start's first line ("slurmtrain: job N on ...") begins in the batch
        log: the part after it is that start's (0 when none is there)."""
        text = self._log_since(0)
        at = text.rfind(f"slurmtrain: job {self.job.ref} on ")
        return len(text[:at].encode(errors="replace")) if at >= 0 else 0

    def srun_node_failures(self, since: int) -> list[str]:
        """The nodes srun said failed ("srun: error: Node failure on <node>") after byte ``since``."""
        return sorted(set(SRUN_NODE_FAILURE.findall(self._log_since(since))))

    def tell_dependents(self, outcome: str) -> None:
        """Runs queued to start after this one completed (a chain) never will: say so in
        each (Slurm cancels their jobs itself). A sweep's point answers for its sweep."""
        upstream = self.run_dir
        try:
            upstream = Path(json.loads((self.run_dir / "manifest.json").read_text()).get("sweep_dir") or self.run_dir)
        except (OSError, ValueError):
            pass
        try:
            told = dependents.never(upstream, self.job.ref, outcome)
        except OSError as err:  # a teammate's waiting run this user cannot write: said, the job's end kept
            self.say(f"slurmtrain: could not tell the runs waiting for this one that it will not complete "
                     f"({err.filename}: {err.strerror}; {perms.explain(err.filename or upstream)})")
            return
        if told:
            self.say(f"slurmtrain: {', '.join(told)} waited for this run to complete; "
                     "Slurm cancels them (dependency never satisfied)")
