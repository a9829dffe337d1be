"""A Lightning script with slurmtrain's callback, for tests/stop/test_lightning.py.

A linear model fitted to random data on the CPU, with a ModelCheckpoint every 2 steps.
``--signal-at N --signal-name TERM`` sends this process that signal after training batch N
(as Slurm would); the callback then saves a checkpoint and exits 75. Run again, it
resumes from the newest complete checkpoint and prints the steps it trained as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

from slurmtrain.stop import lightning as slurmtrain_lightning


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--signal-at", type=int, default=0)
    p.add_argument("--signal-rank", type=int, default=None, help="only this rank gets it")
    p.add_argument("--signal-name", default="TERM")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--resume", choices=("newest", "last", "none"), default="newest",
                   help="ckpt_path: resume_from(root), Lightning's own \"last\", or none")
    args = p.parse_args()

    stop_callback = slurmtrain_lightning.StopCallback()

    import lightning.pytorch as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class SignalAt(L.Callback):
        first = None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.first is None:
                self.first = trainer.global_step
            if trainer.global_step == args.signal_at and args.signal_rank in (None, int(os.environ.get("RANK", 0))):
                os.kill(os.getpid(), getattr(signal, "SIG" + args.signal_name))

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    signal_at = SignalAt()
    trainer = L.Trainer(
        default_root_dir=args.root, max_steps=args.max_steps, accelerator="cpu", devices=args.devices, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[signal_at, stop_callback,
                   ModelCheckpoint(every_n_train_steps=2, save_top_k=-1, save_last=args.resume == "last")])
    ckpt_path = {"newest": slurmtrain_lightning.resume_from(args.root), "last": "last", "none": None}[args.resume]
    trainer.fit(Model(), loader, ckpt_path=ckpt_path)
    print(json.dumps({"first_step": signal_at.first, "global_step": trainer.global_step}))


if __name__ == "__main__":
    main()
