"""Why a run's job ended: completed, preempted, time limit, node failure, user error,
cancelled, requeue limit, start-up watchdog or stopped with nothing saved, from the run's
``events.jsonl`` (read by :mod:`slurmtrain.eventlog`, which splits it into starts and
says how each ended) and, where known, Slurm's state and exit code; and the run's
history in words for ``slurmtrain status``.

Slurm's final state, where given, wins when it is NODE_FAIL, TIMEOUT or OUT_OF_MEMORY,
and fills in (CANCELLED, PREEMPTED, COMPLETED, FAILED with its exit code) when the
events record no end. Pure: reads files only, never asks Slurm.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from signal import Signals
from typing import Any

from .. import eventlog
from ..eventlog import (ASKED, CANCELLED, COMPLETED, HANG, KINDS, NODE_FAILURE, PREEMPTED, REQUEUE_LIMIT, REQUEUED, RUNNING,  # noqa: F401,E501
                        STOP_KINDS, STOPPED_UNSAVED, TIME_LIMIT, UNKNOWN, USER_ERROR, WATCHDOG, Ev, Outcome)
from .rundir import RunDir, events_of

# Slurm's word for how a job ended -> our kind, where it says more than the events can.
_SLURM_KIND = {"NODE_FAIL": NODE_FAILURE, "BOOT_FAIL": NODE_FAILURE, "TIMEOUT": TIME_LIMIT,
               "PREEMPTED": PREEMPTED, "CANCELLED": CANCELLED, "OUT_OF_MEMORY": USER_ERROR,
               "DEADLINE": TIME_LIMIT}


def classify(run_dir: str | Path, slurm_state: str | None = None, exit_code: int | None = None,
             signal: int | None = None) -> Outcome:
    """How the run's latest job start ended (or that it has not ended yet).

    ``slurm_state`` is Slurm's word for the job (``scontrol``/``sacct``: NODE_FAIL,
    TIMEOUT, ``CANCELLED by 0``...) when known; ``exit_code`` the batch script's status,
    ``signal`` the signal that killed it (ExitCode ``0:9``).
    """
    outcome = eventlog.latest(events_of(run_dir))
    word = (slurm_state or "").strip().split(" ")[0].rstrip("+").upper()
    said = f"Slurm says {word}" + _exit_words(exit_code, signal)
    # Slurm's word is more precise than a stop the events could not explain, and a node
    # failure, time-out or out-of-memory kill may leave no end event at all.
    overrides = outcome.kind in (RUNNING, UNKNOWN) or word in ("NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")
    if word == "CANCELLED" and not outcome.final and outcome.kind not in (RUNNING, UNKNOWN):
        # Cancelled (a plain scancel) while it waited to start again after a stop: the run
        # ends here, saved at its last checkpoint; it does not come back by itself.
        return Outcome(CANCELLED, f"{said} while it waited to start again ({outcome.kind}: {outcome.detail})",
                       True, outcome.step)
    if word in _SLURM_KIND and overrides and outcome.kind not in (COMPLETED, STOPPED_UNSAVED):
        detail = said if outcome.kind == RUNNING else f"{said}; {outcome.detail}"
        return Outcome(_SLURM_KIND[word], detail, True, outcome.step)
    if outcome.kind == RUNNING and word in ("COMPLETED", "FAILED"):
        # No end event from the script: it was killed, or the job script is not ours.
        if word == "COMPLETED":
            return Outcome(COMPLETED, said, True, outcome.step)
        if exit_code == eventlog.EXIT_STOPPED:
            return Outcome(PREEMPTED, "the command stopped after a checkpoint (exit 75) but was not "
                                      "requeued", True, outcome.step)
        return Outcome(USER_ERROR if exit_code else UNKNOWN, said, True, outcome.step)
    return outcome


def _exit_words(exit_code: int | None, signal: int | None) -> str:
    """`` (exit code 3)``; a script killed by a signal has exit code 0, which says nothing."""
    if signal and not exit_code:
        try:
            name = Signals(signal).name
        except ValueError:
            name = f"signal {signal}"
        why = " (out of memory, or a kill)" if name == "SIGKILL" else ""
        return f" (the job script was killed by {name}{why})"
    return f" (exit code {exit_code})" if exit_code is not None else ""


def ends(run_dir: str | Path) -> list[Outcome]:
    """One outcome per start of the job, oldest first (the last may be RUNNING)."""
    return eventlog.ends(events_of(run_dir))


# ---- history -----------------------------------------------------------------------

# How each event reads in `slurmtrain status`; {field} is the event's field ("?" if absent).
_PHRASES = {
    Ev.SUBMITTED: "submitted as job {job_id}",
    Ev.RESUBMITTED: "resubmitted as job {job_id} (after job {previous_job_id})",
    Ev.DEPENDENCY_NEVER_SATISFIED: "cancelled by Slurm without running: {detail}; this run was to start "
                                   "after it completed",
    Ev.SUBMIT_REFUSED: "sbatch refused the job: {message}",
    Ev.SIGNAL: "got SIG{signal}: asking every task to checkpoint and stop",
    Ev.PREEMPTED: "preempted by Slurm (the tasks got SIGTERM)",
    Ev.CHECKPOINT_SAVED: "checkpoint saved at step {step}",
    Ev.CHECKPOINT_INTERVAL: "checkpoints every {steps} steps from now (checkpoint_every = \"auto\")",
    Ev.STOPPED: "stopped after step {step} (checkpoint saved)",
    Ev.REQUEUED_BY_SLURM: "Slurm had requeued the job itself (a node of the job failed)",
    Ev.REQUEUE_FAILED: "could not requeue: {message} (continue with `slurmtrain resubmit`)",
    Ev.REQUEUE_LIMIT: "requeue limit reached (max_requeues={max_requeues}): not requeued",
    Ev.FAILED: "failed with exit status {exit_code}: not requeued",
    Ev.TRAIN_ERROR: "training error at step {step}: {error}",
    Ev.MEMORY_OFF: ("no more copies in node memory this launch: the copy of step {step} could not be written "
                    "({error}); durable checkpoints go on"),
    Ev.WATCHDOG_TIMEOUT: "start-up watchdog: node(s) {missing} did not join",
    Ev.SETUP_FAILED: "a setup line failed on {node} (exit status {exit_code}): {line}",
    Ev.PREFLIGHT_PASSED: "preflight gate passed on {nodes}",
    Ev.PREFLIGHT_FAILED: "preflight gate failed on {nodes}: left out",
    Ev.NODES_LOST: ("node(s) {nodes} left out of the job (dead, down, or failing again and again); spare(s) in "
                    "their place: {spares}; idle spares left: {left}"),
    Ev.HANG: ("hang: no rank reported progress for {seconds} s; the last to report: rank(s) {ranks} on {nodes} "
              "(step {step}); stacks in {stacks}"),
    Ev.STRAGGLER: "straggler: {node} computes {pct}% slower than the other nodes ({compute_ms} ms against {others_ms} ms)",
    Ev.FIRST_STEP: "training under way: first progress of the launch (step {step})",
    Ev.RESUMED_BEHIND: ("the program did not resume from its newest checkpoint: its first step is {step}, but the run "
                        "had saved step {saved}; those steps are trained again"),
    Ev.CANCEL_REQUESTED: "cancel requested for job {job_id}",
    Ev.NODES_EXCLUDED: "left out of the job: node(s) {nodes} (from the {source})",
    Ev.DOCTOR: "doctor ran its checks on the nodes",
    Ev.CANCELLED: "job {job_id} cancelled (the batch script got SIGTERM: scancel)",
    Ev.STOP_TIMEOUT: "the tasks were still running {seconds} s after the stop request: sent them SIGTERM",
    Ev.STOP_ESCALATED: "the tasks were still running {seconds} s after SIGTERM: killed them (SIGKILL)",
    Ev.STOP_LINGERED: ("the program stopped after its checkpoint of step {step}, but its launch was still running "
                       "{seconds} s later: ended it"),
    Ev.STOP_UNSAVED: ("stopped, but the program has reported no checkpoint in this run (exit status {exit_code}): "
                      "not requeued"),
}
# A `failed` after Slurm's own requeue is the dying script's last word, not the run's end.
_SUPERSEDED_FAILURE = ("the tasks ended with exit status {exit_code} as the node failed; superseded: "
                       "Slurm had requeued the job")


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _describe(e: dict[str, Any], requeued_by_slurm: bool = False) -> str | None:
    name = e.get("event")
    if name == Ev.RESTARTED:
        return None  # said by "started ... (restart N)"
    if name == Ev.SUBMITTED and e.get("array_tasks"):
        return f"submitted as array job {e.get('job_id')} of {e['array_tasks']} tasks"
    if name == Ev.SUBMITTED and e.get("by") == "sbatch":
        return f"submitted as job {e.get('job_id')} (with sbatch, not slurmtrain submit)"
    if name == Ev.STARTED:
        again = f" (restart {e['restart']})" if e.get("restart") else ""
        spares = f"; spare(s), idle until needed: {e['spares']}" if e.get("spares") else ""
        return f"job {e.get('job_id')} started on {e.get('nodes', '?')}{again}{spares}"
    if eventlog.is_script_finished(e):
        return ("the job finished (exit 0)" if not e.get("launch_exit") else
                f"the job finished (exit 0): the program had finished, its launch exited {e['launch_exit']} after")
    if name == Ev.FINISHED:
        return f"finished at step {e['step']}" if "step" in e else "the program finished"
    if name == Ev.REQUEUED_BY_SLURM and (said := _requeued_by_slurm(e)):
        return said
    if name == Ev.REQUEUE:  # and whether it left nodes out, or keeps one the partition cannot spare
        # After a stop that saved, the launcher's exit status says nothing (torchrun's 1 on a
        # SIGTERM, srun's 143, the program's own 75): it is shown where nothing was saved.
        ended = f"; the tasks ended with exit status {e['exit_code']}" if "exit_code" in e and not e.get("saved") else ""
        return f"requeueing{eventlog.requeued_how(e).removeprefix('requeued')}{ended}"
    if name == Ev.HANG and e.get("stuck_ranks"):
        return (_PHRASES[name].format_map(_Fields(e)).replace("; stacks in", f"; of them rank(s) {e['stuck_ranks']} "
                f"on {e.get('stuck_nodes', '?')}: {e.get('why', '?')}; stacks in"))
    if name == Ev.STOP_UNSAVED and e.get("signal"):
        return (f"stopped: the program was killed by SIG{e['signal']}, the stop signal, with no handler for it yet "
                f"(exit status {e.get('exit_code', '?')}); nothing saved: not requeued")
    if name == Ev.RELAUNCHED:
        return _relaunched(e)
    if name == Ev.NODES_LOST and e.get("spares") == "none":
        # no spare took their place: the requeue's line says whether they are left out or waited for
        idle = f" ({e['left']} idle)" if e.get("left") else ""
        return f"node(s) {e.get('nodes')} lost (dead, down, or failing again and again); no spare took their place{idle}"
    if name == Ev.NODES_LOST and e.get("why") == "straggler":
        return f"{e.get('nodes')} left out of the job (a straggler); spare in its place: {e.get('spares')}"
    if name == Ev.RESUMED:
        return _resumed(e)
    if name == Ev.CHECKPOINT_INTERVAL and e.get("tier") == "memory":
        return f"copies in node memory every {e.get('steps')} steps from now (checkpoint_every = \"auto\")"
    if name == Ev.DOCTOR and isinstance(e.get("passed"), bool):
        return "doctor ran its checks on the nodes: " + ("all passed" if e["passed"] else "some failed (its report)")
    if name == Ev.FAILED and requeued_by_slurm:
        return _SUPERSEDED_FAILURE.format_map(_Fields(e))
    if name == Ev.FAILED and e.get("error"):
        return f"failed with exit status {e.get('exit_code', '?')} ({e['error']}): not requeued"
    if name in _PHRASES:
        # who asked, in a runs directory a team shares: the events of a resubmit and a cancel say
        by = f" by {e['user']}" if name in (Ev.RESUBMITTED, Ev.CANCEL_REQUESTED) and e.get("user") else ""
        return _PHRASES[name].format_map(_Fields(e)) + by
    extra = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("time", "event"))
    return f"{name} {extra}".rstrip()


def _requeued_by_slurm(e: dict[str, Any]) -> str | None:
    """Who requeued the job from outside the script, as the event's ``by`` says."""
    by = e.get("by")
    if by == eventlog.BY_LIGHTNING:
        return "requeued by the program itself: Lightning's SLURM auto-requeue (`scontrol requeue` on its signal)"
    if by == eventlog.BY_PREEMPTION:
        silent = "; the batch script was killed with it, without a word: said at the next start" if e.get("silent") else ""
        return ("Slurm preempted the job and, its launch still running when the grace time ran out, killed it and "
                f"requeued it itself{silent}")
    if eventlog.requeued_by_admin(e):
        return "requeued from outside the job (`scontrol requeue` by an administrator or another program)"
    if e.get("nodes"):
        silent = "; the batch script died with them, without a word: said at the next start" if e.get("silent") else ""
        return f"Slurm had requeued the job itself (node(s) {e['nodes']} of the job failed{silent})"
    return None


def _relaunched(e: dict[str, Any]) -> str:
    """An in-job restart: without a straggler, after lost nodes, or after a failure."""
    if e.get("why") == "straggler":
        return "started again in the job from the checkpoint it stopped at, without the straggler"
    if e.get("why") == "nodes lost":
        return (f"the launch ended with exit status {e.get('exit_code')} as nodes were lost: started again in the "
                f"job from the newest checkpoint (in-job restart {e.get('attempt')})")
    attempt = f"(in-job restart {e.get('attempt', '?')})"
    if e.get("cause") == eventlog.LAUNCH_FAILED:
        return f"srun could not start the tasks on {e.get('nodes', '?')}: launched again {attempt}"
    where = f" on {e['node']}" if e.get("node") else ""
    if e.get("cause") == eventlog.HANG:
        return f"the launch hung{where}: ended, and started again in the job from the newest checkpoint {attempt}"
    error = f": {e['error']}" if e.get("error") else ""
    failed = f"the program failed{where} (exit status {e.get('exit_code', '?')}{error})"
    if e.get("why") == "stray kill":
        return f"{failed} as Slurm killed it (its kill of an earlier start's step): started again in the job {attempt}"
    return f"{failed} after a new checkpoint: started again in the job from it {attempt}"


def _resumed(e: dict[str, Any]) -> str:
    """Where the state came from (the durable checkpoint, or node memory: train.memory_steps),
    and how long the load took."""
    where = "the copy in node memory" if e.get("tier") == "memory" else "the checkpoint"
    peers = e.get("from_peer") or []
    peer = f" (rank(s) {' '.join(map(str, peers))} from a peer node's copy)" if peers else ""
    took = f" in {e['seconds']:.1f} s" if isinstance(e.get("seconds"), (int, float)) else ""
    data = f", with another data recipe than it was saved with ({e['data_changed']})" if e.get("data_changed") else ""
    schedule = (f"; the learning rate follows the recipe's new settings from here ({e['schedule_changed']})"
                if e.get("schedule_changed") else "")
    return f"resumed from {where} of step {e.get('step', '?')}{peer}{took}{data}{schedule}"


def _clock(e: dict[str, Any]) -> str:
    try:
        return datetime.fromtimestamp(float(e.get("time", 0))).strftime("%H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return "??:??:??"


def history(run_dir: str | Path) -> list[str]:
    """The run's events as lines for people: ``HH:MM:SS  what happened``, oldest first.
    An array task's lines begin with ``task N:`` and name its job ``<array job>_<N>``."""
    lines = []
    requeued: dict[int | None, bool] = {}  # by task: Slurm requeued it in its latest start
    evs = events_of(run_dir)
    point = _point_task(run_dir)  # a sweep's point: its own task, as squeue and its status name it
    # A resubmission writes `submitted` (sbatch took it), then `resubmitted`: one line says it.
    resubmitted = {e.get("job_id"): i for i, e in enumerate(evs) if e.get("event") == Ev.RESUBMITTED}
    for i, e in enumerate(evs):
        if e.get("event") == Ev.SUBMITTED and resubmitted.get(e.get("job_id"), -1) > i:
            continue
        task = eventlog.task_of(e)
        if e.get("event") == Ev.STARTED:
            requeued[task] = False
        if (task if task is not None else point) is not None and "array_job_id" in e:
            e = {**e, "job_id": f"{e['array_job_id']}_{task if task is not None else point}"}
        text = _describe(e, requeued.get(task, False))
        requeued[task] = requeued.get(task, False) or e.get("event") == Ev.REQUEUED_BY_SLURM
        if text is not None:
            lines.append((e, task, text))
    return [f"{_clock(e)}  " + ("" if task is None else f"task {task}: ") + text for e, task, text in _fold(lines)]


def _point_task(run_dir: str | Path) -> int | None:
    made = RunDir(Path(run_dir)).manifest()
    task = made.get("array_task") if made.get("in_sweep") else None
    return task if isinstance(task, int) else None


_FOLD_FROM = 3  # periodic checkpoints in a row: one line from this many on


def _fold(lines: list[tuple[dict, int | None, str]]) -> list[tuple[dict, int | None, str]]:
    """Each task's periodic checkpoints with nothing else of its own said between them, in
    one line, where (and when) the last of them was: a long run saves hundreds."""
    groups: list[list[int]] = []
    open_group: dict[int | None, list[int]] = {}  # by task: its checkpoints in a row so far
    for i, (e, task, _) in enumerate(lines):
        if e.get("event") != Ev.CHECKPOINT_SAVED:
            open_group.pop(task, None)
        elif task in open_group:
            open_group[task].append(i)
        else:
            open_group[task] = [i]
            groups.append(open_group[task])
    folded = {g[-1]: g for g in groups if len(g) >= _FOLD_FROM}
    gone = {i for g in folded.values() for i in g[:-1]}
    out = []
    for i, (e, task, text) in enumerate(lines):
        if i in folded:
            steps = [str(lines[k][0].get("step", "?")) for k in folded[i]]
            shown = steps if len(steps) <= 6 else [*steps[:3], "…", *steps[-2:]]
            text = f"checkpoints saved at steps {', '.join(shown)} ({len(steps)} since {_clock(lines[folded[i][0]][0])})"
        if i not in gone:
            out.append((e, task, text))
    return out
