"""``slurmtrain models`` (torch-free) and ``slurmtrain export RUN --hf OUT``."""

import json
from pathlib import Path
import os
import subprocess
import sys
import types

import click
import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.recipes.presets import PRESETS, param_count


def test_models_lists_every_preset_with_its_exact_count():
    result = CliRunner().invoke(main, ["models"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:2] == ["preset", "params"]
    for name, args in PRESETS.items():
        row = next(line for line in lines if line.split()[0] == name)
        assert f"{param_count(args):,}" in row
        assert f" {args.ffn_dim} " in row
    assert "6,738,415,616" in result.output  # llama2-7b, as published


def test_models_does_not_import_torch():
    code = ("import sys; from click.testing import CliRunner; from slurmtrain.cli import main; "
            "r = CliRunner().invoke(main, ['models']); "
            "assert r.exit_code == 0, r.output; "
            "heavy = [m for m in ('torch', 'safetensors', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_every_trainer_command_has_help():
    for name in ("models", "export"):
        assert main.get_command(click.Context(main), name).help


# ---------------------------------------------------------------- export

def test_export_refuses_a_missing_run_and_an_occupied_output(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["export", str(tmp_path / "nope"), "--hf", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "nope: no such run directory" in result.output

    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("{}")
    result = runner.invoke(main, ["export", str(tmp_path), "--hf", str(out)])
    assert result.exit_code == 2
    assert "already holds a checkpoint; pass --overwrite" in result.output


@pytest.fixture
def fake_checkpoints(monkeypatch):
    """Stands in for slurmtrain.train.engines: export is tested on its own wiring, not
    on the trainer's checkpoint format (the trainer's tests cover load_consolidated)."""
    torch = pytest.importorskip("torch")
    from slurmtrain.train.model import Transformer

    args = PRESETS["tiny"]
    model = Transformer(args)
    model.init_weights(seed=0)
    calls = []

    def load_consolidated(run_dir):
        calls.append(run_dir)
        return args, {k: v.clone() for k, v in model.state_dict().items()}

    module = types.ModuleType("slurmtrain.train.engines")
    module.load_consolidated = load_consolidated
    monkeypatch.setitem(sys.modules, "slurmtrain.train.engines", module)
    return torch, model, calls


@pytest.mark.torch
def test_export_writes_a_checkpoint_transformers_loads(tmp_path, fake_checkpoints):
    torch, model, calls = fake_checkpoints
    transformers = pytest.importorskip("transformers")
    run, out = tmp_path / "run", tmp_path / "hf"
    run.mkdir()
    result = CliRunner().invoke(main, ["export", str(run), "--hf", str(out), "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert calls == [run]
    assert f"exported 131.90K parameters from {run} to {out} (2 model files)" in result.output
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    reference = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = torch.randint(0, 320, (1, 11))
    with torch.no_grad():
        expected = model.to(torch.bfloat16).float()(tokens)
        torch.testing.assert_close(reference(tokens).logits, expected, rtol=1e-4, atol=1e-4)

    again = CliRunner().invoke(main, ["export", str(run), "--hf", str(out), "--overwrite",
                                      "--max-shard-gb", "0.0001"])
    assert again.exit_code == 0, again.output
    assert (out / "model.safetensors.index.json").exists()
    assert not (out / "model.safetensors").exists()


def _a_saved_checkpoint(run: Path, tokenizer: str | None, submit_cwd: Path) -> None:
    """A complete checkpoint folder as far as export's reading of its meta goes (the weights
    come from the stand-in reader), with the run's recipe naming ``tokenizer``."""
    step = run / "checkpoints" / "step_4"
    step.mkdir(parents=True)
    (step / "train_meta.json").write_text(json.dumps({"engine": "deepspeed", "recipe": {"data": {"tokenizer": tokenizer}}}))
    (step / "mp_rank_00_model_states.pt").write_bytes(b"")
    (step / "COMPLETE").write_text("")
    (run / "manifest.json").write_text(json.dumps({"name": run.name, "submit_cwd": str(submit_cwd)}))


@pytest.mark.torch
def test_export_gives_the_runs_tokenizer_ids_and_file(tmp_path, fake_checkpoints):
    """transformers takes BOS 1 and EOS 2 where config.json says nothing: the run's own ids go
    there (the byte-level tokenizer's 256 and 257), and a tokenizer.json beside the weights."""
    from tokenizers import Tokenizer, models
    byte_run, tok_run = tmp_path / "bytes", tmp_path / "tok"
    _a_saved_checkpoint(byte_run, None, tmp_path)
    result = CliRunner().invoke(main, ["export", str(byte_run), "--hf", str(tmp_path / "hf1")])
    assert result.exit_code == 0 and "byte-level tokenizer (ids 0-255 are UTF-8 bytes, BOS 256, EOS 257" in \
        result.output, result.output
    config = json.loads((tmp_path / "hf1" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (256, 257)
    (tmp_path / "tk").mkdir()
    Tokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "[UNK]": 2, "hi": 3}, unk_token="[UNK]")).save(
        str(tmp_path / "tk" / "tokenizer.json"))
    _a_saved_checkpoint(tok_run, "tk/tokenizer.json", tmp_path)  # relative to where the run was submitted
    result = CliRunner().invoke(main, ["export", str(tok_run), "--hf", str(tmp_path / "hf2")])
    assert result.exit_code == 0 and "tokenizer.json and tokenizer_config.json written (BOS 0, EOS 1; BOS put " \
        "before each text" in result.output, result.output
    written = json.loads((tmp_path / "hf2" / "tokenizer.json").read_text())
    assert written["model"] == json.loads((tmp_path / "tk" / "tokenizer.json").read_text())["model"]
    assert written["post_processor"]["type"] == "TemplateProcessing"
    named = json.loads((tmp_path / "hf2" / "tokenizer_config.json").read_text())
    assert (named["bos_token"], named["eos_token"]) == ("<s>", "</s>")
    config = json.loads((tmp_path / "hf2" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)


def test_export_of_a_sweep_or_a_run_without_the_trainers_checkpoints_says_which(tmp_path):
    from slurmtrain.runs import rundir
    sweep = rundir.create(tmp_path / "runs", "lrs")
    sweep.update_manifest(name=sweep.name, job_ids=["9"], sweep={"keys": ["train.lr"], "points": [
        {"task": 0, "label": "lr=1e-3", "values": {}}]})
    result = CliRunner().invoke(main, ["export", str(sweep.path), "--hf", str(tmp_path / "o")])
    assert result.exit_code == 2 and "is a sweep: export one of its points" in result.output, result.output
    mine = rundir.create(tmp_path / "runs", "mine")
    mine.update_manifest(name=mine.name, job_ids=["10"])
    result = CliRunner().invoke(main, ["export", str(mine.path), "--hf", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no complete checkpoint of the built-in trainer" in result.output, \
        result.output


def test_export_without_a_checkpoint_reader_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "slurmtrain.train.engines",
                        types.ModuleType("slurmtrain.train.engines"))
    result = CliRunner().invoke(main, ["export", str(tmp_path), "--hf", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.output.startswith("slurmtrain: error: cannot read checkpoints: cannot import "
                                    "name 'load_consolidated'")


RECIPE = """\
[model]
preset = "tiny"

[data]
path = "corpus.jsonl"
max_seq_len = 32
val_fraction = 0.1

[train]
steps = 2
global_batch_size = 2
micro_batch_size = 2
warmup_steps = 1
save_steps = 2
"""


@pytest.mark.torch
@pytest.mark.slow
def test_export_of_a_real_training_run(tmp_path):
    """Trainer checkpoint -> slurmtrain export -> transformers, with the real checkpoint format."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.model import Transformer

    with (tmp_path / "corpus.jsonl").open("w") as fh:
        for i in range(40):
            fh.write(json.dumps({"text": f"document {i}: " + "abc " * 30}) + "\n")
    (tmp_path / "recipe.toml").write_text(RECIPE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMTRAIN_")}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=repo)
    done = subprocess.run([sys.executable, "-m", "slurmtrain.train", "--recipe", "recipe.toml",
                           "--run-dir", "run"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]

    result = CliRunner().invoke(main, ["export", str(tmp_path / "run"),
                                       "--hf", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    args, state = load_consolidated(tmp_path / "run")
    model = Transformer(args)
    model.load_state_dict(state)
    reference = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokens = torch.randint(0, args.vocab_size, (2, 16))
    with torch.no_grad():
        assert (reference(tokens).logits - model(tokens)).abs().max().item() <= 1e-4


@pytest.mark.torch
def test_the_exported_tokenizer_names_bos_and_eos_and_begins_each_text_with_bos(tmp_path):
    """AutoTokenizer on the export: BOS and EOS known, and a text encoded as the trainer's
    documents began ([BOS] ids), not bare."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from slurmtrain.cli.trainer import _hf_tokenizer

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>", "</s>"])
    source = tmp_path / "tokenizer.json"
    tok.save(str(source))
    out = tmp_path / "hf"
    out.mkdir()
    _hf_tokenizer(source, out, bos=3, eos=4)
    loaded = transformers.AutoTokenizer.from_pretrained(out)
    assert (loaded.bos_token, loaded.eos_token, loaded.bos_token_id, loaded.eos_token_id) == ("<s>", "</s>", 3, 4)
    assert loaded("hello world").input_ids == [3, 1, 2]
