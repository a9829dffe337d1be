"""A `run_clm.py`-style Hugging Face Trainer script, as a user brings it, with
slurmtrain's callback added: causal-LM training of a tiny random Llama with a tokenizer
trained here on generated text (nothing from a hub).

Started on every process by the job's launcher (torchrun or srun: RANK, LOCAL_RANK,
WORLD_SIZE in the environment; gloo on the CPU). Rank 0 appends every optimizer step it
finishes to ``$SLURMTRAIN_RUN_DIR/hf_steps.jsonl`` so a test can tell which steps ran in
which start. ``--step-seconds`` stretches each step so that stops land mid-training.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from slurmtrain.stop.hf import StopCallback, resume_from

WORDS = ("the cluster trains a model on many nodes while the scheduler preempts jobs and "
         "checkpoints keep every step safe so training resumes where it stopped").split()


def corpus(n: int) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) for _ in range(n)]


def tokenizer_from(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")


def blocks(tokenizer, texts: list[str], size: int) -> list[dict]:
    """run_clm's group_texts: concatenate, cut into blocks, labels = inputs."""
    import torch

    ids = [i for t in texts for i in tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]]
    return [{"input_ids": torch.tensor(ids[k:k + size]), "labels": torch.tensor(ids[k:k + size])}
            for k in range(0, len(ids) - size + 1, size)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--save-steps", type=int, default=100)
    p.add_argument("--step-seconds", type=float, default=0.0)
    p.add_argument("--logging-steps", type=int, default=50)
    args = p.parse_args()

    stop_callback = StopCallback()  # the one added line (its handlers go in before the slow imports)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    run_dir = os.environ["SLURMTRAIN_RUN_DIR"]

    class StepLog(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            time.sleep(args.step_seconds)
            if state.is_world_process_zero:
                with open(os.path.join(run_dir, "hf_steps.jsonl"), "a") as f:
                    f.write(json.dumps({"step": state.global_step, "job_restart":
                                        os.environ.get("SLURM_RESTART_COUNT", "0")}) + "\n")

    texts = corpus(400)
    tokenizer = tokenizer_from(texts)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    training_args = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=2,
        save_strategy="steps", save_steps=args.save_steps, logging_steps=args.logging_steps, report_to="none",
        use_cpu=True, ddp_backend="gloo", seed=0, disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=training_args, train_dataset=blocks(tokenizer, texts, 32),
                      callbacks=[stop_callback, StepLog()])
    trainer.train(resume_from_checkpoint=resume_from(args.output_dir))
    if torch.distributed.is_initialized():
        # Torn down here, in order: left to the interpreter's exit, gloo's threads once
        # aborted the process ("terminate called without an active exception", exit -6)
        # after the run had finished and saved (one CI run in three, never reproduced).
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
