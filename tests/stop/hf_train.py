"""A Hugging Face Trainer script with slurmtrain's callback, for tests/stop/test_hf.py.

A tiny random Llama (built from a config: no downloads) trained on random token ids on
the CPU. ``--signal-at N`` sends this process the stop signal after optimizer step N (as
Slurm would); the callback then saves checkpoint-N and exits 75. Run again, it resumes
from the newest complete checkpoint and prints the steps it trained as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

from slurmtrain.stop import hf as slurmtrain_hf


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=1000)
    p.add_argument("--signal-at", type=int, default=0)
    p.add_argument("--signal-rank", type=int, default=None, help="only this rank gets it")
    args = p.parse_args()

    stop_callback = slurmtrain_hf.StopCallback()  # first: handlers in place before the slow part

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    class SignalAt(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            if state.global_step == args.signal_at and args.signal_rank in (None, int(os.environ.get("RANK", 0))):
                os.kill(os.getpid(), getattr(signal, "SIG" + os.environ["SLURMTRAIN_STOP_SIGNAL"]))

    class Steps(TrainerCallback):
        first = None

        def on_step_end(self, a, state, control, **kwargs):
            if self.first is None:
                self.first = state.global_step

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 128, (64, 16))
    data = [{"input_ids": row, "labels": row} for row in ids]
    training_args = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=4,
        save_strategy="steps", save_steps=args.save_steps, logging_steps=2, report_to="none",
        use_cpu=True, seed=0, disable_tqdm=True, dataloader_num_workers=0)
    steps = Steps()
    trainer = Trainer(model=model, args=training_args, train_dataset=data,
                      callbacks=[SignalAt(), stop_callback, steps])
    trainer.train(resume_from_checkpoint=slurmtrain_hf.resume_from(args.output_dir))
    print(json.dumps({"first_step": steps.first, "global_step": trainer.state.global_step}))


if __name__ == "__main__":
    main()
