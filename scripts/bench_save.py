#!/usr/bin/env python3
"""The training stall of a checkpoint: a synchronous save against an asynchronous one
(``train.async_save``), the same state, in the same run.

    python scripts/bench_save.py [--rounds 5] [--json out.json]

For each model (``tiny-demo`` as shipped, and a wider CPU model: dim 1024, 8 layers), the
real trainer is built on a one-process group and trained a few steps (so that AdamW holds
its state), then saved ``rounds`` times in each mode, alternating sync and async:

* **stall**: how long ``Checkpointer.save`` keeps the training loop (the call returns: for
  a synchronous save when the step folder is marked COMPLETE; for an asynchronous one when
  DCP has staged a copy of the state and handed the write to its thread);
* **durable**: the same save followed at once by ``Checkpointer.wait`` (the write done on
  every rank, the marker written): what a stop at that moment waits for.

The asynchronous save is measured twice: the trainer's (the state copied into the same host
buffers at every save, pinned on a GPU: ``dcp.ReusedStaging``) and DCP's own staging (fresh
host memory at every save), the way before.

The figure the issue asks for is the ratio of the median stalls, async / sync (goal at most
0.25). With ``--gpu`` the state is on the GPU (a model of 144 M parameters, 1.6 GiB saved):
there the async stall is DCP's copy of the state to host memory. The saves go to a temporary directory on the same disk as /tmp.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gpu import synthetic_corpus  # noqa: E402  (scripts/ is sys.path[0])
from slurmtrain.recipes.recipe import load_recipe_sources, model_args  # noqa: E402
from slurmtrain.recipes.presets import param_count  # noqa: E402
from slurmtrain.train import trainer as trainer_mod  # noqa: E402
from slurmtrain.train.distributed import close_world, init_world  # noqa: E402
from slurmtrain.train.engines import dcp  # noqa: E402

MODELS = {"tiny-demo": [], "wide (dim 1024, 8 layers)": [("model.dim", 1024), ("model.n_layers", 8),
                                                           ("model.n_heads", 16), ("model.n_kv_heads", 16)]}
# --gpu: a state of some gigabytes, where the copy off the GPU is what an async save stalls for
GPU_MODELS = {"dim 2048, 8 layers": [("model.dim", 2048), ("model.n_layers", 8), ("model.n_heads", 16),
                                     ("model.n_kv_heads", 16)]}
SEQ, BATCH, WARM_STEPS = 64, 2, 2


def build(tmp: Path, overrides: list[tuple[str, object]], world):
    """The trainer of tiny-demo (with ``overrides``) on synthetic tokens, trained a few steps."""
    sets = [("data.path", str(tmp / "unused.jsonl"), "bench"), ("data.max_seq_len", SEQ, "bench"),
            ("data.val_fraction", 0.0, "bench"), ("train.steps", WARM_STEPS, "bench"),
            ("train.global_batch_size", BATCH, "bench"), ("train.micro_batch_size", BATCH, "bench"),
            ("train.eval_steps", 0, "bench"), ("train.save_steps", 0, "bench"),
            ("train.keep_last", 1, "bench")] + [(k, v, "bench") for k, v in overrides]
    recipe, sources = load_recipe_sources("tiny-demo", sets)
    args = model_args(recipe)
    run = tmp / "run"
    run.mkdir(exist_ok=True)  # every rank of scripts/bench_load.py builds here
    (tmp / "unused.jsonl").write_text('{"text": "synthetic tokens are used instead"}\n')
    real_load = trainer_mod.data_mod.load_corpus
    trainer_mod.data_mod.load_corpus = lambda *_a, **_k: synthetic_corpus(args.vocab_size, SEQ, 64)
    try:
        t = trainer_mod.build(recipe, sources, world, run, None)
    finally:
        trainer_mod.data_mod.load_corpus = real_load
    for _ in range(WARM_STEPS):
        t._train_step()
    return t, param_count(args)


def measure(t, rounds: int) -> dict:
    """Alternating sync and async saves of the same state: stalls and times to durable."""
    engine = t.engine
    states = {mode: dcp.DcpState(engine.model, engine.optim, engine.scheduler, async_save=mode != "sync")
              for mode in ("sync", "async", "async_fresh")}
    states["async_fresh"]._stager = None  # DCP's own staging: fresh host memory at every save
    got: dict[str, dict[str, list[float]]] = {m: {"stall": [], "durable": []} for m in states}
    step = 1000
    for r in range(rounds + 1):  # the first round warms both paths up and is not counted
        for mode, state in states.items():
            engine.state = state
            step += 1
            start = time.perf_counter()
            t.ckpt.save(step)
            stalled = time.perf_counter() - start
            t.ckpt.wait()
            if r:
                got[mode]["stall"].append(stalled)
                got[mode]["durable"].append(time.perf_counter() - start)
    return {m: {k: round(statistics.median(v), 4) for k, v in d.items()} for m, d in got.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="saves in each mode per model (after one warm-up)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--gpu", action="store_true", help="the state on the GPU (a larger model); else on the CPU")
    ap.add_argument("--dir", help="where the saves go (default: a temporary directory under /tmp)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMTRAIN_STOP_FILE"):
        os.environ.pop(k, None)
    if a.gpu and not torch.cuda.is_available():
        print("bench_save: --gpu, but torch sees no GPU", file=sys.stderr)
        return 2
    if not a.gpu:
        torch.cuda.is_available = lambda: False  # a CPU figure, also on a machine with a GPU
    world = init_world()
    out = {"torch": torch.__version__, "cpus": os.cpu_count(), "load": os.getloadavg()[0],
           "device": torch.cuda.get_device_name() if a.gpu else "cpu", "rounds": a.rounds, "models": {}}
    try:
        for name, overrides in (GPU_MODELS if a.gpu else MODELS).items():
            with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
                t, params = build(Path(tmp), overrides, world)
                figures = measure(t, a.rounds)
                size = sum(f.stat().st_size for f in (Path(tmp) / "run").rglob("*") if f.is_file())
            ratio = figures["async"]["stall"] / figures["sync"]["stall"]
            fresh = figures["async_fresh"]["stall"] / figures["sync"]["stall"]
            out["models"][name] = {"params": params, "checkpoint_mb": round(size / 2**20, 1), **figures,
                                   "stall_ratio_async_over_sync": round(ratio, 3),
                                   "stall_ratio_async_fresh_over_sync": round(fresh, 3)}
            ms = {m: {k: f"{v * 1000:.0f}" for k, v in f.items()} for m, f in figures.items()}
            print(f"{name}: {params:,} parameters, checkpoint {size / 2**20:.1f} MiB; stall sync "
                  f"{ms['sync']['stall']} ms, async {ms['async']['stall']} ms: ratio {ratio:.2f} (goal <= 0.25); "
                  f"async into fresh memory (DCP's own staging) {ms['async_fresh']['stall']} ms: {fresh:.2f}; "
                  f"durable sync {ms['sync']['durable']} ms, async {ms['async']['durable']} ms, "
                  f"fresh {ms['async_fresh']['durable']} ms", flush=True)
    finally:
        close_world()
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
