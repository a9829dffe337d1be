"""The stop contract for programs not written for slurmtrain (docs/survival.md).

Torch-free and cheap to import. In a training loop::

    from slurmtrain import stop

    stop.install()                          # early: the stop signal's default action kills
    for step in range(start + 1, steps + 1):
        train_one_step()
        if stop.agree(stop.should_stop()):  # every rank stops after the same step
            save_checkpoint(step)           # all ranks, then a barrier
            stop.saved(step, path)          # `checkpoint_saved` (rank 0): this run may be requeued
            stop.stopped(step)              # `stopped` (rank 0), then exit 75 on every rank

Events go to ``$SLURMTRAIN_RUN_DIR/events.jsonl`` on global rank 0 (``$RANK``, else the
initialised torch.distributed group, else 0) and are skipped outside a slurmtrain job,
so the same program runs anywhere. The job's supervisor requeues a stopped job only when the
program has reported a checkpoint in this run (``checkpoint_saved`` or ``stopped``) or
exited 75 — unless the profile says ``resilience.requeue_when = "always"``.

Callbacks for the Hugging Face Trainer and for Lightning: ``slurmtrain.stop.hf`` and
``slurmtrain.stop.lightning`` (each imports its framework; this module imports none).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .. import events
from ..heartbeat import dump_stacks_on_signal
from ..eventlog import EXIT_STOPPED, Ev

STOP_EXIT_CODE = EXIT_STOPPED  # "stopped after a checkpoint; requeue me" (sysexits' EX_TEMPFAIL)
FILE_CHECK_SECONDS = 1.0  # how often should_stop() looks at the stop file: a stat per second

log = logging.getLogger("slurmtrain.stop")

_requested = False  # set by the signal handler; never cleared (a stop is a stop)
_reason = ""
_installed = False
_stop_file_checked = float("-inf")  # time.monotonic() of the last look at the stop file
_last_metrics: tuple[float, int] | None = None  # (time.monotonic(), step) of the last metrics()


def in_job() -> bool:
    """True inside a job that slurmtrain wrote (``$SLURMTRAIN_RUN_DIR`` is set)."""
    return bool(os.environ.get("SLURMTRAIN_RUN_DIR"))


def rank() -> int:
    """This process's global rank: ``$RANK`` (torchrun and slurmtrain's srun launch set it),
    else that of an initialised torch.distributed group, else 0."""
    env = os.environ.get("RANK", "").strip()
    if env.isdigit():
        return int(env)
    dist = sys.modules.get("torch.distributed")  # looked up, never imported: torch stays optional
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def stop_signals() -> list[signal.Signals]:
    """SIGTERM (preemption, node failure, scancel) and the time-limit warning signal named
    in ``$SLURMTRAIN_STOP_SIGNAL`` (``USR2`` when unset, as in the job script)."""
    sigs = [signal.SIGTERM]
    name = os.environ.get("SLURMTRAIN_STOP_SIGNAL", "").strip().upper() or "USR2"
    sig = getattr(signal.Signals, name if name.startswith("SIG") else "SIG" + name, None)
    if sig is None:
        log.warning("$SLURMTRAIN_STOP_SIGNAL=%s is not a signal here; handling SIGTERM only", name)
    elif sig not in sigs and sig not in (signal.SIGKILL, signal.SIGSTOP):
        sigs.append(sig)
    return sigs


def _on_signal(signum: int, _frame) -> None:
    # Only a flag: saving here, possibly in the middle of a collective, would deadlock.
    global _requested, _reason
    _requested = True
    _reason = _reason or signal.Signals(signum).name


def install() -> list[signal.Signals]:
    """Install the stop handler (it only sets a flag) for :func:`stop_signals`, replacing
    any other handler of those signals. Idempotent; call it early: workers get the stop
    signal's default action, which ends a program that has no handler yet.

    Signal handlers can only be installed from the main thread; elsewhere this installs
    nothing (logged) and :func:`should_stop` still sees the stop file.
    """
    global _installed
    if threading.current_thread() is not threading.main_thread():
        log.warning("slurmtrain.stop.install() outside the main thread: no signal handler, "
                    "only the stop file is watched")
        return []
    sigs = stop_signals()
    for sig in sigs:
        signal.signal(sig, _on_signal)
    dump_stacks_on_signal()  # the supervisor's stacks where py-spy may not trace
    _installed = True
    return sigs


def request(reason: str = "requested") -> None:
    """Ask for a stop from the program itself (as a signal would)."""
    global _requested, _reason
    _requested, _reason = True, _reason or reason


def reason() -> str:
    """Why a stop was requested (``SIGTERM``, ``SIGUSR2``, ``stop file ...``), or ''."""
    return _reason


def should_stop() -> bool:
    """True once a stop signal arrived or ``$SLURMTRAIN_STOP_FILE`` exists (looked at once
    per :data:`FILE_CHECK_SECONDS`). Installs the handler on first use. This rank's view
    only: pass it through :func:`agree` in a program with several ranks."""
    global _stop_file_checked
    if not _installed and threading.current_thread() is threading.main_thread():
        install()
    if _requested:
        return True
    now = time.monotonic()
    if now - _stop_file_checked >= FILE_CHECK_SECONDS:
        _stop_file_checked = now
        path = os.environ.get("SLURMTRAIN_STOP_FILE")
        if path and os.path.exists(path):
            request(f"stop file {path}")
    return _requested


def _world():
    """torch.distributed when a group of more than one process is initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


_cpu_group: tuple = (None, None)  # (the default group, the group the flag travels on)


def cpu_group():
    """The group :func:`agree` all-reduces on: the default one when it carries CPU tensors
    (its backend config names one for ``cpu:``, as ``gloo`` and ``cpu:gloo,cuda:nccl``
    do), else a gloo group of every rank, made on first use (``new_group`` is a collective:
    every rank gets here at the same :func:`agree`). A CPU flag costs no device
    synchronisation: a CUDA one would make each step's check wait for every kernel queued
    so far, taking away the CPU's lead over the GPU."""
    dist = _world()
    if dist is None or "cpu:" in dist.get_backend_config():
        return None
    global _cpu_group
    default = dist.distributed_c10d._get_default_group()
    if _cpu_group[0] is not default:  # first use, or a process group made since
        _cpu_group = (default, dist.new_group(backend="gloo"))
    return _cpu_group[1]


def agree(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any (an all-reduce, MAX, of a CPU tensor
    over :func:`cpu_group`); ``flag`` itself when no group is initialised. Every rank
    must call it at the same point, e.g. ``if stop.agree(stop.should_stop()):`` after each step.
    """
    dist = _world()
    if dist is None:
        return bool(flag)
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device="cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=cpu_group())
    agreed = bool(t[0])  # a CPU tensor: reading it waits for the other hosts, not the device
    if agreed and not flag:
        request("another rank was asked to stop")
    return agreed


def barrier() -> None:
    """Wait for every rank (an all-reduce over :func:`cpu_group`; no-op without a group).
    NCCL's own barrier guesses the device and can hang when the guess is wrong."""
    if _world() is not None:
        agree(False)


def _event(name: str, **fields) -> None:
    """Append one event on global rank 0 inside a slurmtrain job; nothing elsewhere."""
    if not in_job() or rank() != 0:
        return
    events.append(os.environ["SLURMTRAIN_RUN_DIR"], name, **fields)


def saved(step: int, path: str | os.PathLike | None = None) -> None:
    """Report a complete checkpoint of ``step`` (``checkpoint_saved``): after a stop the job
    script requeues only a program that has reported one in this run. Call it once every
    rank has finished writing."""
    fields = {"step": int(step)}
    if path is not None:
        fields["path"] = str(Path(path).resolve())
    _event(Ev.CHECKPOINT_SAVED, **fields)


def resumed(step: int) -> None:
    """Report that this start continues from the checkpoint of ``step`` (``resumed``)."""
    _event(Ev.RESUMED, step=int(step))


def heartbeat(step: int | None = None) -> None:
    """Report progress (every rank, as often as you like: it writes at most once a second).
    The job's supervisor takes a launch whose ranks all stopped beating for
    ``resilience.hang_timeout`` for a hang: it records their stacks and starts the launch
    again from the newest checkpoint. A program that never beats is watched at start-up only."""
    from .. import heartbeat as _heartbeat
    _heartbeat.beat(step)


def metrics(step: int, total_steps: int | None = None, **values: float) -> None:
    """Report a step's numbers (rank 0; elsewhere nothing): a line of the run's
    ``metrics.jsonl``, which ``slurmtrain watch`` (step of total, loss, ETA), ``status``
    (a sweep's points) and ``plot`` read as they read the built-in trainer's. Known keys:
    ``loss``, ``eval_loss`` (an evaluation's own line), ``lr``, ``tokens_per_s`` and
    ``step_time`` (seconds a step takes: the ETA, and status's slow stretches; from the time
    since the last call where not given); any other number is kept. A value that
    is not a number is left out (a tensor: pass ``.item()``)."""
    if not in_job() or rank() != 0:
        return
    import json
    from ..runfiles import METRICS_FILE

    global _last_metrics
    record: dict = {"step": int(step), **({"total_steps": int(total_steps)} if total_steps else {})}
    record.update({k: float(v) if isinstance(v, float) else v for k, v in values.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)})
    now = time.monotonic()
    if "step_time" not in record and _last_metrics is not None and int(step) > _last_metrics[1]:
        # the time a step takes since the last call: the ETA, and status's slow stretches
        record["step_time"] = round((now - _last_metrics[0]) / (int(step) - _last_metrics[1]), 4)
    _last_metrics = (now, int(step))
    record["time"] = round(time.time(), 3)
    with open(Path(os.environ["SLURMTRAIN_RUN_DIR"]) / METRICS_FILE, "a") as f:  # a short line: appends stay whole
        f.write(json.dumps(record) + "\n")


def finished(step: int | None = None) -> None:
    """Report that the program did all its work (``finished``): a stop that lands as it
    ends then ends the run instead of requeueing it once more. Call it last."""
    _event(Ev.FINISHED, **({} if step is None else {"step": int(step)}))


def stopped(step: int) -> None:
    """Report ``stopped {step}`` (rank 0) and exit with status 75 on every rank. Call it
    after the checkpoint of ``step`` is written on every rank (a barrier) and reported
    with :func:`saved`. Raises ``SystemExit(75)``, so ``finally`` blocks (closing the
    process group) still run."""
    _event(Ev.STOPPED, step=int(step))
    raise SystemExit(STOP_EXIT_CODE)


def leave(code: int = STOP_EXIT_CODE) -> None:
    """Exit now with ``code`` after flushing logs and output, skipping interpreter teardown
    (``os._exit``). For the framework callbacks: a framework's ``finally`` blocks and exit
    hooks must not run (or hang on a live process group) after a stop. Call it only after
    a :func:`barrier` that follows the last write: under torchrun the first rank to exit
    non-zero makes the agent kill the others."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep us from exiting
            pass
    os._exit(code)


def _reset_for_tests() -> None:
    global _requested, _reason, _installed, _stop_file_checked, _last_metrics
    _requested, _reason, _installed, _stop_file_checked = False, "", False, float("-inf")
    _last_metrics = None
