"""Recipes: every built-in one loads; mistakes name the file and the dotted key. Torch-free."""

from __future__ import annotations

import pytest

from slurmtrain.errors import ConfigError
from slurmtrain.recipes.recipe import builtin_recipes, load_recipe, model_args, parse_sets, recipe_to_dict

PRESETS = ["tiny", "tinyllama-1.1b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b"]


def test_one_recipe_per_preset_plus_the_demo():
    assert set(builtin_recipes()) == {*PRESETS, "tiny-demo"}


@pytest.mark.parametrize("name", [*PRESETS, "tiny-demo"])
def test_builtin_recipe_loads(name):
    recipe = load_recipe(name)
    args = model_args(recipe)
    assert recipe.data.max_seq_len <= args.max_seq_len
    t = recipe.train
    assert t.global_batch_size % t.micro_batch_size == 0
    assert recipe.description and recipe_to_dict(recipe)["model"]["preset"] == recipe.model.preset


def write(tmp_path, text):
    path = tmp_path / "r.toml"
    path.write_text(text)
    return path


BASE = '[model]\npreset = "tiny"\n[train]\nsteps = 5\nglobal_batch_size = 4\n'


def error(path, *sets) -> str:
    with pytest.raises(ConfigError) as info:
        load_recipe(str(path), parse_sets(sets))
    assert info.value.exit_code == 2
    return str(info.value)


def test_unknown_key_names_file_key_and_suggestion(tmp_path):
    path = write(tmp_path, BASE + "micro_batch_sise = 2\n")
    assert error(path).startswith(
        f'{path}: train.micro_batch_sise: unknown key (did you mean "micro_batch_size"?)')


def test_wrong_type(tmp_path):
    path = write(tmp_path, BASE.replace("steps = 5", 'steps = "5"'))
    assert error(path) == f'{path}: train.steps: expected an integer, got string \'5\''


def test_unknown_preset_suggests(tmp_path):
    path = write(tmp_path, BASE.replace('"tiny"', '"llama2-7B"'))
    assert 'model.preset: unknown preset \'llama2-7B\' (did you mean "llama2-7b"?)' in error(path)


def test_set_overrides_and_is_blamed(tmp_path):
    path = write(tmp_path, BASE)
    recipe = load_recipe(str(path), parse_sets(["train.lr=1e-4", "model.n_layers=3"]))
    assert recipe.train.lr == 1e-4 and model_args(recipe).n_layers == 3
    assert error(path, "train.dtype=fp8").startswith(
        "--set train.dtype=fp8: train.dtype: expected one of 'auto', 'bfloat16', 'float32'")


def test_inconsistent_model_override(tmp_path):
    path = write(tmp_path, BASE)
    msg = error(path, "model.n_kv_heads=3")
    assert msg.startswith("--set model.n_kv_heads=3: model.n_kv_heads:"), msg


def test_sequence_longer_than_the_model(tmp_path):
    path = write(tmp_path, BASE + "[data]\nmax_seq_len = 4096\n")
    assert error(path) == (f"{path}: data.max_seq_len: 4096 is longer than the model's "
                           "max_seq_len 512; lower it or set model.max_seq_len")


def test_unknown_recipe_name_suggests():
    with pytest.raises(ConfigError, match='no recipe named \'tiny-dmeo\' \\(did you mean "tiny-demo"\\?\\)'):
        load_recipe("tiny-dmeo")


def test_trainer_help_lists_recipe_keys_without_importing_torch():
    import subprocess
    import sys
    code = ("import sys, contextlib, io\n"
            "from slurmtrain.train.__main__ import parse_args\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
            "    parse_args(['--help'])\n"
            "print(out.getvalue()); print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "train.global_batch_size" in out and "--data_path" in out
    assert out.strip().endswith("False")
