"""Presets (torch-free) and the Llama model: parameter counts, init, rotary cache, causality."""

import dataclasses

import pytest

from slurmtrain.errors import ConfigError
from slurmtrain.schema import Sources
from slurmtrain.recipes.presets import PRESETS, ModelArgs, get_preset, override, param_count

try:
    import torch
except ImportError:  # the [train] extra is not installed: preset tests still run
    torch = None

PUBLISHED = {
    "tinyllama-1.1b": 1_100_048_384,
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
}


def torch_test(fn):
    skip = pytest.mark.skipif(torch is None, reason="torch is not installed (the [train] extra)")
    return pytest.mark.torch(skip(fn))


# ---------------------------------------------------------------- presets, no torch

@pytest.mark.parametrize("name", PUBLISHED)
def test_param_count_matches_published(name):
    assert param_count(PRESETS[name]) == PUBLISHED[name]


def test_every_field_has_a_docstring():
    for f in dataclasses.fields(ModelArgs):
        assert f.metadata.get("doc"), f.name


def test_unknown_preset_suggests_the_nearest():
    with pytest.raises(ConfigError, match=r"unknown preset 'llama2-7'.*did you mean \"llama2-7b\""):
        get_preset("llama2-7")


def test_replace_and_override_recheck_the_shape():
    tiny = get_preset("tiny")
    assert dataclasses.replace(tiny, n_layers=4).n_layers == 4
    with pytest.raises(ConfigError, match="n_kv_heads = 3"):
        dataclasses.replace(tiny, n_kv_heads=3)
    sources = Sources("recipes/x.toml")
    assert override(tiny, {"rope_theta": 500000}, sources).rope_theta == 500000.0
    with pytest.raises(ConfigError) as err:
        override(tiny, {"n_kv_heads": 3}, sources)
    assert str(err.value) == ("recipes/x.toml: model.n_kv_heads: n_heads = 4 is not a multiple "
                              "of n_kv_heads = 3")
    with pytest.raises(ConfigError, match=r'model.dimm: unknown key \(did you mean "dim"\?\)'):
        override(tiny, {"dimm": 8}, sources)
    with pytest.raises(ConfigError, match="model.n_layers: expected an integer, got string"):
        override(tiny, {"n_layers": "4"}, sources)


# ---------------------------------------------------------------- the model

def build(args, seed=0):
    from slurmtrain.train.model import Transformer

    model = Transformer(args)
    model.init_weights(seed)
    return model


@torch_test
@pytest.mark.parametrize("name", list(PRESETS))
def test_meta_model_has_the_preset_param_count(name):
    from slurmtrain.train.model import Transformer, count_parameters

    with torch.device("meta"):
        model = Transformer(PRESETS[name])
    assert count_parameters(model) == param_count(PRESETS[name])
    if name in PUBLISHED:
        assert count_parameters(model) == PUBLISHED[name]


@torch_test
@pytest.mark.parametrize("tied", [False, True])
def test_meta_init_then_to_empty_equals_eager_init(tied):
    from slurmtrain.train.model import meta_model

    args = dataclasses.replace(get_preset("tiny"), tie_embeddings=tied)
    lazy = meta_model(args)
    assert lazy.output.weight.is_meta and lazy.rope.cos.is_meta
    lazy.to_empty(device="cpu")
    lazy.init_weights(seed=3)
    eager = build(args, seed=3)
    assert (lazy.output.weight is lazy.tok_embeddings.weight) == tied
    assert lazy.rope.cos.dtype == torch.float32
    torch.testing.assert_close(lazy.rope.cos, eager.rope.cos, rtol=0, atol=0)
    assert set(lazy.state_dict()) == set(eager.state_dict())
    assert "rope.cos" not in lazy.state_dict()  # non-persistent: recomputed, never saved
    tokens = torch.randint(0, args.vocab_size, (2, 9))
    torch.testing.assert_close(lazy(tokens), eager(tokens), rtol=0, atol=0)


@torch_test
def test_meta_model_skips_the_default_init_and_leaves_nn_init_as_it_was():
    """Building on meta runs none of nn.Linear's and nn.Embedding's own random fills, whose
    meta kernels import torch._dynamo (a second of every rank's start); nn.init is whole
    again afterwards, also when the build fails."""
    import subprocess
    import sys

    code = """
import sys, torch
from torch import nn
from slurmtrain.train.model import meta_model
from slurmtrain.recipes.presets import get_preset
before = {n: getattr(nn.init, n) for n in ("normal_", "uniform_", "kaiming_uniform_")}
meta_model(get_preset("tiny"))
assert "torch._dynamo" not in sys.modules, "meta_model imported torch._dynamo"
try:
    meta_model(None)
except AttributeError:
    pass
assert all(getattr(nn.init, n) is f for n, f in before.items()), "nn.init left patched"
w = torch.full((4, 4), 5.0)
nn.init.normal_(w, std=1e-3)
assert w.abs().max() < 1, "nn.init.normal_ does not fill any more"
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@torch_test
def test_forward_is_causal_and_shaped():
    args = get_preset("tiny")
    model = build(args)
    tokens = torch.randint(0, args.vocab_size, (3, 12))
    logits = model(tokens)
    assert logits.shape == (3, 12, args.vocab_size)
    changed = tokens.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % args.vocab_size
    torch.testing.assert_close(model(changed)[:, :8], logits[:, :8])
    assert not torch.allclose(model(changed)[:, 8:], logits[:, 8:])


@torch_test
def test_rope_cache_stays_float32_when_the_model_is_cast():
    model = build(get_preset("tiny"))
    cos = model.rope.cos.clone()
    model.to(torch.bfloat16)
    assert model.tok_embeddings.weight.dtype == torch.bfloat16
    assert model.rope.cos.dtype == torch.float32
    torch.testing.assert_close(model.rope.cos, cos, rtol=0, atol=0)
    assert model(torch.zeros(1, 4, dtype=torch.long)).dtype == torch.bfloat16


@torch_test
def test_sequence_longer_than_the_rope_cache_is_refused():
    model = build(dataclasses.replace(get_preset("tiny"), max_seq_len=8))
    with pytest.raises(ValueError, match="longer than max_seq_len = 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
