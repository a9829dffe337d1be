"""Lightning under slurmtrain's stop contract: one callback, one resume argument.

    from lightning.pytorch.plugins.environments import SLURMEnvironment
    from slurmtrain.stop.lightning import StopCallback, resume_from

    trainer = L.Trainer(..., callbacks=[StopCallback()],
                        plugins=[SLURMEnvironment(auto_requeue=False)])  # srun launch only
    trainer.fit(model, data, ckpt_path=resume_from(trainer.default_root_dir))

After each training batch the ranks agree on a stop request (signal or stop file); then
every rank saves ``last-slurmtrain-stop-step=<N>.ckpt`` through ``trainer.save_checkpoint`` in
the checkpoint folder (``ModelCheckpoint``'s, else ``<default_root_dir>/checkpoints``),
rank 0 reports it (``checkpoint_saved``, ``stopped``), and every rank exits 75 once all
have written. Saves by ``ModelCheckpoint`` are reported as ``checkpoint_saved`` too.

Lightning's own SLURM requeue must be off: it requeues from a USR1 handler by itself,
besides the job script. It is on by default where Lightning picks ``SLURMEnvironment``
(started by srun, one task per process); under torchrun it picks
``TorchElasticEnvironment``, which has none, so leave ``plugins`` out there (a
``SLURMEnvironment`` would take the world size from Slurm's tasks). While training,
this callback takes SIGTERM back from Lightning's handler, which would end ``fit`` at the
next batch without a checkpoint and with exit status 0 (the job would count as finished).

Uses ``lightning`` when installed, else ``pytorch_lightning``; ``StopCallbackPL`` is the
same callback for ``pytorch_lightning`` where both are installed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .. import stop
from ..eventlog import Ev
from . import checkpoints

try:
    import lightning.pytorch as _pl
except ImportError:  # the older package name
    import pytorch_lightning as _pl

log = logging.getLogger("slurmtrain.stop")

# Named "last-...": Lightning's ``ckpt_path="last"`` takes the newest file of a
# ModelCheckpoint folder whose name begins with "last", so the habit of
# ``ModelCheckpoint(save_last=True)`` + ``fit(ckpt_path="last")`` resumes from the stop's
# checkpoint, not from the periodic one before it (the steps between ran twice).
STOP_CHECKPOINT_PREFIX = "last-slurmtrain-stop-step="
_OLD_PREFIXES = ("slurmtrain-stop-step=",)  # the name before: superseded files are removed too


def resume_from(root) -> str | None:
    """The most recently written complete ``*.ckpt`` under ``root`` (searched recursively:
    pass the trainer's ``default_root_dir`` or the checkpoint folder, not a folder with the
    data in it), or ``None``, for ``trainer.fit(..., ckpt_path=...)``. A ``.ckpt`` file is
    complete when it is a whole zip archive; a sharded ``.ckpt`` folder when this callback
    marked it. A ``.ckpt`` path itself is returned when it is complete. Finding none is
    said where it looks like a mistake (checkpoints.say_none_found)."""
    found = checkpoints.lightning_resume_point(root)
    return str(found) if found is not None else None


class _StopHooks:
    """Stop after a training batch on request, save, report and exit 75 (every rank).

    ``dirpath``: where the stop checkpoint goes (default: ``ModelCheckpoint``'s folder,
    else ``<default_root_dir>/checkpoints``). Installs the stop signal handlers when
    constructed: build it early, so a stop that comes early is not fatal.
    """

    # The hooks only: a mixin, so that one body serves `lightning` and `pytorch_lightning`
    # (whichever is installed gives the Callback base, _callback_class).
    def __init__(self, dirpath=None):
        self.dirpath = dirpath
        self._saving = False  # our own save: not a periodic one to report
        self._unreported = None  # step of a ModelCheckpoint save not reported yet
        stop.install()

    def setup(self, trainer, pl_module, stage):
        env = getattr(trainer.strategy, "cluster_environment", None)
        if getattr(env, "auto_requeue", False):
            log.warning("Lightning's SLURM auto-requeue is on: it requeues the job by itself on its "
                        "signal; pass plugins=[SLURMEnvironment(auto_requeue=False)]")

    # Lightning installs its SIGTERM handler when fit starts, after on_fit_start; these
    # are the first hooks after that. Its handler is put back when fit ends.
    def on_sanity_check_start(self, trainer, pl_module):
        stop.install()

    def on_train_start(self, trainer, pl_module):
        stop.install()
        if trainer.global_step > 0:
            stop.resumed(trainer.global_step)
        newer = [(step, path) for step, path in _stop_checkpoints(self._folder(trainer)) if step > trainer.global_step]
        if newer and trainer.is_global_zero:
            log.warning("training starts at step %d but the stop checkpoint %s is newer (step %d): the steps between "
                        "run again; resume with trainer.fit(..., ckpt_path=slurmtrain.stop.lightning.resume_from(root)) "
                        'or ckpt_path="last"', trainer.global_step, max(newer)[1], max(newer)[0])

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        # Called while the checkpoint is being put together, before it is written: it
        # is reported at the next hook, once save_checkpoint has returned.
        if not self._saving:
            self._unreported = trainer.global_step

    def _report_periodic(self):
        if self._unreported is not None:
            stop.saved(self._unreported)
            self._unreported = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._report_periodic()

    def on_train_epoch_start(self, trainer, pl_module):
        self._report_periodic()

    def on_validation_start(self, trainer, pl_module):
        self._report_periodic()

    def on_train_end(self, trainer, pl_module):
        self._report_periodic()
        # Training is done (a stop leaves in _stop and never gets here): what the
        # launchers do while tearing down after it no longer makes the run fail.
        stop.finished(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        stop.heartbeat(trainer.global_step)  # progress, for the supervisor's hang detection
        self._report_periodic()
        # Every rank calls this after every batch: the all-reduce lines up.
        if stop.agree(stop.should_stop()):
            self._stop(trainer)

    def _folder(self, trainer) -> Path:
        if self.dirpath is not None:
            return Path(self.dirpath)
        cb = trainer.checkpoint_callback
        if cb is not None and getattr(cb, "dirpath", None):
            return Path(cb.dirpath)
        return Path(trainer.default_root_dir) / "checkpoints"

    def _stop(self, trainer):
        step = trainer.global_step
        path = self._folder(trainer) / f"{STOP_CHECKPOINT_PREFIX}{step}.ckpt"
        log.warning("stop requested (%s): saving %s, then exit %d", stop.reason(), path,
                    stop.STOP_EXIT_CODE)
        self._saving = True
        trainer.save_checkpoint(path)  # every rank: sharded strategies write from all
        stop.barrier()  # every rank done writing
        if trainer.is_global_zero:
            if path.is_dir():
                checkpoints.mark_complete(path)
            for _, old in _stop_checkpoints(path.parent):
                if old != path:  # superseded by this one
                    _remove(old)
        stop.saved(step, path)
        stop._event(Ev.STOPPED, step=step)
        stop.barrier()  # the marker and events are written before any rank leaves
        stop.leave(stop.STOP_EXIT_CODE)


def _stop_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of each stop checkpoint in ``folder`` (the step is in its name)."""
    out = []
    for prefix in (STOP_CHECKPOINT_PREFIX, *_OLD_PREFIXES):
        for path in folder.glob(f"{prefix}*.ckpt"):
            step = path.name[len(prefix):-len(".ckpt")]
            if step.isdigit():
                out.append((int(step), path))
    return out


def _callback_class(pl):
    """The StopCallback of the Lightning package ``pl``: its Callback, with the hooks above."""
    return type("StopCallback", (_StopHooks, pl.Callback), {"__doc__": _StopHooks.__doc__,
                                                             "__module__": __name__})


def _remove(path: Path) -> None:
    import shutil

    try:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    except OSError as err:
        log.warning("could not remove the old stop checkpoint %s: %s", path, err)


StopCallback = _callback_class(_pl)


def __getattr__(name):
    if name == "StopCallbackPL":  # built on first use: importing pytorch_lightning is slow
        import pytorch_lightning

        cls = StopCallback if _pl is pytorch_lightning else _callback_class(pytorch_lightning)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
