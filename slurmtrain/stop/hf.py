"""Hugging Face ``Trainer`` under slurmtrain's stop contract: one callback, one resume line.

    from slurmtrain.stop.hf import StopCallback, resume_from

    trainer = Trainer(..., callbacks=[StopCallback()])
    trainer.train(resume_from_checkpoint=resume_from(args.output_dir))

At each optimizer step the ranks agree on a stop request (signal or stop file); then the
Trainer saves ``checkpoint-<step>`` as usual, the callback marks it complete, reports it
(``checkpoint_saved``, ``stopped``) and every rank exits 75 once all have written.
Periodic saves are marked and reported too, so the job's supervisor knows the program saves.

Why the resume line: the Trainer writes into ``checkpoint-<step>`` directly, and
``get_last_checkpoint`` (``run_clm.py`` and ``resume_from_checkpoint=True`` use it) takes
the highest-numbered folder, complete or not. Scripts compute that path before the
Trainer -- and this callback -- exist, so a callback cannot correct it; ``resume_from``
returns the newest complete one instead (see ``slurmtrain.stop.checkpoints``). The
callback warns at the start of training when the newest folder is incomplete.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from transformers import TrainerCallback

from .. import stop
from ..eventlog import Ev
from . import checkpoints

log = logging.getLogger("slurmtrain.stop")


def resume_from(output_dir) -> str | None:
    """The newest complete ``checkpoint-<step>`` in ``output_dir`` (``None`` when there is
    none: train from the start), for ``trainer.train(resume_from_checkpoint=...)``.
    Folders written before ``StopCallback`` was in use count as complete when they hold
    ``trainer_state.json``."""
    found = checkpoints.newest_hf(output_dir)
    if found is None:
        checkpoints.say_none_found(output_dir, "checkpoint-<step>")
    return str(found) if found is not None else None


class StopCallback(TrainerCallback):
    """Stop at a step boundary on request, save, report and exit 75 (every rank).

    Installs the stop signal handlers when constructed: build it before loading data
    and model, so a stop that comes early is not fatal.
    """

    def __init__(self):
        stop.install()
        self._stopping = False
        self._saved_since_stop = False

    def on_train_begin(self, args, state, control, **kwargs):
        launched = os.environ.get("WORLD_SIZE", "")
        launched = int(launched) if launched.isdigit() else args.world_size
        if args.world_size != launched and stop.rank() == 0:
            log.warning("the Trainer sees a world of %d process(es), but the launcher started %d: each trains on its "
                        "own, with the whole data, into the same output_dir (the Trainer, accelerate or DeepSpeed "
                        "did not take the launcher's world: on CPU, give --use_cpu and --ddp_backend gloo)",
                        args.world_size, launched)
        if state.global_step > 0:
            stop.resumed(state.global_step)
        if state.is_world_process_zero:
            newest = checkpoints.newest_hf(args.output_dir, warn=False)
            step = int(newest.name.rpartition("-")[2]) if newest is not None else 0
            if step != state.global_step:
                log.warning("training starts at step %d but the newest complete checkpoint is %s; resume with "
                            "trainer.train(resume_from_checkpoint=slurmtrain.stop.hf.resume_from(output_dir))",
                            state.global_step, newest)

    def on_step_end(self, args, state, control, **kwargs):
        stop.heartbeat(state.global_step)  # progress, for the supervisor's hang detection
        # Every rank calls this after every optimizer step: the all-reduce lines up.
        if not self._stopping and stop.agree(stop.should_stop()):
            self._stopping = True
            log.warning("stop requested (%s): saving the checkpoint of step %d, then exit %d",
                        stop.reason(), state.global_step, stop.STOP_EXIT_CODE)
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        """The Trainer's logged numbers as the run's metrics (`slurmtrain watch`, `plot`):
        loss, learning rate, an evaluation's loss (a step's time: stop.metrics, from the
        steps since the last log)."""
        logs = logs or {}
        values = {"loss": logs.get("loss"), "lr": logs.get("learning_rate"), "grad_norm": logs.get("grad_norm")}
        if "eval_loss" in logs:
            values = {"eval_loss": logs["eval_loss"]}
        if any(v is not None for v in values.values()):
            stop.metrics(state.global_step, state.max_steps or None, **{k: v for k, v in values.items() if v is not None})
        return control

    def on_save(self, args, state, control, **kwargs):
        # Called on every rank right after Trainer._save_checkpoint, whose writes (rank 0's
        # weights, optimizer and trainer_state.json; the other ranks' RNG states and shards)
        # are done only once every rank is here.
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        stop.barrier()
        if state.is_world_process_zero and stop.rank() == 0 and folder.is_dir():
            checkpoints.mark_complete(folder)
        stop.saved(state.global_step, folder)
        if self._stopping:
            self._saved_since_stop = True
            stop._event(Ev.STOPPED, step=state.global_step)
            stop.barrier()  # the marker and events are written before any rank leaves
            stop.leave(stop.STOP_EXIT_CODE)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._stopping and not self._saved_since_stop:
            # The Trainer dropped the save we asked for (save_strategy="best" decides it
            # after an evaluation at the same step). Exit 75 all the same: a requeue resumes
            # from the newest checkpoint, which is better than ending the run here.
            log.warning("stop requested but the Trainer did not save at step %d; exit %d without a checkpoint",
                        state.global_step, stop.STOP_EXIT_CODE)
            stop.barrier()
            stop.leave(stop.STOP_EXIT_CODE)
        if not self._stopping:
            # Training is done: what the launchers do while tearing down after it (a
            # torchrun agent losing the rendezvous store) no longer makes the run fail.
            stop.finished(state.global_step)
        return control
