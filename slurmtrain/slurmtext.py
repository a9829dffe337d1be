"""Slurm's text forms, read by the job's supervisor (``job/``) and the login-node
commands (``runs/``, ``doctor/``) alike: ``Key=value`` records, durations, and srun's own
error lines in a batch log. A floor module (the standard library only), so that neither
side imports the other for them.
"""

from __future__ import annotations

import os
import re

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")

# The supervisor's words in the batch log before an in-job restart: what precedes them there
# is an earlier launch's (decide.relaunch_said writes them, status reads them).
RELAUNCH_SAID = "; starting it again in this allocation"
# srun's own line for a task that failed, in the batch log: its node is the first failure's.
SRUN_TASK_ERROR = re.compile(r"^srun: error: (?P<node>\S+): tasks? [\d,-]+: "
                             r"(?P<how>Exited with exit code \d+|Killed|Terminated)",
                             re.M)
# ... and its line for a node Slurm took for failed (the job is requeued, or ends NODE_FAIL).
SRUN_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)$", re.M)
# ... and its line for a node it could not start the step's tasks on (its link or its slurmd
# down, for good or for a moment): "Task launch for StepId=12.0 failed on node n2: <why>".
SRUN_LAUNCH_FAILED = re.compile(r"^srun: error: Task launch for StepId=\S+ failed on node (?P<node>[^:\s]+): "
                                r"(?P<why>.+)$", re.M)
# ... and its shorter form, by task, when the node's slurmd took the launch but could not open
# the task's I/O back to srun (a link down a moment): "task 1 launch failed: Slurmd could not
# connect IO". Which node ran task N is the step's layout's to say (job/step.py).
SRUN_TASK_LAUNCH_FAILED = re.compile(r"^srun: error: task (?P<task>\d+) launch failed: (?P<why>.+)$", re.M)


# slurmstepd's line when Slurm kills a preempted job at the end of its GraceTime (its tasks
# got SIGTERM at the start of it); in the batch log, then Slurm requeues the job itself.
PREEMPTION_KILL = re.compile(r"\*\*\* JOB (?P<job>\S+) ON \S+ CANCELLED AT (?P<at>\S+) DUE TO PREEMPTION")


def parse_key_values(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` -> dict; a value runs up to the next `` Key=``."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for m, nxt in zip(matches, matches[1:] + [None]):
        end = nxt.start() if nxt else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def parse_duration(text: str | None) -> int | None:
    """Slurm durations: ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS`` -> seconds."""
    if not text or text in ("UNLIMITED", "INVALID", "Partition_Limit"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return ((days * 24 + h) * 60 + m) * 60 + s


def hostnames(nodelist: str) -> list[str]:
    """A hostlist expression expanded as ``scontrol show hostnames`` does, without asking
    Slurm: ``st[1-3,05],gpu-a[1-2]x`` -> st1 st2 st3 st05 gpu-a1x gpu-a2x ("(null)": none)."""
    names, item, depth = [], "", 0
    for ch in ("" if nodelist.strip() in ("", "(null)") else nodelist.strip()) + ",":
        if ch == "," and depth == 0:
            names += _expand(item) if item else []
            item = ""
            continue
        depth += (ch == "[") - (ch == "]")
        item += ch
    return names


def _expand(item: str) -> list[str]:
    m = re.match(r"([^\[]*)\[([^\]]*)\](.*)$", item)
    if m is None:
        return [item]
    head, ranges, tail = m.groups()
    tails = _expand(tail) if tail else [""]
    out = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        out += [f"{head}{i:0{len(lo)}d}{t}" for i in range(int(lo), int(hi or lo) + 1) for t in tails]
    return out


def where_to_set_slurm_conf() -> str:
    """Where a shell that found no Slurm configuration should get SLURM_CONF: this one, or,
    for a command sent from a laptop (``--remote``), the login node's login shell, whose
    startup file a command over ssh reads only above its interactive guard."""
    if os.environ.get("SLURMTRAIN_VIA_REMOTE"):
        return ("on the login node, export it in the login shell's startup file (~/.bashrc: above the lines "
                "that return when the shell is not interactive), which commands over ssh read (docs/remote.md)")
    return 'for the sandbox, run eval "$(slurmtrain sandbox env)" in this shell first'
