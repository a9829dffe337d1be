"""GPU speed of the built-in trainer against a hand-written minimal loop, in one command.

    python scripts/bench_gpu.py --preset tinyllama-1.1b --seq 2048 --micro-batch 4
    python scripts/bench_gpu.py --preset llama3-8b --layers 8 --seq 2048 --micro-batch 2
    python scripts/bench_gpu.py --quick          # CPU smoke run of the tiny preset

Needs only PyTorch and this repository; the tokens are synthetic (uniform random ids), so
nothing is read or downloaded. In one process, one after the other:

1. The trainer: ``slurmtrain.train.trainer.build`` on a one-process group, then
   ``Trainer.train()`` itself (step, stop check, metrics), ``warmup`` steps then ``steps``
   timed steps; the metrics record at the end of the timed window gives the mean step
   time (the log step reads the loss, which waits for the device: the window is whole).
   The corpus loader is replaced by the synthetic tokens and the final checkpoint by a
   no-op (a checkpoint is not a step; ``scripts/bench_preempt.py`` measures saving).
2. The minimal loop: the same ``Transformer``, built on the device, bf16 autocast (fp32 on
   CPU, as the trainer's dtype "auto"), AdamW fused on CUDA, gradient clipping, the same
   per-block ``torch.compile`` and activation checkpointing when asked, tokens already on
   the device; ``torch.cuda.synchronize`` around the timed steps.

MFU = F * tokens/s / P, where F = ``presets.flops_per_token`` = 6 * N + 12 * L * d * s:
N the weights a token multiplies through (every parameter but the input embedding and
the norms), L layers, d model width, s sequence length; 12 * L * d * s is the attention
score and value products, forward and backward, not halved for the causal mask (the
PaLM appendix B count, as torchtitan reports). P is the device's dense bf16 peak from
``metrics._PEAK_BF16`` by device name (H100 SXM 989, H100 PCIe 756, H200 989, A100 312
TFLOP/s, ...); beside it, the same F * tokens/s over a measured matmul ceiling (the best
of a run of square matmuls: bf16 8192 on a GPU, fp32 512 on CPU).

Host syncs: on CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` is on over the timed steps
but off while the trainer logs (a log step reads the loss on purpose), and every warning is
reported; on CPU the Python-level counting hook of ``slurmtrain.train.syncwatch`` does the
same. The output is printed and written as JSON (``--out``, default bench_gpu.json).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmtrain.train import speed  # noqa: E402
from slurmtrain.train import trainer as trainer_mod  # noqa: E402
from slurmtrain.train.data import PackedCorpus  # noqa: E402
from slurmtrain.train.distributed import close_world, init_world  # noqa: E402
from slurmtrain.train.metrics import peak_flops, peak_mem_gib  # noqa: E402
from slurmtrain.train.model import Transformer  # noqa: E402
from slurmtrain.train.presets import flops_per_token, get_preset, param_count  # noqa: E402
from slurmtrain.train.recipe import load_recipe_sources, model_args  # noqa: E402
from slurmtrain.train.syncwatch import SyncWatch  # noqa: E402

FORMULA = ("mfu = (6*N + 12*L*d*s) * tokens_per_s / peak_bf16; N = parameters a token "
           "multiplies through (all but input embedding and norms), L layers, d width, s "
           "sequence length; attention term not halved for the causal mask")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="tinyllama-1.1b")
    p.add_argument("--layers", type=int, help="n_layers override (to fit llama3-8b on one GPU)")
    p.add_argument("--seq", type=int, default=2048, help="tokens per sequence")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile each block (default: on with CUDA, off on CPU)")
    p.add_argument("--ac", action=argparse.BooleanOptionalAction, default=False,
                   help="activation checkpointing")
    p.add_argument("--quick", action="store_true",
                   help="smoke run on CPU: tiny preset, seq 64, 3+2 steps; not a speed figure")
    p.add_argument("--out", default="bench_gpu.json", help="JSON output file")
    a = p.parse_args(argv)
    if a.quick:
        a.preset, a.seq, a.micro_batch, a.steps, a.warmup = "tiny", 64, 2, 3, 2
        a.compile = bool(a.compile)
    return a


def synthetic_corpus(vocab: int, seq: int, n: int) -> PackedCorpus:
    rng = np.random.default_rng(0)
    train = rng.integers(0, vocab, (n, seq + 1), dtype=np.int32)
    return PackedCorpus(train=train, val=train[:0], n_docs=0, n_tokens=train.size)


class NoSave:
    """Stands in for the Checkpointer after the run is built: no checkpoint is timed."""
    last_saved = None

    def save(self, step: int) -> None:
        pass

    def wait(self) -> None:
        pass


class SyncReport:
    """Host syncs over the timed steps, with the trainer's log calls left out."""

    def __init__(self, device: torch.device):
        self.device, self.seen, self.on = device, [], False
        self._watch = SyncWatch() if device.type == "cpu" else None
        self._caught = None

    def start(self) -> None:
        self.on = True
        if self._watch is not None:
            self._watch.__enter__()
            self._watch.armed = True
        else:
            self._caught = warnings.catch_warnings(record=True)
            self.seen = self._caught.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def pause(self, paused: bool) -> None:
        if not self.on:
            return
        if self._watch is not None:
            self._watch.armed = not paused
        else:
            torch.cuda.set_sync_debug_mode(0 if paused else "warn")

    def stop(self) -> dict:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            sites = list(self._watch.calls)
            method = "syncwatch (Python-level count of item/cpu/tolist/float/bool... from slurmtrain code; CPU)"
        else:
            torch.cuda.set_sync_debug_mode(0)
            self._caught.__exit__(None, None, None)
            sites = [f"{w.filename}:{w.lineno}: {w.message}" for w in self.seen
                     if "synchroniz" in str(w.message).lower()]
            method = 'torch.cuda.set_sync_debug_mode("warn") over the timed steps, log calls excluded'
        return {"method": method, "count": len(sites), "sites": sorted(set(sites))[:20]}


def run_trainer(a, world, tmp: Path) -> tuple[dict, dict, dict]:
    sets = [("model.preset", a.preset, "bench"), ("data.path", str(tmp / "unused.jsonl"), "bench"),
            ("data.max_seq_len", a.seq, "bench"), ("data.val_fraction", 0.0, "bench"),
            ("train.steps", a.warmup + a.steps, "bench"),
            ("train.global_batch_size", a.micro_batch, "bench"),
            ("train.micro_batch_size", a.micro_batch, "bench"),
            ("train.log_steps", a.warmup, "bench"), ("train.eval_steps", 0, "bench"),
            ("train.save_steps", 0, "bench"), ("train.warmup_steps", 2, "bench"),
            ("train.grad_clip", 1.0, "bench"), ("train.compile", a.compile, "bench"),
            ("train.activation_checkpointing", a.ac, "bench"), ("train.dtype", "auto", "bench")]
    if a.layers:
        sets.append(("model.n_layers", a.layers, "bench"))
    recipe, sources = load_recipe_sources("tiny-demo", sets)
    args = model_args(recipe)
    (tmp / "run").mkdir()
    (tmp / "unused.jsonl").write_text('{"text": "synthetic tokens are used instead"}\n')
    n = (a.warmup + a.steps) * a.micro_batch + 1
    real_load = trainer_mod.data_mod.load_corpus
    trainer_mod.data_mod.load_corpus = lambda *_a, **_k: synthetic_corpus(args.vocab_size, a.seq, n)
    try:
        t = trainer_mod.build(recipe, sources, world, tmp / "run", None)
    finally:
        trainer_mod.data_mod.load_corpus = real_load
    t.ckpt = NoSave()
    opts = speed.options(recipe, t.optim, world.device, t.accum)
    syncs = SyncReport(world.device)
    real_log, logged = t._log, []

    def log_hook(*args_, **kwargs):
        syncs.pause(True)
        real_log(*args_, **kwargs)
        logged.append(1)
        if len(logged) == 1:
            syncs.start()  # the warm-up window has been logged: the timed steps begin
        syncs.pause(False)
    t._log = log_hook
    if world.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        t.train()
    finally:
        report = syncs.stop() if syncs.on else {"method": "not started", "count": None, "sites": []}
    records = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r.get("step") == a.warmup + a.steps][0]
    result = {"step_time_s": last["step_time"], "peak_mem_gib": peak_mem_gib(world.device),
              "final_loss": last["loss"]}
    del t
    return result, opts, report


def hand_loop(a, args, device: torch.device, dtype: torch.dtype | None) -> dict:
    """The minimal loop (see the module docstring)."""
    from torch.utils.checkpoint import checkpoint

    with torch.device(device):
        model = Transformer(args)
    model.init_weights(seed=0)
    if a.ac:
        class Recompute(torch.nn.Module):
            def __init__(self, block):
                super().__init__()
                self.block = block

            def forward(self, x, cos, sin):
                return checkpoint(self.block, x, cos, sin, use_reentrant=False)
        for i, block in enumerate(model.layers):
            model.layers[i] = Recompute(block)
    if a.compile:
        for block in model.layers:
            block.compile(fullgraph=True)
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=fused)
    data = torch.randint(0, args.vocab_size, (a.warmup + a.steps, a.micro_batch, a.seq + 1),
                         device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            sync(device)
            start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(data[i, :, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), data[i, :, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    sync(device)
    step_time = (time.perf_counter() - start) / a.steps
    return {"step_time_s": step_time, "peak_mem_gib": peak_mem_gib(device),
            "fused_optimizer": fused}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_ceiling(device: torch.device) -> tuple[float, str]:
    """Best FLOP/s of square matmuls: the most this device does in practice."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (512, torch.float32)
    x = torch.randn(n, n, device=device, dtype=dtype)
    y = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(3):
        x @ y
    for _ in range(5 if device.type == "cuda" else 3):
        sync(device)
        start = time.perf_counter()
        for _ in range(10):
            x @ y
        sync(device)
        best = min(best, (time.perf_counter() - start) / 10)
    return 2 * n**3 / best, f"{str(dtype).replace('torch.', '')} {n}x{n} matmul, best of runs"


def figures(step_time: float, tokens_per_step: int, flops_tok: int, peak, ceiling) -> dict:
    tok_s = tokens_per_step / step_time
    achieved = flops_tok * tok_s
    return {"tokens_per_s": round(tok_s, 1), "step_time_s": round(step_time, 6),
            "achieved_tflops": round(achieved / 1e12, 4),
            "mfu": round(achieved / peak, 4) if peak else None,
            "mfu_vs_matmul_ceiling": round(achieved / ceiling, 4)}


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    cuda = torch.cuda.is_available() and not a.quick
    if not cuda and not a.quick:
        print("bench_gpu: no CUDA device here; --quick runs the CPU smoke version",
              file=sys.stderr)
        return 2
    import logging
    logging.basicConfig(level=logging.WARNING)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMTRAIN_STOP_FILE"):
        os.environ.pop(k, None)
    if a.compile is None:
        a.compile = cuda
    if not cuda:
        torch.set_num_threads(1)  # a smoke run: one thread keeps it cheap on a shared machine
        torch.cuda.is_available = lambda: False  # --quick on a GPU machine: init_world takes CUDA
    world = init_world()
    device = world.device
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ours, opts, syncs = run_trainer(a, world, Path(tmp))
    finally:
        close_world()
    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    from dataclasses import replace
    args = replace(get_preset(a.preset), n_layers=a.layers) if a.layers else get_preset(a.preset)
    dtype = trainer_mod.compute_dtype("auto", device)
    hand = hand_loop(a, args, device, dtype)
    peak = peak_flops(device)
    ceiling, ceiling_how = matmul_ceiling(device)
    flops_tok = flops_per_token(args, a.seq)
    tokens = a.micro_batch * a.seq
    t_fig = figures(ours["step_time_s"], tokens, flops_tok, peak, ceiling)
    h_fig = figures(hand["step_time_s"], tokens, flops_tok, peak, ceiling)
    name = torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine())
    flash = speed.flash_attention_usable(args.n_heads, args.n_kv_heads, args.head_dim, a.seq, device)
    out = {
        "kind": "gpu" if cuda else "cpu-smoke (not a speed figure)",
        "device": name, "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python scripts/bench_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": {"preset": a.preset, "n_layers": args.n_layers, "dim": args.dim,
                  "params": param_count(args), "seq": a.seq, "vocab": args.vocab_size},
        "config": {**opts, "steps": a.steps, "warmup": a.warmup,
                   "compute_dtype": str(dtype).replace("torch.", "") if dtype else "float32",
                   "flash_attention": flash[0], "flash_attention_note": flash[1]},
        "flops": {"per_token": flops_tok, "formula": FORMULA,
                  "peak_bf16_flops": peak,
                  "peak_source": ("metrics._PEAK_BF16 by device name" if peak else
                                  "none: CPU or a device not in the table"),
                  "matmul_ceiling_flops": round(ceiling), "matmul_ceiling_how": ceiling_how},
        "trainer": {**t_fig, "peak_mem_gib": round(ours["peak_mem_gib"], 3),
                    "final_loss": ours["final_loss"]},
        "hand_loop": {**h_fig, "peak_mem_gib": round(hand["peak_mem_gib"], 3),
                      "fused_optimizer": hand["fused_optimizer"]},
        "ratio_trainer_over_hand_loop": round(t_fig["tokens_per_s"] / h_fig["tokens_per_s"], 4),
        "host_syncs_in_timed_steps": syncs,
        "peak_mem_kind": ("torch.cuda.max_memory_allocated per phase" if cuda else
                          "process max RSS (CPU: not per phase)"),
    }
    text = json.dumps(out, indent=2)
    print(text)
    Path(a.out).write_text(text + "\n")
    verdict = "not slower" if out["ratio_trainer_over_hand_loop"] >= 1.0 else "SLOWER"
    print(f"\ntrainer {t_fig['tokens_per_s']:,.0f} tok/s vs hand loop {h_fig['tokens_per_s']:,.0f} "
          f"tok/s: ratio {out['ratio_trainer_over_hand_loop']:.3f} ({verdict}); MFU "
          f"{t_fig['mfu'] if t_fig['mfu'] is not None else 'n/a (no bf16 peak for this device)'}; "
          f"host syncs in timed steps: {syncs['count']}; written to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
