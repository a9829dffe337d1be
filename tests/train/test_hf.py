"""Hugging Face interop, with ``transformers`` itself as the reference (no download:
small random LlamaForCausalLM models are built from a LlamaConfig)."""

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from slurmtrain.errors import ConfigError  # noqa: E402
from slurmtrain.train.hf import (  # noqa: E402
    args_to_hf_config, export_hf, hf_config_to_args, load_hf_checkpoint, read_hf_state_dict)
from slurmtrain.train.model import Transformer  # noqa: E402
from slurmtrain.recipes.presets import ModelArgs, get_preset  # noqa: E402

pytestmark = pytest.mark.torch

SHAPES = {
    # grouped-query attention (2 kv heads for 4), separate lm_head, non-default theta
    "gqa-untied": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                       rope_theta=50000.0, rms_norm_eps=1e-5, tie_word_embeddings=False),
    # multi-head attention, lm_head tied to the embedding
    "mha-tied": dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                     num_attention_heads=3, num_key_value_heads=3, vocab_size=260,
                     rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
}


def hf_model(shape: str, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(max_position_embeddings=64, **SHAPES[shape])
    return transformers.LlamaForCausalLM(config).eval()


def logits_close(ours, theirs, tokens):
    with torch.no_grad():
        a, b = ours(tokens), theirs(tokens).logits
    assert (a - b).abs().max().item() <= 1e-4


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("sharded", [False, True], ids=["single-file", "sharded"])
def test_hf_checkpoint_loads_with_identical_logits(tmp_path, shape, sharded):
    reference = hf_model(shape)
    reference.save_pretrained(tmp_path, max_shard_size="20KB" if sharded else "5GB")
    assert (tmp_path / "model.safetensors.index.json").exists() == sharded

    args = hf_config_to_args(tmp_path / "config.json")
    assert hf_config_to_args(tmp_path) == args  # the folder works too
    assert args.tie_embeddings == SHAPES[shape]["tie_word_embeddings"]
    model = Transformer(args)
    model.init_weights(seed=1)
    load_hf_checkpoint(model, tmp_path)
    assert (model.output.weight is model.tok_embeddings.weight) == args.tie_embeddings
    tokens = torch.randint(0, args.vocab_size, (2, 23), generator=torch.Generator().manual_seed(0))
    logits_close(model, reference, tokens)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_export_of_a_trained_model_loads_in_transformers(tmp_path, tied):
    args = dataclasses.replace(get_preset("tiny"), tie_embeddings=tied, rope_theta=20000.0)
    model = Transformer(args)
    model.init_weights(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):  # move the weights off their initial values
        tokens = torch.randint(0, args.vocab_size, (4, 17), generator=gen)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()

    single, sharded = tmp_path / "single", tmp_path / "sharded"
    export_hf(model.state_dict(), args, single)
    written = export_hf(model.state_dict(), args, sharded, max_shard_bytes=40_000)
    assert sorted(p.name for p in single.iterdir()) == ["config.json", "model.safetensors"]
    assert (sharded / "model.safetensors.index.json") in written
    tokens = torch.randint(0, args.vocab_size, (2, 19), generator=gen)
    for out in (single, sharded):
        reference = transformers.LlamaForCausalLM.from_pretrained(out).eval()
        assert reference.config.tie_word_embeddings == tied
        assert reference.dtype == torch.float32
        logits_close(model, reference, tokens)
    # and back again
    again = Transformer(hf_config_to_args(sharded / "config.json"))
    load_hf_checkpoint(again, sharded)
    with torch.no_grad():
        torch.testing.assert_close(again(tokens), model(tokens), rtol=0, atol=0)


def test_export_casts_and_replaces_stale_shards(tmp_path):
    args = get_preset("tiny")
    model = Transformer(args)
    model.init_weights(seed=0)
    export_hf(model.state_dict(), args, tmp_path, max_shard_bytes=40_000)
    export_hf(model.state_dict(), args, tmp_path, dtype=torch.bfloat16)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    state = read_hf_state_dict(tmp_path, args)
    assert state["tok_embeddings.weight"].dtype == torch.bfloat16


def test_exported_weights_are_as_readable_as_the_config_by_the_users_umask(tmp_path):
    """safetensors writes for the owner alone: teammates on a shared file system could not
    read the model beside its config.json."""
    import os
    args = get_preset("tiny")
    model = Transformer(args)
    model.init_weights(seed=0)
    old = os.umask(0o022)
    try:
        written = export_hf(model.state_dict(), args, tmp_path / "one")
        written += export_hf(model.state_dict(), args, tmp_path / "shards", max_shard_bytes=40_000)
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in written}
    assert set(modes.values()) == {"0o644"}, modes


def test_mismatched_shape_names_the_first_tensor_and_leaves_the_model_alone(tmp_path):
    hf_model("gqa-untied").save_pretrained(tmp_path)
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300, ffn_dim=172,
                     rope_theta=50000.0)
    model = Transformer(args)
    model.init_weights(seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError) as err:
        load_hf_checkpoint(model, tmp_path, model_name="preset tiny")
    assert str(err.value) == (f"{tmp_path}/model.safetensors: model.layers.0.mlp.gate_proj.weight: "
                              "expected shape [172, 64] for preset tiny, found [96, 64]")
    assert err.value.exit_code == 2
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_mismatched_rope_theta_is_refused(tmp_path):
    hf_model("gqa-untied").save_pretrained(tmp_path)
    args = dataclasses.replace(hf_config_to_args(tmp_path / "config.json"), rope_theta=10000.0)
    with pytest.raises(ConfigError, match=r"config.json: rope_theta: checkpoint has 50000.0, "
                                          r"the model has 10000.0; set model.rope_theta = 50000.0"):
        read_hf_state_dict(tmp_path, args)


def test_missing_files_and_tensors_are_config_errors(tmp_path):
    args = hf_config_to_args(args_to_hf_config(get_preset("tiny")))
    with pytest.raises(ConfigError, match="nowhere: no such directory"):
        read_hf_state_dict(tmp_path / "nowhere", args)
    with pytest.raises(ConfigError, match=r"config.json: no such file"):
        read_hf_state_dict(tmp_path, args)

    (tmp_path / "config.json").write_text(json.dumps(args_to_hf_config(args)))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"no model.safetensors or model.safetensors.index.json "
                                          r"\(found pytorch_model.bin: only safetensors"):
        read_hf_state_dict(tmp_path, args)

    model = Transformer(args)
    model.init_weights(seed=0)
    export_hf(model.state_dict(), args, tmp_path, max_shard_bytes=40_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    (tmp_path / index["weight_map"]["model.norm.weight"]).unlink()
    with pytest.raises(ConfigError, match=r"index.json: weight_map: lists model-000\d\d-of-000\d\d"
                                          r".safetensors, which is missing from"):
        read_hf_state_dict(tmp_path, args)

    export_hf(model.state_dict(), args, tmp_path, max_shard_bytes=40_000)  # complete again
    del index["weight_map"]["model.norm.weight"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match=r"index.json: model.norm.weight: tensor missing "
                                          r"from the checkpoint \(expected shape \[64\] "
                                          r"for the model\)"):
        read_hf_state_dict(tmp_path, args)


def test_config_features_we_cannot_reproduce_are_refused():
    base = args_to_hf_config(get_preset("tiny"))
    cases = [
        ({"model_type": "mistral"}, "model_type: expected \"llama\""),
        ({"attention_bias": True}, "attention_bias: biases are not supported"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
         "rope type 'llama3' is not supported"),
        ({"head_dim": 32}, "head_dim: 32 \\* 4 heads != hidden_size 64"),
        ({"num_key_value_heads": 3}, "n_kv_heads: n_heads = 4 is not a multiple"),
    ]
    for change, message in cases:
        with pytest.raises(ConfigError, match=message):
            hf_config_to_args({**base, **change})
    legacy = {k: v for k, v in base.items() if k != "rope_parameters"}  # transformers 4.x form
    assert hf_config_to_args({**legacy, "rope_theta": 5e5}).rope_theta == 5e5


def test_tied_checkpoint_initialises_an_untied_model(tmp_path):
    hf_model("mha-tied").save_pretrained(tmp_path)
    args = dataclasses.replace(hf_config_to_args(tmp_path / "config.json"), tie_embeddings=False)
    model = Transformer(args)
    load_hf_checkpoint(model, tmp_path)
    assert model.output.weight is not model.tok_embeddings.weight
    assert torch.equal(model.output.weight, model.tok_embeddings.weight)


def test_export_refuses_an_incomplete_state_dict(tmp_path):
    args = get_preset("tiny")
    model = Transformer(args)
    state = {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}  # torch.compile names
    del state["_orig_mod.layers.1.ffn_norm.weight"]
    with pytest.raises(ConfigError, match=r"state dict: layers.1.ffn_norm.weight: missing"):
        export_hf(state, args, tmp_path)
