"""Why a run's job ended: completed, preempted, time limit, node failure, user error,
cancelled, requeue limit or start-up watchdog, from the run's ``events.jsonl`` and,
where known, Slurm's state and exit code.

One job id can run many times (each requeue starts the same batch script again with
``restart`` one higher); each start is a *segment* of ``events.jsonl`` that begins with
the script's ``started`` event. What ends a segment:

=====================================  ==========================================
events in the segment                  outcome
=====================================  ==========================================
``finished``                           completed
``watchdog_timeout``                   watchdog (a node never joined)
``requeue_limit``                      requeue limit (with the cause of the stop)
``failed`` (+ ``train_error``)         user error (the command failed by itself)
``cancel_requested`` (before the end)  cancelled
``cancelled`` (scancel)                cancelled
``requeue`` after ``preempted``        preempted (Slurm signals the tasks only)
``requeue`` after ``signal USR2``      time limit (the warning signal)
``requeued_by_slurm``                  node failure (Slurm had requeued the job)
``requeue`` after ``signal TERM``      preempted (or killed by Slurm)
none, and a later segment exists       node failure (the script was killed)
=====================================  ==========================================

Slurm's final state, where given, wins when it is NODE_FAIL, TIMEOUT or OUT_OF_MEMORY,
and fills in (CANCELLED, PREEMPTED, COMPLETED, FAILED with its exit code) when the
events record no end. Pure: reads files only, never asks Slurm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from .. import events as events_mod

COMPLETED = "completed"
PREEMPTED = "preempted"
TIME_LIMIT = "time limit"
NODE_FAILURE = "node failure"
USER_ERROR = "user error"
CANCELLED = "cancelled"
REQUEUE_LIMIT = "requeue limit"
WATCHDOG = "watchdog"
RUNNING = "running"    # no end yet: queued, running, or requeued and waiting
UNKNOWN = "unknown"    # Slurm says it ended but the run's events do not say how

KINDS = (COMPLETED, PREEMPTED, TIME_LIMIT, NODE_FAILURE, USER_ERROR, CANCELLED, REQUEUE_LIMIT,
         WATCHDOG, RUNNING, UNKNOWN)

# Slurm's word for how a job ended -> our kind, where it says more than the events can.
_SLURM_KIND = {"NODE_FAIL": NODE_FAILURE, "BOOT_FAIL": NODE_FAILURE, "TIMEOUT": TIME_LIMIT,
               "PREEMPTED": PREEMPTED, "CANCELLED": CANCELLED, "OUT_OF_MEMORY": USER_ERROR,
               "DEADLINE": TIME_LIMIT}

_STOP_EXIT = 75  # the stop contract's "stopped after a checkpoint"


@dataclass(frozen=True)
class Outcome:
    kind: str                 # one of KINDS
    detail: str               # one line for people
    final: bool = True        # False when the job comes back by itself (requeued) or is still going
    step: int | None = None   # the last step with a checkpoint, where the events say


def segments(evs: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Events split at each ``started`` (the batch script's first word on every start).
    Events before the first start (submitted, ...) form a segment of their own."""
    out: list[list[dict[str, Any]]] = [[]]
    for e in sorted(evs, key=lambda e: float(e.get("time", 0))):
        if e.get("event") == "started":
            out.append([])
        out[-1].append(e)
    return [s for s in out if s]


def _last(seg: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((e for e in reversed(seg) if e.get("event") == name), None)


def _stop_cause(seg: list[dict[str, Any]]) -> tuple[str, str]:
    """Why the tasks of a segment were asked to stop: (kind, words)."""
    if _last(seg, "requeued_by_slurm") is not None:
        return NODE_FAILURE, "a node of the job failed and Slurm requeued the job itself"
    if _last(seg, "preempted") is not None:
        return PREEMPTED, "Slurm preempted the job for a higher-priority one"
    sig = _last(seg, "signal")
    if sig is not None and str(sig.get("signal")) not in ("TERM", "SIGTERM"):
        return TIME_LIMIT, f"the warning signal SIG{sig.get('signal')} came before the time limit"
    if sig is not None:
        return PREEMPTED, "SIGTERM from Slurm (preemption, or the job was killed)"
    return PREEMPTED, "the tasks stopped after a checkpoint"


def _stopped_step(seg: list[dict[str, Any]]) -> int | None:
    for e in reversed(seg):
        if e.get("event") in ("stopped", "checkpoint_saved", "finished", "resumed") and "step" in e:
            return int(e["step"])
    return None


def _with_step(text: str, step: int | None) -> str:
    return text if step is None else f"{text}; last checkpoint at step {step}"


def classify_segment(seg: list[dict[str, Any]], later: bool) -> Outcome:
    """How one start of the job ended; ``later`` says whether another start followed it."""
    step = _stopped_step(seg)
    if _last(seg, "finished") is not None and _last(seg, "failed") is None:
        return Outcome(COMPLETED, _with_step("the command finished (exit 0)", step), True, step)
    if (e := _last(seg, "watchdog_timeout")) is not None:
        return Outcome(WATCHDOG, f"start-up watchdog: node(s) {e.get('missing') or '?'} did not join "
                                 "in time (see the batch log)", True, step)
    if (e := _last(seg, "requeue_limit")) is not None:
        limit = e.get("max_requeues")
        why = _stop_cause(seg)[1] if _last(seg, "requeue") is None and len(seg) > 1 else ""
        return Outcome(REQUEUE_LIMIT, f"requeue limit reached (max_requeues={limit}, restart "
                                      f"{e.get('restart', '?')}); not requeued again" + (f": {why}" if why else ""),
                       True, step)
    if _last(seg, "cancel_requested") is not None:
        return Outcome(CANCELLED, _with_step("cancelled by `slurmtrain cancel`", step), True, step)
    if _last(seg, "cancelled") is not None:  # the script got SIGTERM outside a time limit: scancel
        return Outcome(CANCELLED, _with_step("cancelled (scancel: the batch script got SIGTERM)", step),
                       True, step)
    if (e := _last(seg, "failed")) is not None:
        err = _last(seg, "train_error")
        code = e.get("exit_code")
        what = f"the command failed with exit status {code}"
        if err is not None:
            what += f" ({err.get('error')}, at step {err.get('step')})"
        return Outcome(USER_ERROR, what + "; not requeued", True, step)
    if _last(seg, "requeue") is not None:
        kind, why = _stop_cause(seg)
        if (e := _last(seg, "requeue_failed")) is not None:  # requeue disabled, or refused
            return Outcome(kind, _with_step(f"{why}; not requeued ({e.get('message')}): continue it with "
                                            "`slurmtrain resubmit`", step), True, step)
        return Outcome(kind, _with_step(f"{why}; requeued", step), False, step)
    if later:
        return Outcome(NODE_FAILURE, _with_step("the batch script ended without a word and Slurm started "
                                                "the job again (a node failure, or a kill after the "
                                                "preemption grace time)", step), False, step)
    return Outcome(RUNNING, _with_step("no end recorded yet", step), False, step)


def classify(run_dir: str | Path, slurm_state: str | None = None, exit_code: int | None = None) -> Outcome:
    """How the run's latest job start ended (or that it has not ended yet).

    ``slurm_state`` is Slurm's word for the job (``scontrol``/``sacct``: NODE_FAIL,
    TIMEOUT, ``CANCELLED by 0``...) when known; ``exit_code`` the batch script's status.
    """
    segs = segments(events_mod.read(Path(run_dir)))
    started = [s for s in segs if s[0].get("event") == "started"]
    outcome = classify_segment(started[-1], later=False) if started else None
    if outcome is None:
        refused = next((e for s in segs for e in s if e.get("event") == "submit_refused"), None)
        if refused is not None:
            return Outcome(USER_ERROR, f"sbatch refused the job: {refused.get('message')}")
        outcome = Outcome(RUNNING, "not started yet", False)
    word = (slurm_state or "").strip().split(" ")[0].rstrip("+").upper()
    said = f"Slurm says {word}" + (f" (exit code {exit_code})" if exit_code is not None else "")
    # Slurm's word is more precise than a stop the events could not explain, and a node
    # failure, time-out or out-of-memory kill may leave no end event at all.
    overrides = outcome.kind in (RUNNING, UNKNOWN) or word in ("NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY")
    if word in _SLURM_KIND and overrides and outcome.kind != COMPLETED:
        detail = said if outcome.kind == RUNNING else f"{said}; {outcome.detail}"
        return Outcome(_SLURM_KIND[word], detail, True, outcome.step)
    if outcome.kind == RUNNING and word in ("COMPLETED", "FAILED"):
        # No end event from the script: it was killed, or the job script is not ours.
        if word == "COMPLETED":
            return Outcome(COMPLETED, said, True, outcome.step)
        if exit_code == _STOP_EXIT:
            return Outcome(PREEMPTED, "the command stopped after a checkpoint (exit 75) but was not "
                                      "requeued", True, outcome.step)
        return Outcome(USER_ERROR if exit_code else UNKNOWN, said, True, outcome.step)
    return outcome


def ends(run_dir: str | Path) -> list[Outcome]:
    """One outcome per start of the job, oldest first (the last may be RUNNING)."""
    started = [s for s in segments(events_mod.read(Path(run_dir))) if s[0].get("event") == "started"]
    return [classify_segment(s, later=i < len(started) - 1) for i, s in enumerate(started)]


# ---- history -----------------------------------------------------------------------

# How each event reads in `slurmtrain status`; {field} is the event's field ("?" if absent).
_PHRASES = {
    "submitted": "submitted as job {job_id}",
    "resubmitted": "resubmitted as job {job_id} (after job {previous_job_id})",
    "submit_refused": "sbatch refused the job: {message}",
    "signal": "got SIG{signal}: asking every task to checkpoint and stop",
    "preempted": "preempted by Slurm (the tasks got SIGTERM)",
    "checkpoint_saved": "checkpoint saved at step {step}",
    "resumed": "resumed from the checkpoint of step {step}",
    "stopped": "stopped after step {step} (checkpoint saved)",
    "requeue": "requeueing; the tasks ended with exit status {exit_code}",
    "requeued_by_slurm": "Slurm had requeued the job itself (a node of the job failed)",
    "requeue_failed": "could not requeue: {message} (continue with `slurmtrain resubmit`)",
    "requeue_limit": "requeue limit reached (max_requeues={max_requeues}): not requeued",
    "failed": "failed with exit status {exit_code}: not requeued",
    "train_error": "training error at step {step}: {error}",
    "watchdog_timeout": "start-up watchdog: node(s) {missing} did not join",
    "cancel_requested": "cancel requested for job {job_id}",
    "cancelled": "job {job_id} cancelled (the batch script got SIGTERM: scancel)",
    "stop_timeout": "the tasks were still running {seconds} s after the stop request: ended them",
}


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _describe(e: dict[str, Any]) -> str | None:
    name = e.get("event")
    if name == "restarted":
        return None  # said by "started ... (restart N)"
    if name == "started":
        again = f" (restart {e['restart']})" if e.get("restart") else ""
        return f"job {e.get('job_id')} started on {e.get('nodes', '?')}{again}"
    if name == "finished":
        return f"finished at step {e['step']}" if "step" in e else "the job finished (exit 0)"
    if name in _PHRASES:
        return _PHRASES[name].format_map(_Fields(e))
    extra = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("time", "event"))
    return f"{name} {extra}".rstrip()


def history(run_dir: str | Path) -> list[str]:
    """The run's events as lines for people: ``HH:MM:SS  what happened``, oldest first."""
    lines = []
    for seg in segments(events_mod.read(Path(run_dir))):
        for e in seg:
            text = _describe(e)
            if text is None:
                continue
            when = datetime.fromtimestamp(float(e.get("time", 0))).strftime("%H:%M:%S")
            lines.append(f"{when}  {text}")
    return lines
