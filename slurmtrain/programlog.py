"""What a failed program said, read from a node's log: the supervisor (``job/``) names the
node of a failure by it, ``status`` (``runs/logs.py``) shows it. A floor module: the
standard library, the launcher registry and the event log's exit codes only.

A program's own error and a peer's, seen through a collective, look alike in a log: when
one rank raises, every other rank's next collective fails with "Connection closed by
peer" (gloo) or "remote process exited" (NCCL), and may do so before the rank that raised
has finished printing. Those are follow-on errors: the root cause is elsewhere, and it
wins wherever a log holds one.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from . import launchers
from .eventlog import EXIT_STOPPED

# Lightning's SLURMEnvironment(auto_requeue=True) at its signal: it requeues the job itself.
LIGHTNING_REQUEUE = re.compile(r"Handling auto-requeue signal: |Requeued SLURM job: \d+")
# What launchers put before each line of a task's output: torchrun's "[rank0]:" and
# "[default0]:" (--tee), srun --label's "0: ".
_PREFIX = re.compile(r"^(\[[A-Za-z]*\d+\]:|\d+: )\s?")
# ... or the same, or a traceback, in the middle of a line: a progress bar (tqdm's) redraws
# itself with carriage returns and leaves its last frame with no newline before what follows
# (right against it, or after the spaces it pads a frame with: see _cut_mid_line).
_MID_LINE = re.compile(r"\[[A-Za-z]*\d+\]:|Traceback \(most recent call last\):")
# A launcher's own exception (torchrun's), which says only that a worker failed; the worker's is earlier.
_LAUNCHER_EXCEPTIONS = tuple(e for spec in launchers.LAUNCHERS.values() for e in spec.own_exceptions)
# Python itself, before any program ran: `python nosuch.py`, `python -m nosuch`.
_NOT_STARTED = re.compile(r"^\S*python[\d.]*: (can't open file |No module named |Error while finding module spec)")
# apptainer's (singularity's) own refusal to start the program: an image it cannot read, a
# bind source that is not there ("FATAL:   container creation failed: mount ...").
_RUNTIME_FATAL = re.compile(r"^FATAL:\s")
# Python's refusal to compile the script: no "Traceback" line, its file and line, then this.
_SYNTAX = re.compile(r"^(SyntaxError|IndentationError|TabError): ")
_WHERE = re.compile(r'^\s+File "([^"]+)", line (\d+)')
# argparse's refusal of the command line: "usage: train.py ..." then "train.py: error: ..."
_USAGE_ERROR = re.compile(r"^\S+: error: ")
# A collective that failed because a peer went away (gloo, NCCL, c10d's store).
_FOLLOW_ON = re.compile(r"Connection (closed|reset) by peer|Broken pipe|remote worker crash|remote process exited"
                        r"|communicator was aborted|for (recv|send) operation to complete")
# An error about the network or the distributed store (a timeout, a connection, a rendezvous):
# what a rank on a node cut off from the others says, so no sign that its node is reachable.
_NETWORK = re.compile(r"time[ds]? ?out|connect|rendezvous|DistNetworkError|DistStoreError|nccl|gloo|socket|"
                      r"unreachable|no route|lost (connection|communication)|EOFError|\bstore\b", re.I)
# ... or about the machine: what a node about to fail prints (a GPU's error, NCCL's watchdog;
# and _NODE_FAULT's words, below).
_MACHINE = re.compile(r"cuda|\becc\b|\bxid\b|nvlink|fallen off the bus|watchdog|hardware", re.I)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception)\b|slurmtrain: error:)")


def proves_node_sound(line: str, lines: Iterable[str] = ()) -> bool:
    """``line``, the program's own error in a node's log (``lines``: that launch's part of
    it), is one a sound node's program raises: a Python exception or a ``slurmtrain:
    error:`` line, about neither the network nor the machine, and not built from a
    launcher's report (a signal, a quiet exit); and no NCCL watchdog fired there."""
    return (bool(_EXCEPTION_LINE.match(line)) and not _NETWORK.search(line) and not _MACHINE.search(line)
            and not _NODE_FAULT.search(line)
            and not any("Watchdog caught collective operation timeout" in x for x in lines))


# torchrun's summary of a worker killed by a signal (SIGKILL from the OOM killer or a person):
# the worker printed nothing, and its node's other workers fail with gloo/NCCL errors after it.
# One block: it ends with a line of "=".
_KILLED = re.compile(r"Root Cause \(first observed failure\):[^=]*?rank\s*:\s*(\d+)[^=]*?exitcode\s*:\s*-(\d+)"
                     r"[^=]*?traceback\s*:\s*Signal \d+ \((SIG\w+)\)")
# DeepSpeed's launcher's line for a worker that ended: "... ['python', '-u', 'train.py',
# '--local_rank=1'] exits with return code = -9"; a negative code is the signal that killed it.
_DS_KILLED = re.compile(r"(?:--local_rank=(\d+).*)?exits with return code = -(\d+)")
_WHY_KILLED = {"SIGKILL": "out of memory, or a kill", "SIGSEGV": "a crash in native code",
               "SIGBUS": "a crash in native code", "SIGABRT": "an abort in native code",
               "SIGILL": "a crash in native code", "SIGFPE": "a crash in native code"}
# Errors a program raises for its node's fault (memory, a GPU gone, a link, a device), the same
# each time it meets that node: the node's to answer for however often it is said. (A full
# file system is not among them: usually the shared one, which no other node would mend.)
_NODE_FAULT = re.compile(r"ECC error|uncorrectable|\bXid\b|GPU is lost|fallen off the bus|NVLink"
                         r"|Input/output error|Bus error|hardware error"
                         r"|killed by SIGKILL", re.I)  # the node's OOM killer, or a person there
# A launcher's word that a task exited non-zero by itself (torchrun's agent, srun, DeepSpeed's
# launcher); what the program printed last before it is what a quiet exit, `sys.exit("...")`
# or `log.error(...); sys.exit(1)`, said.
_EXITED = re.compile(r"failed \(exitcode: ([1-9]\d*)\)|Exited with exit code ([1-9]\d*)"
                     r"|exits with return code = ([1-9]\d*)")
# Launchers' and Slurm's own lines, which are not the program's words: glog-style torch logs
# ("E1128 03:55:19.99 ..."), srun's and slurmstepd's, DeepSpeed's logger, our launch marks.
_NOT_PROGRAMS = re.compile(r"^([IWEF]\d{4} \d\d:\d\d|srun: |slurmstepd|\[\d{4}-\d\d-\d\d [\d:,]+\] \[[A-Z]+\]"
                           r"|\*{5,}|-{5}|={5,})")
TAIL_BYTES = 64 * 1024  # of a node log: a launcher's report is ~40 lines
# The supervisor's line in each node's log where a launch begins (a job's launches, its
# in-job restarts and Slurm's requeues, append to the same file).
LAUNCH_MARK = "----- slurmtrain: "


def node_fault(error: str) -> bool:
    """A program's error line that tells of its node, not of the program."""
    return bool(_NODE_FAULT.search(error))


def launch_line(words: str) -> str:
    return f"{LAUNCH_MARK}{words} -----\n"


def last_launch(lines: list[str]) -> list[str]:
    """The lines after the last launch's line (all of them where there is none)."""
    starts = [i for i, line in enumerate(lines) if line.startswith(LAUNCH_MARK)]
    return lines[starts[-1] + 1:] if starts else lines


def _cut_mid_line(raw: str) -> str:
    """``raw`` from where a launcher's prefix or a traceback begins after a progress bar's
    last frame: right after a non-space, or after spaces that follow a frame's end (``]``,
    ``|``). Not after other spaces: torchrun's summary's "traceback : Traceback ...", a
    message quoting one. A line's own prefix is kept (the rank it is of)."""
    prefix = _PREFIX.match(raw)
    head = raw[:prefix.end()] if prefix else ""
    body = raw[len(head):]
    for m in _MID_LINE.finditer(body):
        before = body[:m.start()]
        if before and (not before[-1].isspace() or before.rstrip().endswith(("]", "|"))):
            rest = body[m.start():]
            return rest if _PREFIX.match(rest) else head + rest
    return raw


class Error(NamedTuple):
    line: str
    root: bool  # the program's own (False: a peer's failure seen through a collective)


def program_error(lines: Iterable[str]) -> Error | None:
    """The program's own last word in ``lines``: the last ``slurmtrain: error:`` line, Python
    exception line or Python's refusal to start it, the last root cause over any follow-on
    error; or None. A worker that torchrun saw killed by a signal is the root cause whatever
    its peers raised after it."""
    root = follow_on = None
    in_traceback: dict[str, bool] = {}  # by the launcher's prefix: ranks print their tracebacks at once
    usage: dict[str, bool] = {}         # ... and their argparse usage, before its error line
    seen, where = [], ""
    for raw in lines:
        raw = _cut_mid_line(raw)
        prefix = _PREFIX.match(raw)
        key = prefix[1] if prefix else ""
        line = raw[prefix.end():].rstrip() if prefix else raw.rstrip()
        seen.append(line)
        if line.startswith("usage: "):
            usage[key] = True
        if line.startswith("slurmtrain: error:") or _NOT_STARTED.match(line) or _RUNTIME_FATAL.match(line) or \
                (usage.get(key) and _USAGE_ERROR.match(line)):
            root, in_traceback[key], usage[key] = line, False, False
        elif line.startswith("Traceback (most recent call last):"):
            in_traceback[key] = True
        elif (at := _WHERE.match(line)) is not None:
            where = f" ({at[1]}, line {at[2]})"
        elif _SYNTAX.match(line) and not in_traceback.get(key):  # the script itself did not compile
            root = line + where
        elif in_traceback.get(key) and line and not line[0].isspace():
            # The first unindented line after the frames names the exception.
            in_traceback[key] = False
            if line.startswith(_LAUNCHER_EXCEPTIONS):
                continue
            if _FOLLOW_ON.search(line):
                follow_on = line
            else:
                root = line
    killed = ([None] + list(_KILLED.finditer("\n".join(seen))))[-1]  # the last launch's
    if killed and killed[3] in _WHY_KILLED:  # not SIGTERM: the launch's own end (a stop, srun's teardown)
        return Error(f"rank {killed[1]} was killed by {killed[3]} (torchrun's first observed failure: "
                     f"{_WHY_KILLED[killed[3]]})", True)
    ds = next((m for line in seen if (m := _DS_KILLED.search(line)) and _signal_name(m[2]) in _WHY_KILLED), None)
    if ds is not None and root is None:
        who = f"local rank {ds[1]}" if ds[1] else "a worker"
        return Error(f"{who} was killed by {_signal_name(ds[2])} (DeepSpeed's launcher: "
                     f"{_WHY_KILLED[_signal_name(ds[2])]})", True)
    if root is not None:
        return Error(root, True)
    return Error(follow_on, False) if follow_on is not None else _quiet_exit(seen)


def _quiet_exit(seen: list[str]) -> Error | None:
    """A program that exited non-zero without a traceback: its last line before the
    launcher's word of it, in the words ``status`` shows (it may be its reason, or only its
    last progress line: said as what it is)."""
    codes = ((i, next(c for c in m.groups() if c)) for i, line in enumerate(seen) if (m := _EXITED.search(line)))
    report, code = next(((i, c) for i, c in codes if c != str(EXIT_STOPPED)), (None, None))  # a stop is no error
    if report is None:
        return None
    said = next((line.strip() for line in reversed(seen[:report])
                 if line.strip() and not line[0].isspace() and not line.startswith(LAUNCH_MARK)
                 and not _NOT_PROGRAMS.match(line)), None)
    if said is None:
        return None
    return Error(f"exited with code {code}; its last line before: {said}", True)


def _signal_name(number: str) -> str:
    try:
        return signal.Signals(int(number)).name
    except ValueError:
        return f"signal {number}"


def tail_lines(path: Path, since: int = 0, size: int = TAIL_BYTES) -> list[str]:
    """The last ``size`` bytes of ``path`` written after byte ``since``, as lines."""
    try:
        with open(path, "rb") as f:
            f.seek(max(since, f.seek(0, 2) - size))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def root_node(failed: list[str], lines_of: Callable[[str], list[str]]) -> str | None:
    """Of the nodes srun saw fail, in its order, the first whose log (``lines_of(node)``)
    holds the program's own error; srun's first when none does (a rank killed without a
    word, a dead node)."""
    for node in failed:
        found = program_error(lines_of(node))
        if found is not None and found.root:
            return node
    return failed[0] if failed else None
