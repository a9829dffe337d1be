"""The recipe's engine choice and DeepSpeed config: read at load, "auto" filled from the
recipe, contradictions and DeepSpeed's pipeline restriction refused (torch-free, fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain.errors import ConfigError
from slurmtrain.recipes import ds_config
from slurmtrain.recipes.recipe import load_recipe_sources

HERE = Path(__file__).parent
CONFIGS = HERE / "ds_configs"
SHIPPED = ["zero1", "zero2", "zero3", "zero3-offload", "pipeline"]

BASE = """\
[model]
preset = "tiny"
[train]
steps = 20
global_batch_size = 8
micro_batch_size = 2
lr = {lr}
weight_decay = {wd}
warmup_steps = {warmup}
engine = "deepspeed"
[deepspeed]
{ds}
"""


def recipe(tmp_path: Path, ds: str, lr: float = 3e-3, wd: float = 0.01, warmup: int = 3,
           extra: str = "") -> Path:
    path = tmp_path / "r.toml"
    path.write_text(BASE.format(ds=ds, lr=lr, wd=wd, warmup=warmup) + extra)
    return path


def resolved(path: Path, world: int = 2, bf16: bool = False) -> dict:
    r, sources = load_recipe_sources(str(path))
    cfg = ds_config.load(r, sources)
    accum = r.train.global_batch_size // (r.train.micro_batch_size * world)
    return ds_config.resolve(cfg, r, sources, accum, bf16)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_load_with_auto_filled(tmp_path, name):
    extra = '[pipeline]\nstages = 2\n' if name == "pipeline" else ""
    out = resolved(recipe(tmp_path, f'config = "{name}"', extra=extra))
    assert out["train_batch_size"] == 8 and out["train_micro_batch_size_per_gpu"] == 2
    assert out["gradient_accumulation_steps"] == 2 and out["gradient_clipping"] == 1.0
    assert out["bf16"]["enabled"] is False and "optimizer" not in out
    stage = {"zero1": 1, "zero2": 2, "zero3": 3, "zero3-offload": 3, "pipeline": 1}[name]
    assert out["zero_optimization"]["stage"] == stage


def test_hf_all_auto_config_loads(tmp_path):
    out = resolved(recipe(tmp_path, f'config = "{CONFIGS / "hf-auto.json"}"'), bf16=True)
    assert out["bf16"]["enabled"] is True and out["fp16"]["enabled"] is False
    assert out["zero_optimization"]["stage"] == 2 and "scheduler" not in out


def test_mistral_guide_config_loads_when_recipe_agrees(tmp_path):
    path = recipe(tmp_path, f'config = "{CONFIGS / "mistral-z2-small-conf.json"}"',
                  lr=6e-4, wd=0.1, warmup=10000)
    out = resolved(path)
    assert out["zero_optimization"]["stage"] == 2 and out["train_batch_size"] == 8


def test_mistral_guide_config_contradicting_lr_names_both(tmp_path):
    conf = CONFIGS / "mistral-z2-small-conf.json"
    path = recipe(tmp_path, f'config = "{conf}"', lr=3e-3, wd=0.1, warmup=10000)
    with pytest.raises(ConfigError) as err:
        load_recipe_sources(str(path))
    msg = str(err.value)
    assert str(conf) in msg and "optimizer.params.lr" in msg and "0.0006" in msg
    assert "train.lr = 0.003" in msg and str(path) in msg


def test_inline_keys_and_zero_stage_override_the_file(tmp_path):
    ds = 'config = "zero2"\nzero_stage = 3\njson = \'{"zero_optimization": {"overlap_comm": true}}\''
    out = resolved(recipe(tmp_path, ds))
    assert out["zero_optimization"] == {"stage": 3, "overlap_comm": True,
                                        "contiguous_gradients": True, "reduce_scatter": True}


@pytest.mark.parametrize("ds, key, words", [
    ('json = \'{"train_batch_size": 16}\'', "train_batch_size", "16 contradicts train.global_batch_size = 8"),
    ('json = \'{"train_micro_batch_size_per_gpu": 4}\'', "train_micro_batch_size_per_gpu", "contradicts train.micro_batch_size = 2"),
    ('json = \'{"gradient_clipping": 0.5}\'', "gradient_clipping", "contradicts train.grad_clip = 1.0"),
    ('json = \'{"fp16": {"enabled": true}}\'', "fp16.enabled", "contradicts train.dtype"),
    ('json = \'{"optimizer": {"type": "Lamb"}}\'', "optimizer.type", "trains with AdamW"),
    ('config = "zero3"\n[pipeline]\nstages = 2', "zero_optimization.stage", "ZeRO stage 0 or 1"),
    ('json = \'{"zero_optimization": {"stage": 5}}\'', "zero_optimization.stage", "expected 0, 1, 2 or 3"),
    ('json = \'{"train_batch_size": \'', "", "not valid JSON"),
    ('config = "nope"', "deepspeed.config", "shipped configs: pipeline, zero1"),
])
def test_bad_configs_are_one_line_errors(tmp_path, ds, key, words):
    with pytest.raises(ConfigError) as err:
        load_recipe_sources(str(recipe(tmp_path, ds)))
    assert err.value.key == key and words in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_accumulation_contradiction_needs_the_world_size(tmp_path):
    path = recipe(tmp_path, 'json = \'{"gradient_accumulation_steps": 4}\'')
    resolved(path, world=1)  # 8 / (2 x 1) = 4: agrees
    with pytest.raises(ConfigError, match="4 contradicts the recipe's 2"):
        resolved(path, world=2)


def test_one_key_switches_engines(tmp_path):
    """The [deepspeed] section stays in the recipe and is not read under fsdp2 (even a
    contradicting one), so --set train.engine=fsdp2 is the whole switch."""
    path = recipe(tmp_path, 'json = \'{"train_batch_size": 16}\'')
    r, _ = load_recipe_sources(str(path), [("train.engine", "fsdp2", "--set")])
    assert r.train.engine == "fsdp2"


def test_cli_exit_2_one_line(tmp_path):
    path = recipe(tmp_path, 'json = \'{"train_batch_size": 16}\'')
    proc = subprocess.run([sys.executable, "-m", "slurmtrain.train", "--recipe", str(path),
                           "--run-dir", str(tmp_path / "run")], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(HERE.parents[1])})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "train_batch_size" in proc.stderr


def test_fmengine_command_line_names(tmp_path, monkeypatch):
    """FMEngine's ``--deepspeed_config ./configs/llama.json --pipe_parallel_size 2
    --model_parallel_size 1 --max_seq_len 64`` (and the launcher's ``--local_rank``) are accepted."""
    from slurmtrain.recipes.trainer_args import parse_args, recipe_sets
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "llama.json").write_text('{"zero_optimization": {"stage": 1}}')
    path = recipe(tmp_path, "").read_text().replace('engine = "deepspeed"\n', "")
    (tmp_path / "plain.toml").write_text(path)
    args = parse_args(["--recipe", "plain.toml", "--local_rank=1", "--deepspeed_config",
                       "./configs/llama.json", "--pipe_parallel_size", "2",
                       "--model_parallel_size", "1", "--max_seq_len", "64"])
    r, sources = load_recipe_sources(args.recipe, recipe_sets(args))
    assert r.train.engine == "deepspeed" and r.pipeline.stages == 2 and r.data.max_seq_len == 64
    assert ds_config.load(r, sources).source == "configs/llama.json"
    bad = parse_args(["--recipe", "plain.toml", "--model_parallel_size", "2"])
    with pytest.raises(ConfigError, match="--model_parallel_size: 2: tensor"):
        recipe_sets(bad)


def test_gen_checks_the_deepspeed_config_and_stays_torch_free(tmp_path):
    """``gen``/``submit --recipe --launcher deepspeed`` read and check the DeepSpeed config
    before anything is queued, without importing torch or deepspeed."""
    (tmp_path / "corpus.jsonl").write_text('{"text": "hello"}\n')
    good = recipe(tmp_path, 'config = "zero3"', extra='[data]\npath = "corpus.jsonl"\n')
    (tmp_path / "bad.toml").write_text(good.read_text().replace(
        'config = "zero3"', 'json = \'{"train_batch_size": 16}\''))
    code = ("import sys; from click.testing import CliRunner; from slurmtrain.cli import main\n"
            "for r in ('r.toml', 'bad.toml'):\n"
            "    res = CliRunner().invoke(main, ['gen', '-p', 'local', '-N', '2', '--launcher', "
            "'deepspeed', '--recipe', r])\n"
            "    print(res.exit_code, res.output.strip().splitlines()[-1])\n"
            "print(' '.join(m for m in ('torch', 'deepspeed') if m in sys.modules) or 'none')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                                            "PYTHONPATH": str(HERE.parents[1])}).stdout
    lines = out.strip().splitlines()
    assert lines[0].startswith("0 "), out
    assert lines[1].startswith("2 ") and "train_batch_size: 16 contradicts" in lines[1], out
    assert lines[-1] == "none", out
