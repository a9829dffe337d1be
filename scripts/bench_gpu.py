"""GPU speed of the built-in trainer against a hand-written minimal loop, in one command.

    python scripts/bench_gpu.py --preset tinyllama-1.1b --seq 2048 --micro-batch 4
    python scripts/bench_gpu.py --preset llama3-8b --layers 8 --seq 2048 --micro-batch 2
    python scripts/bench_gpu.py --quick          # CPU smoke run of the tiny preset

Needs only PyTorch and this repository; the tokens are synthetic (uniform random ids), so
nothing is read or downloaded. In one process, one after the other:

1. The trainer: ``slurmtrain.train.trainer.build`` on a one-process group, then
   ``Trainer.train()`` itself (step, stop check, metrics every ``warmup`` steps),
   ``warmup`` steps, then ``steps`` timed ones between two device syncs, then one more
   (``--profile`` profiles it). The corpus loader is replaced by the synthetic tokens and the final checkpoint by a
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
same. ``--profile`` runs one more trainer step under torch.profiler after the timed ones:
the top kernels by self time (CPU: operators), the share of the step the GPU spent in
kernels (the rest is idle: launch gaps, host work), and a Chrome trace next to the JSON.
The output is printed and written as JSON (``--out``, default bench_gpu.json).
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
from slurmtrain.train import optim as optim_mod  # noqa: E402
from slurmtrain.train import trainer as trainer_mod  # noqa: E402
from slurmtrain.train.data import PackedCorpus  # noqa: E402
from slurmtrain.train.distributed import close_world, init_world  # noqa: E402
from slurmtrain.train.metrics import peak_flops, peak_mem_gib  # noqa: E402
from slurmtrain.train.model import Transformer  # noqa: E402
from slurmtrain.recipes.presets import flops_per_token, get_preset, param_count  # noqa: E402
from slurmtrain.recipes.recipe import load_recipe_sources, model_args  # noqa: E402
from slurmtrain.train.syncwatch import SyncWatch  # noqa: E402

LR, WEIGHT_DECAY = 3e-4, 0.1  # the same for both loops (AdamW does the same work)
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
    p.add_argument("--profile", action="store_true",
                   help="profile one more trainer step: top kernels, GPU busy share, Chrome trace")
    p.add_argument("--out", default="bench_gpu.json",
                   help="JSON output file (the trace goes next to it: <out>.trace.json)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 1:
        p.error("--steps and --warmup must be at least 1")
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

    def clear_memory(self) -> None:
        pass


class SyncReport:
    """Host syncs over the timed steps, with the trainer's log calls left out."""

    def __init__(self, device: torch.device):
        self.on = False
        self._watch = SyncWatch() if device.type == "cpu" else None
        self._caught, self._seen = None, []

    def _arm(self, on: bool) -> None:
        if self._watch is not None:
            self._watch.armed = on
        else:
            torch.cuda.set_sync_debug_mode("warn" if on else 0)

    def start(self) -> None:
        if self._watch is not None:
            self._watch.__enter__()
        else:
            self._caught = warnings.catch_warnings(record=True)
            self._seen = self._caught.__enter__()
            warnings.simplefilter("always")
        self.on = True
        self._arm(True)

    def pause(self, paused: bool) -> None:
        if self.on:
            self._arm(not paused)

    def finish(self) -> dict:
        if not self.on:
            return {"method": "not reached", "count": None, "sites": []}
        self._arm(False)
        self.on = False
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            sites = list(self._watch.calls)
            method = ("syncwatch: Python-level count of item/cpu/tolist/float/bool... reached "
                      "from slurmtrain code (CPU)")
        else:
            self._caught.__exit__(None, None, None)
            # torch's own notice that the debug mode is a prototype is not a sync: it came
            # back as the one "site" of the first GPU runs (H200, torch 2.11, 2026-11-26).
            sites = [f"{w.filename}:{w.lineno}: {w.message}" for w in self._seen
                     if "synchroniz" in str(w.message).lower()
                     and "prototype feature" not in str(w.message)]
            method = 'torch.cuda.set_sync_debug_mode("warn") over the timed steps, log calls excluded'
        return {"method": method, "count": len(sites), "sites": sorted(set(sites))[:20]}


def run_trainer(a, world, tmp: Path, trace: Path) -> tuple[dict, dict, dict, dict | None]:
    """The trainer's own loop: ``warmup`` steps, ``steps`` timed ones, and one more whose
    start ends the timed window (and which ``--profile`` profiles). The window runs from a
    device sync before the first timed step to one after the last, so it holds whole
    steps, stop checks and the log calls of the metrics every ``warmup`` steps."""
    w, n_timed = a.warmup, a.steps
    total = w + n_timed + 1
    sets = [("model.preset", a.preset, "bench"), ("data.path", str(tmp / "unused.jsonl"), "bench"),
            ("data.max_seq_len", a.seq, "bench"), ("data.val_fraction", 0.0, "bench"),
            ("train.steps", total, "bench"),
            ("train.global_batch_size", a.micro_batch, "bench"),
            ("train.micro_batch_size", a.micro_batch, "bench"),
            ("train.log_steps", w, "bench"), ("train.eval_steps", 0, "bench"),
            ("train.save_steps", 0, "bench"), ("train.warmup_steps", 2, "bench"),
            ("train.lr", LR, "bench"), ("train.min_lr", LR / 10, "bench"),
            ("train.weight_decay", WEIGHT_DECAY, "bench"),
            ("train.grad_clip", 1.0, "bench"), ("train.compile", a.compile, "bench"),
            ("train.activation_checkpointing", a.ac, "bench"), ("train.dtype", "auto", "bench")]
    if a.layers:
        sets.append(("model.n_layers", a.layers, "bench"))
    recipe, sources = load_recipe_sources("tiny-demo", sets)
    args = model_args(recipe)
    (tmp / "run").mkdir()
    (tmp / "unused.jsonl").write_text('{"text": "synthetic tokens are used instead"}\n')
    real_load = trainer_mod.data_mod.load_corpus
    trainer_mod.data_mod.load_corpus = lambda *_a, **_k: synthetic_corpus(
        args.vocab_size, a.seq, total * a.micro_batch + 1)
    try:
        t = trainer_mod.build(recipe, sources, world, tmp / "run", None)
    finally:
        trainer_mod.data_mod.load_corpus = real_load
    t.ckpt = NoSave()
    opts = speed.options(recipe, t.engine.optim, world.device, t.accum)
    device, syncs, clock, found, prof = world.device, SyncReport(world.device), {}, {}, {}
    real_step, real_log = t._train_step, t._log

    def step_hook():
        if t.step == w:  # the first timed step begins
            sync(device)
            clock["start"] = time.perf_counter()
            syncs.start()
        elif t.step == w + n_timed:  # the timed steps are done
            found.update(syncs.finish())
            sync(device)
            clock["end"] = time.perf_counter()
            if a.profile:
                return profile_step(real_step, device, prof, trace)
        return real_step()

    def log_hook(*args_, **kwargs):
        syncs.pause(True)  # a log step reads the loss on purpose
        try:
            real_log(*args_, **kwargs)
        finally:
            syncs.pause(False)
    t._train_step, t._log = step_hook, log_hook
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        t.train()
    finally:
        if syncs.on:
            syncs.finish()
    records = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    result = {"step_time_s": (clock["end"] - clock["start"]) / n_timed,
              "peak_mem_gib": peak_mem_gib(device), "final_loss": losses[-1]}
    del t, real_step, real_log
    return result, opts, found, (prof or None)


def profile_step(step, device: torch.device, out: dict, trace: Path):
    """One step under torch.profiler: the top kernels (CPU: operators) by self time, the
    share of the step's wall time the GPU spent in kernels, and a Chrome trace file."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        result = step()
        sync(device)
    wall = time.perf_counter() - start
    # On a GPU only the kernels' own entries count (an operator's row repeats its kernels).
    rows = [(e.key, e.self_device_time_total if cuda else e.self_cpu_time_total, e.count)
            for e in prof.key_averages()
            if not cuda or e.device_type == torch.autograd.DeviceType.CUDA]
    rows = sorted((r for r in rows if r[1] > 0), key=lambda r: -r[1])
    busy = sum(r[1] for r in rows) / 1e6
    prof.export_chrome_trace(str(trace))
    out.update({
        "what": "the step after the timed ones, under torch.profiler (slower than unprofiled)",
        "wall_s": round(wall, 6),
        "gpu_kernel_share": round(busy / wall, 4) if cuda else None,
        "idle_note": ("1 - gpu_kernel_share is the step's time with no kernel running "
                      "(launch gaps, host work, syncs)") if cuda else "CPU: no device timeline",
        "top": [{"name": k[:120], "self_ms": round(us / 1e3, 3), "calls": c}
                for k, us, c in rows[:15]],
        "trace": str(trace)})
    return result


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
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95),
                            weight_decay=WEIGHT_DECAY, fused=fused)
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


def report(a, argv, device: torch.device, args, dtype, ours: dict, opts: dict, syncs: dict,
           prof: dict | None, hand: dict) -> dict:
    """The JSON record of one run (see the module docstring for the formula)."""
    cuda = device.type == "cuda"
    peak = peak_flops(device)
    ceiling, ceiling_how = matmul_ceiling(device)
    flops_tok = flops_per_token(args, a.seq)
    tokens = a.micro_batch * a.seq
    t_fig = figures(ours["step_time_s"], tokens, flops_tok, peak, ceiling)
    h_fig = figures(hand["step_time_s"], tokens, flops_tok, peak, ceiling)
    name = torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine())
    flash = speed.flash_attention_usable(args.n_heads, args.n_kv_heads, args.head_dim, a.seq, device)
    return {
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
        "profile": prof,
        "peak_mem_kind": ("torch.cuda.max_memory_allocated per phase" if cuda else
                          "process max RSS (CPU: not per phase)"),
    }


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
            ours, opts, syncs, prof = run_trainer(a, world, Path(tmp),
                                                  Path(a.out).with_suffix(".trace.json"))
    finally:
        close_world()
    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    from dataclasses import replace
    args = replace(get_preset(a.preset), n_layers=a.layers) if a.layers else get_preset(a.preset)
    dtype = optim_mod.compute_dtype("auto", device)
    hand = hand_loop(a, args, device, dtype)
    out = report(a, argv, device, args, dtype, ours, opts, syncs, prof, hand)
    t_fig, h_fig = out["trainer"], out["hand_loop"]
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
