"""Issue 13 on CPU: the GPU benchmark's smoke mode and the speed options that a CPU can check
(fused AdamW fallback, per-block compile without graph breaks, SDPA, pinned copies)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from trainer_util import REPO, env  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    import waiting

    tmp = tmp_path_factory.mktemp("bench_gpu")
    out = tmp / "out.json"
    proc = waiting.run([sys.executable, str(REPO / "scripts" / "bench_gpu.py"), "--quick",
                        "--profile", "--out", str(out)], "bench_gpu.py --quick --profile", [tmp], cwd=tmp, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc


@pytest.mark.slow
def test_bench_gpu_quick_reports_every_field(quick):
    data, proc = quick
    assert json.loads(proc.stdout[:proc.stdout.rindex("}") + 1]) == data  # printed = written
    assert data["kind"].startswith("cpu-smoke") and "not a speed figure" in data["kind"]
    assert data["torch"] == torch.__version__ and data["device"] and data["date"]
    assert data["command"].startswith("python scripts/bench_gpu.py --quick --profile --out ")
    assert data["model"] == {"preset": "tiny", "n_layers": 2, "dim": 64, "params": 131904,
                             "seq": 64, "vocab": 320}
    cfg = data["config"]
    assert cfg["compile"] is False and cfg["activation_checkpointing"] is False
    assert cfg["micro_batch"] == 2 and cfg["grad_accum"] == 1 and cfg["steps"] == 3
    assert cfg["fused_optimizer"] is False and "CUDA only" in cfg["optimizer_note"]
    assert cfg["compute_dtype"] == "float32" and cfg["flash_attention"] is False
    assert "scaled_dot_product_attention" in cfg["attention"]
    flops = data["flops"]
    assert flops["per_token"] > 0 and "6*N + 12*L*d*s" in flops["formula"]
    assert flops["peak_bf16_flops"] is None and flops["matmul_ceiling_flops"] > 0
    tokens = 2 * 64
    for side in ("trainer", "hand_loop"):
        fig = data[side]
        assert fig["step_time_s"] > 0 and fig["peak_mem_gib"] > 0
        assert fig["tokens_per_s"] == pytest.approx(tokens / fig["step_time_s"], rel=1e-3, abs=0.1)
        assert fig["mfu"] is None  # no bf16 peak on a CPU: never a made-up figure
        assert fig["mfu_vs_matmul_ceiling"] == pytest.approx(
            flops["per_token"] * fig["tokens_per_s"] / flops["matmul_ceiling_flops"], rel=0.05,
            abs=1e-4)
    assert 0 < data["trainer"]["final_loss"] < 10
    assert data["ratio_trainer_over_hand_loop"] == pytest.approx(
        data["trainer"]["tokens_per_s"] / data["hand_loop"]["tokens_per_s"], rel=1e-3)
    syncs = data["host_syncs_in_timed_steps"]
    assert syncs["method"].startswith("syncwatch") and syncs["count"] == 0 and syncs["sites"] == []
    assert "ratio" in proc.stderr and "host syncs in timed steps: 0" in proc.stderr
    prof = data["profile"]
    assert prof["wall_s"] > 0 and prof["gpu_kernel_share"] is None and len(prof["top"]) == 15
    names = [row["name"] for row in prof["top"]]
    assert any("mm" in n for n in names) and all(row["self_ms"] > 0 for row in prof["top"])
    assert any("scaled_dot_product" in n for n in names)  # the attention ran through SDPA
    assert json.loads(Path(prof["trace"]).read_text())["traceEvents"]


@pytest.mark.slow
def test_bench_gpu_without_cuda_and_without_quick_exits_2():
    if torch.cuda.is_available():
        print("this machine has CUDA: the no-GPU refusal cannot be seen here")
        pytest.skip("machine has CUDA")
    import subprocess
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_gpu.py")],
                          capture_output=True, text=True, env=env())
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--quick" in proc.stderr


def test_fused_adamw_only_on_cuda_and_the_fallback_is_said():
    from slurmtrain.train.speed import fused_adamw
    assert fused_adamw(torch.device("cuda", 0)) == (True, "fused AdamW (CUDA)")
    fused, note = fused_adamw(torch.device("cpu"))
    assert not fused and "CUDA only" in note and "cpu" in note


@pytest.mark.slow
def test_a_block_compiles_as_one_graph():
    """torch.compile per block with fullgraph=True needs no graph break: dynamo's explain
    on one block of the tiny preset, bare and inside the activation-checkpointing wrapper
    (the trainer compiles the wrapped block), finds one graph and no break."""
    from slurmtrain.train.model import Transformer
    from slurmtrain.train.parallelize import apply_ac
    from slurmtrain.recipes.presets import get_preset

    model = Transformer(get_preset("tiny"))
    model.init_weights(seed=0)
    x = torch.randn(2, 16, 64, requires_grad=True)
    cos, sin = model.rope(16)
    bare = model.layers[0]
    apply_ac(model)
    assert model.layers[0] is not bare
    for block in (bare, model.layers[0]):
        torch._dynamo.reset()
        try:
            explained = torch._dynamo.explain(block)(x, cos, sin)
        finally:
            torch._dynamo.reset()
        assert explained.graph_count == 1 and explained.graph_break_count == 0, \
            (type(block).__name__, explained.break_reasons)


@pytest.mark.slow
def test_all_blocks_share_one_compiled_graph():
    """Compiled block by block, 12 blocks (more than dynamo's recompile limit of 8) run one
    graph: parameters are graph inputs, not guarded constants, so no block recompiles or
    falls back to eager. (The eager backend: dynamo's capture without inductor's build.)"""
    import dataclasses

    from torch._dynamo.utils import counters

    from slurmtrain.train.model import Transformer
    from slurmtrain.recipes.presets import get_preset

    model = Transformer(dataclasses.replace(get_preset("tiny"), n_layers=12))
    model.init_weights(seed=0)
    torch._dynamo.reset()
    counters.clear()
    try:
        for block in model.layers:
            block.compile(fullgraph=True, backend="eager")
        tokens = torch.randint(0, 320, (2, 16))
        for _ in range(2):
            model(tokens).sum().backward()
        assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
        assert counters["stats"]["calls_captured"] > 0
    finally:
        torch._dynamo.reset()


def test_attention_goes_through_sdpa(monkeypatch):
    """Every block's attention is one scaled_dot_product_attention call (causal, GQA without
    repeated k/v), the kernel that picks flash attention on a GPU."""
    from slurmtrain.train import model as model_mod
    from slurmtrain.recipes.presets import get_preset

    calls = []
    real = model_mod.F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append((q.shape[1], k.shape[1], kw))
        return real(q, k, v, **kw)
    monkeypatch.setattr(model_mod.F, "scaled_dot_product_attention", spy)
    model = model_mod.Transformer(get_preset("tiny"))
    model.init_weights(seed=0)
    model(torch.randint(0, 320, (2, 16)))
    assert calls == [(4, 2, {"is_causal": True, "enable_gqa": True})] * 2


def test_to_device_pins_before_a_gpu_copy(monkeypatch):
    """A copy to a GPU starts from pinned memory (no wait for the device queue); CPU runs
    pass the tensor through untouched."""
    from slurmtrain.train.data import to_device

    seen = []
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: False)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: seen.append("pin") or self)
    real_to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "to", lambda self, device, non_blocking=False:
                        seen.append(("to", str(device), non_blocking)) or self)
    t = torch.zeros(2)
    to_device(t, torch.device("cuda", 0))
    assert seen == ["pin", ("to", "cuda:0", True)]
    monkeypatch.setattr(torch.Tensor, "to", real_to)
    seen.clear()
    assert to_device(t, torch.device("cpu")) is t and seen == []


@pytest.mark.parametrize("name, tflops", [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835),
    ("NVIDIA H200", 989), ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A10G", 70),
    ("NVIDIA L40S", 362), ("Some Future GPU", None)])
def test_mfu_peak_is_read_by_device_name(monkeypatch, name, tflops):
    """The MFU denominator: dense bf16 peaks from the data sheets, the most specific name
    first (H100 PCIe before H100, A100 before A10); an unknown device gets no MFU."""
    from slurmtrain.train.metrics import peak_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    got = peak_flops(torch.device("cuda", 0))
    assert got == (tflops * 1e12 if tflops else None)
