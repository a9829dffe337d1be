"""The command's DeepSpeed config read before the queue (slurmtrain/dsconfig.py): what
DeepSpeed would refuse on every rank after the wait is refused, a misspelt top-level key
(which DeepSpeed ignores) is warned of."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmtrain import dsconfig
from slurmtrain.cli import main
from slurmtrain.errors import ConfigError


def write(tmp_path, config) -> str:
    path = tmp_path / "ds.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return str(path)


@pytest.mark.parametrize("config, world, words", [
    ({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}, 4,
     "12 is not train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 1 x 4 ranks = 8"),
    ({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2}, 4, "12 is not a multiple of"),
    ({"train_batch_size": 8, "gradient_accumulation_steps": 3}, 2, "8 is not a multiple of gradient_accumulation"),
    ('{"train_batch_size": 8,}', 4, "not JSON: Expecting property name enclosed in double quotes (line 1"),
    ("[1, 2]", 4, "a DeepSpeed config is a JSON object"),
])
def test_what_deepspeed_would_refuse_on_every_rank_is_refused(tmp_path, config, world, words):
    with pytest.raises(ConfigError) as err:
        dsconfig.check(write(tmp_path, config), world)
    assert words in str(err.value)


def test_fitting_batch_sizes_pass_and_a_misspelt_key_is_warned_of(tmp_path):
    fine = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
            "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    assert dsconfig.check(write(tmp_path, fine), 4) == []
    assert dsconfig.check(write(tmp_path, {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 3}), 4) == []
    said = dsconfig.check(write(tmp_path, {"train_batch_size": 8, "zero_optimisation": {"stage": 2}, "my_own": 1}), 4)
    assert said == [f"{tmp_path / 'ds.json'}: zero_optimisation: not a DeepSpeed key (did you mean "
                    "'zero_optimization'?); DeepSpeed ignores it, so the run goes without it"]
    assert dsconfig.check(str(tmp_path / "nowhere.json"), 4) == []  # not here: not judged


def test_gen_refuses_a_config_deepspeed_would_refuse_for_the_jobs_world_size(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import deepspeed\n")
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                                  "gradient_accumulation_steps": 1}))
    args = ["gen", "--profile", "local", "--launcher", "deepspeed", "--", "deepspeed", "train.py", "--deepspeed",
            "--deepspeed_config", "ds.json"]
    assert CliRunner().invoke(main, [*args[:3], "--nodes", "2", *args[3:]]).exit_code == 0  # 2 x 2 x 2 = 8
    refused = CliRunner().invoke(main, [*args[:3], "--nodes", "1", *args[3:]])
    assert refused.exit_code == 2 and "x 2 ranks = 4" in refused.output, refused.output


def test_the_hugging_face_trainers_deepspeed_json_is_read_as_a_config(tmp_path, monkeypatch):
    """The Trainer's --deepspeed ds.json (not DeepSpeed's own --deepspeed flag): the same
    checks as --deepspeed_config, and a missing one refused by submit's check."""
    from slurmtrain.cli.options import _deepspeed_configs
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import transformers\n")
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2,
                                                  "gradient_accumulation_steps": 1}))
    args = ["gen", "--profile", "local", "--launcher", "deepspeed", "--nodes", "1", "--", "deepspeed", "train.py",
            "--deepspeed", "ds.json"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "train_batch_size" in refused.output, refused.output
    assert _deepspeed_configs(("train.py", "--deepspeed", "--deepspeed_config", "a.json")) == ["a.json"]
    assert _deepspeed_configs(("train.py", "--deepspeed=b.json", "--deepspeed", "{\"x\": 1}")) == ["b.json"]
