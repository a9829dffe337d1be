"""Hang detection: the ranks' heartbeats (slurmtrain.heartbeat) judged against a timeout,
and every rank's stack when they stop.

A collective that never returns makes no rank fail: every rank waits, and none beats. The
timeout is ``resilience.hang_timeout``, or, when that is 0, derived from the run: HANG_MULTIPLE
times the longest gap between heartbeats seen in this job start, never below a floor. The
floor is HANG_FLOOR_S for a program whose beats say it is paced (it beats through its saves
and evaluations: the built-in trainer) once a launch has trained SETTLE_STEPS past its first
beat (the first steps compile); else UNPACED_FLOOR_S, where a checkpoint may be a long gap.
A rank that is busy (a save or evaluation that beats from a thread) counts as a hang only
after BUSY_S of it: a collective inside a save can hang too. A program that never beats is
not judged here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import heartbeat
from .slurm import Slurm

HANG_FLOOR_S = 120     # the derived timeout's floor for a paced program, settled
UNPACED_FLOOR_S = 600  # ... for any other (a long checkpoint between two beats is no hang)
HANG_MULTIPLE = 10     # ... and never below this many times the slowest gap between heartbeats seen
SETTLE_STEPS = 3       # steps past a launch's first beat before the paced floor applies
BUSY_S = 600           # a save or evaluation that still beats is a hang after this long


@dataclass(frozen=True)
class Hang:
    quiet: float                   # since the newest heartbeat (the others busy: the silent rank's last)
    timeout: float
    beats: list[heartbeat.Beat]    # every rank's last
    behind: list[heartbeat.Beat]   # the ranks that reported last (longest ago)
    folder: Path | None = None     # the heartbeat folder (the ranks' own stack dumps too)

    @property
    def ranks(self) -> str:
        return " ".join(str(b.rank) for b in self.behind)

    @property
    def nodes(self) -> str:
        return " ".join(sorted({b.node for b in self.behind}))

    @property
    def step(self) -> int:
        return min(b.step or 0 for b in self.behind)


class HangWatch:
    """One job start's watch: ``launch()`` at each launch, ``check(now)`` at each tick."""

    def __init__(self, folder: Path, timeout: int):
        self.folder, self.fixed = folder, timeout
        self.slowest_gap = 0.0     # over the whole start: a checkpoint's gap counts for the next launch too
        self.last: float | None = None             # the newest heartbeat's time in this launch
        self.first: heartbeat.Beat | None = None   # this launch's first heartbeat
        self.beats: list[heartbeat.Beat] = []      # every rank's last, as read at the last check

    def launch(self) -> None:
        self.last, self.first, self.beats = None, None, []

    def last_step(self) -> dict[str, int]:
        """``{"last_step": N}``: the newest step a rank reported, for the ``relaunched`` event
        (goodput places a node-memory copy's step in time with it); {} where none did."""
        steps = [b.step for b in self.beats if b.step is not None]
        return {"last_step": max(steps)} if steps else {}

    def timeout(self) -> float:
        return self.fixed or max(self._floor(), HANG_MULTIPLE * self.slowest_gap)

    def _floor(self) -> float:
        beats, first = self.beats, self.first
        settled = (first is not None and first.step is not None
                   and max((b.step or 0) for b in beats) >= first.step + SETTLE_STEPS)
        return HANG_FLOOR_S if settled and beats and all(b.paced for b in beats) else UNPACED_FLOOR_S

    def check(self, now: float) -> Hang | None:
        """A Hang when no rank has beaten for the timeout, or a rank has been busy for
        BUSY_S (or the timeout, if longer), at wall-clock time ``now``."""
        beats = self.beats = heartbeat.read(self.folder)
        if not beats:
            return None
        if self.first is None:
            self.first = min(beats, key=lambda b: b.time)
        newest = max(b.time for b in beats)
        if self.last is not None and newest > self.last:
            self.slowest_gap = max(self.slowest_gap, newest - self.last)
        self.last = max(newest, self.last or newest)
        quiet, timeout = now - newest, self.timeout()
        oldest = min(b.time for b in beats)
        busy_since = min((b.busy_since for b in beats if b.busy_since is not None), default=None)
        if busy_since is not None and quiet < timeout and now - oldest < timeout:
            # A save or evaluation beats from a thread on every rank, its collectives inside:
            # a rank silent for the timeout meanwhile is stopped or gone, and its peers busy
            # only because they wait for it (a copy into its node memory, say).
            quiet, timeout = now - busy_since, max(timeout, BUSY_S)
        elif busy_since is not None and quiet < timeout:
            quiet = now - oldest
        if quiet < timeout:
            return None
        behind = [b for b in beats if b.time - oldest <= heartbeat.EVERY_S + 1]
        return Hang(quiet, timeout, beats, behind, self.folder)


OWN_DUMP_WAIT_S = 3.0  # for the ranks' own dumps, after their stack signal
DUMP_SETTLE_S = 0.3    # ... each taken once it grew no more in this long


def dump_stacks(slurm: Slurm, beats: list[heartbeat.Beat], folder: Path, heartbeats: Path | None = None) -> Path:
    """Every rank's Python stack, by py-spy (``--nonblocking``: a stopped process too), run on
    the rank's node (``srun --overlap`` for the others): a file per rank. Where py-spy is
    missing or may not trace (Yama), the rank's own dump (the stop contract's, into
    ``heartbeats``), else a file saying why there is none."""
    folder.mkdir(parents=True, exist_ok=True)
    spy = find_py_spy()
    here = os.environ.get("SLURMD_NODENAME", "")
    missed, silent = [], set()  # silent: nodes srun could not reach (a link or a slurmd down)
    for b in beats:
        out = folder / f"rank{b.rank}-{b.node}.txt"
        if b.node in silent:
            out.write_text(f"no stack: {b.node} did not answer (see the node's other ranks)\n")
            continue
        why = "py-spy is not installed where the supervisor runs (pip install py-spy)"
        if spy is not None:
            answer = slurm.call(*_on_node(b.node, here, _spy_argv(spy, b.pid)))
            if answer.ok:
                out.write_text(_with_state(answer.out))
                continue
            if answer.rc == 124 and b.node != here:  # not even srun got through: ask nothing more there
                silent.add(b.node)
                out.write_text(f"no stack: {b.node} did not answer ({answer.text}): its link or its slurmd is down?\n")
                continue
            why = f"py-spy: {answer.text.strip()}"
        missed.append((b, out, why))
    if missed:
        _own_dumps(slurm, missed, here, heartbeats)
    return folder


def find_py_spy() -> str | None:
    """py-spy on PATH, else beside this interpreter or its base (a venv made with
    --system-site-packages has the base's packages, but not its bin/ on PATH)."""
    beside = (Path(sys.executable).parent / "py-spy", Path(sys.base_prefix) / "bin" / "py-spy")
    return shutil.which("py-spy") or next((str(p) for p in beside if os.access(p, os.X_OK)), None)


def _spy_argv(spy: str, pid: int) -> list[str]:
    """The process's state (/proc/PID/stat's third field: T stopped, D in uninterruptible
    sleep), then py-spy's dump, in one call on the node."""
    return ["sh", "-c", 'sed -n "s/^.*) \\([A-Za-z]\\) .*/\\1/p" "/proc/$1/stat" 2>/dev/null; '
            'exec "$0" dump --nonblocking --pid "$1"', spy, str(pid)]


def _with_state(out: str) -> str:
    first, _, rest = out.partition("\n")
    if not re.fullmatch(r"[A-Za-z]", first):
        return out
    return f"{STATE_LINE}{first} ({_STATES.get(first, 'running or sleeping')})\n{rest}"


STATE_LINE = "# process state: "
_MUTE = "the rank did not answer its stack signal"
_STATES = {"T": "stopped: SIGSTOP, or a debugger", "t": "stopped by a debugger",
           "D": "in uninterruptible sleep: a file system or a device", "Z": "a zombie: it exited"}
# A main thread waiting for its peers: a collective, or a backward pass whose gradient
# reductions wait (DDP, FSDP), in torch or DeepSpeed.
_COLLECTIVE = re.compile(r"torch/distributed/|torch/autograd/|deepspeed/comm/|deepspeed/runtime/comm/")


def odd_ranks(beats: list[heartbeat.Beat], folder: Path) -> tuple[list[heartbeat.Beat], str]:
    """Of a hung launch's ranks, by their stack files (``dump_stacks``): those stopped or in
    uninterruptible sleep while the others are not, else those not waiting in a collective
    while the others are, and why; ([], "") where the stacks tell no rank apart (every rank
    beats from its step: a stopped rank's peers stop beating when it does)."""
    texts = {b.rank: _read(folder / f"rank{b.rank}-{b.node}.txt") for b in beats}
    states = {b.rank: _state(texts[b.rank]) for b in beats}
    stuck = [b for b in beats if states[b.rank] in _STATES]
    if stuck and len(stuck) < len(beats):
        return stuck, f"process state {states[stuck[0].rank]} ({_STATES[states[stuck[0].rank]]})"
    waiting = {b.rank: _waits(texts[b.rank]) for b in beats}
    outside = [b for b in beats if waiting[b.rank] is False]
    if outside and any(waiting.values()):
        return outside, "not in a collective, where the others wait in one"
    # Without py-spy each rank dumps its own stack on a signal: one that does not, while
    # the others do from a collective, is stopped (or stuck outside Python).
    mute = [b for b in beats if _MUTE in texts[b.rank]]
    if mute and len(mute) < len(beats) and all(waiting[b.rank] for b in beats if b not in mute):
        return mute, "did not answer its stack signal while the others wait in a collective (stopped?)"
    return [], ""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _state(text: str) -> str | None:
    return text[len(STATE_LINE)] if text.startswith(STATE_LINE) else None


def _waits(text: str) -> bool | None:
    """Whether a stack file's main thread waits in a collective; None: no stack in it."""
    if not text or text.startswith("no stack"):
        return None
    main = re.search(r"^Thread \d+ \([^)]*\): \"MainThread\"\n((?:[ \t]+.*\n?)*)", text, re.M)
    return bool(_COLLECTIVE.search(main[1] if main else text))


def _on_node(node: str, here: str, argv: list[str]) -> list[str]:
    return argv if node == here else ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", node, *argv]


def _own_dumps(slurm: Slurm, missed: list, here: str, heartbeats: Path | None) -> None:
    """Ask each rank py-spy missed for its own dump (heartbeat.STACK_SIGNAL, whose default
    action is to ignore it) and take what it appends to its stack file."""
    sizes: dict[int, int] = {}
    for b, _, _ in missed:
        f = heartbeat.stack_file(heartbeats, b.rank) if heartbeats else None
        if f is not None and f.exists():  # the rank installed the dump
            sizes[b.rank] = f.stat().st_size
            slurm.call(*_on_node(b.node, here, ["kill", f"-{heartbeat.STACK_SIGNAL.name[3:]}", str(b.pid)]))

    def appended(rank: int) -> str:
        data = heartbeat.stack_file(heartbeats, rank).read_bytes()[sizes[rank]:] if rank in sizes else b""
        return data.decode("utf-8", "replace")

    # faulthandler writes a dump in many small writes with no end mark: a dump is taken once
    # it has begun and stopped growing (a rank descheduled mid-dump on a busy node).
    deadline, seen = time.monotonic() + OWN_DUMP_WAIT_S, None
    while sizes and time.monotonic() < deadline:
        now = {r: len(appended(r)) for r in sizes}
        if all(now.values()) and now == seen:
            break
        seen = now
        time.sleep(DUMP_SETTLE_S)
    for b, out, why in missed:
        text = appended(b.rank)
        if text.strip():
            out.write_text(f"# the rank's own dump (faulthandler), since {why}\n{text}")
        elif b.rank in sizes:
            out.write_text(f"no stack: {why}; {_MUTE} (a stopped process?)\n")
        else:
            out.write_text(f"no stack: {why}; the program does not install slurmtrain.stop's own dump\n")
