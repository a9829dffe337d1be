"""Steps per second of the built-in trainer against a minimal hand-written PyTorch loop.

Both train the ``tiny`` preset on the same batch shape (micro-batch 8 x 256 tokens, one
micro-batch per step), with AdamW, gradient clipping and the LR schedule, on CPU, in the
same process and the same thread count. The trainer runs its real path: FSDP2 on a
one-process gloo group, the stop-flag check at every step boundary, metrics on log
steps. Rounds alternate (hand loop, trainer, hand loop, ...) so that load from other
programs on the machine hits both alike; medians, per-round ratios and the best round
of each (least disturbed by other load, as timeit's minimum) are reported.

    python scripts/bench_trainer_cpu.py [--steps 30] [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmtrain.train import optim as optim_mod  # noqa: E402
from slurmtrain.train import trainer as trainer_mod  # noqa: E402
from slurmtrain.train.distributed import close_world, init_world  # noqa: E402
from slurmtrain.train.model import Transformer  # noqa: E402
from slurmtrain.recipes.recipe import load_recipe_sources  # noqa: E402

SEQ, MICRO = 256, 8


def corpus(path: Path) -> None:
    import random
    rng = random.Random(0)
    words = [f"w{i}" for i in range(500)]
    with path.open("w") as fh:
        for _ in range(2000):
            fh.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(100))}) + "\n")


def hand_loop(args, steps: int, warmup: int) -> float:
    """The minimal loop: plain module, no process group, no hooks."""
    model = Transformer(args)
    model.init_weights(seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, optim_mod.WarmupCosine(10, steps, 0.1))
    batch = torch.randint(0, 256, (MICRO, SEQ + 1))
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - start)


def trainer_run(world, data: Path, run_dir: Path, steps: int, warmup: int) -> float:
    """The real trainer; its own metrics give the mean step time of steps after warm-up."""
    sets = [("data.path", str(data), "bench"), ("data.max_seq_len", SEQ, "bench"),
            ("train.steps", warmup + steps, "bench"), ("train.global_batch_size", MICRO, "bench"),
            ("train.micro_batch_size", MICRO, "bench"), ("train.log_steps", warmup, "bench"),
            ("train.eval_steps", 0, "bench"), ("train.save_steps", 0, "bench"),
            ("train.warmup_steps", 10, "bench"), ("train.weight_decay", 0.0, "bench")]
    recipe, sources = load_recipe_sources("tiny-demo", sets)
    run_dir.mkdir(parents=True)
    t = trainer_mod.build(recipe, sources, world, run_dir, None)
    t.train()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r.get("step") == warmup + steps][0]
    return 1.0 / last["step_time"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: on a shared machine, spinning OpenMP threads that "
                   "lose their core to another program make the timings meaningless)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    warmup = a.steps  # the trainer logs every `warmup` steps: the second window is timed
    logging_off()
    for k in ("RANK", "WORLD_SIZE", "SLURMTRAIN_STOP_FILE"):
        os.environ.pop(k, None)
    world = init_world()
    hand, ours = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "c.jsonl"
            corpus(data)
            args = load_recipe_sources("tiny-demo")[0]
            from slurmtrain.recipes.recipe import model_args
            margs = model_args(args)
            for r in range(a.rounds):
                hand.append(hand_loop(margs, a.steps, warmup))
                ours.append(trainer_run(world, data, Path(tmp) / f"run{r}", a.steps, warmup))
                print(f"round {r + 1}: hand loop {hand[-1]:.2f} steps/s, trainer {ours[-1]:.2f} "
                      f"steps/s", flush=True)
    finally:
        close_world()
    h, o = statistics.median(hand), statistics.median(ours)
    print(f"\ntiny preset, micro-batch {MICRO} x {SEQ} tokens, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}")
    print(f"hand-written loop: {h:.2f} steps/s (median of {a.rounds})")
    print(f"slurmtrain.train:  {o:.2f} steps/s (median of {a.rounds})")
    print(f"best round: hand loop {max(hand):.2f}, trainer {max(ours):.2f} steps/s, ratio "
          f"{max(ours) / max(hand):.3f}  (best-of-N is the least disturbed by other load)")
    ratios = sorted(x / y for x, y in zip(ours, hand))
    print(f"ratio trainer / hand loop: {o / h:.3f} (medians); per round, median "
          f"{statistics.median(ratios):.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}")


def logging_off() -> None:
    import logging
    logging.basicConfig(level=logging.WARNING)


if __name__ == "__main__":
    main()
