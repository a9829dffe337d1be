"""Data: tokenizers, packing, the held-out split, and each rank's deterministic share."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from slurmtrain.errors import ConfigError
from slurmtrain.data.tokenizer import ByteTokenizer, load_tokenizer

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from slurmtrain.train import data  # noqa: E402  (imports torch)
from slurmtrain.recipes.inputs import check_batch  # noqa: E402
from slurmtrain.train.optim import WarmupCosine  # noqa: E402


def corpus(tmp_path, n=50):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i} " * 5}) + "\n" for i in range(n)))
    return path


def test_byte_tokenizer_fits_the_tiny_preset():
    from slurmtrain.recipes.presets import get_preset
    tok = ByteTokenizer()
    assert [list(a) for a in tok.encode_batch(["hé"])] == [[104, 195, 169]]
    assert tok.vocab_size <= get_preset("tiny").vocab_size


def test_hf_tokenizer_from_a_local_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<s>": 0, "</s>": 1, "[UNK]": 2, "hello": 3, "world": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(str(tmp_path))  # a folder holding tokenizer.json works too
    assert (ours.bos_id, ours.eos_id, ours.vocab_size) == (0, 1, 5)
    assert list(ours.encode_batch(["hello world"])[0]) == [3, 4]
    with pytest.raises(ConfigError, match="no such tokenizer file"):
        load_tokenizer(str(tmp_path / "missing.json"))


def test_packing_and_held_out_split(tmp_path):
    c = data.load_corpus(corpus(tmp_path), ByteTokenizer(), 31, 0.1, 0, "test")
    assert c.n_docs == 50 and c.train.shape[1] == 32
    n = len(c.train) + len(c.val)
    assert n == c.n_tokens // 32 and len(c.val) == round(0.1 * n)
    train, val = c.train[range(len(c.train))], c.val[range(len(c.val))]
    assert train[0, 0] == ByteTokenizer.bos_id or len(c.val)  # the stream starts with BOS
    rows = {tuple(r) for r in train}
    assert not rows & {tuple(r) for r in val}
    # every sequence is in exactly one of the two, in stream order
    ids = sorted([c.train.seq_id(j) for j in range(len(c.train))] + list(c.val.ids))
    assert ids == list(range(n))


def test_folder_of_txt_and_jsonl(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("plain text " * 20)
    corpus(tmp_path)
    files = data.corpus_files(tmp_path, "test")
    assert [f.name for f in files] == ["c.jsonl", "a.txt"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no .jsonl or .txt files"):
        data.corpus_files(tmp_path / "empty", "test")
    with pytest.raises(ConfigError, match="no such file or folder"):
        data.corpus_files(tmp_path / "missing", "test")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "x"}\n')
    with pytest.raises(ConfigError, match=r'bad.jsonl:1: data.path: expected a JSON object'):
        list(data.read_documents([bad]))


def test_ranks_share_a_global_batch_and_resume_continues_it():
    seqs = np.arange(40 * 5, dtype=np.int32).reshape(40, 5)
    streams = [data.TrainStream(seqs, seed=1, rank=r, world=2, micro_batch=3) for r in range(2)]
    steps = [[s.next_step(accum=2) for _ in range(10)] for s in streams]  # 120 > 40: 3 epochs
    for k in (0, 1, 2, 4, 5):  # steps 3 and 6 straddle an epoch boundary
        rows = [tuple(row.tolist()) for r in range(2) for mb in steps[r][k] for row in mb]
        assert len(rows) == 12 and len(set(rows)) == 12  # no overlap within a global batch
    first_epoch = {tuple(row.tolist()) for k in range(3) for r in range(2) for mb in steps[r][k]
                   for row in mb}
    assert len(first_epoch) == 36  # 36 of 40 sequences, all different, before the epoch ends
    resumed = data.TrainStream(seqs, seed=1, rank=1, world=2, micro_batch=3)
    resumed.load_state_dict(streams[1].state_dict() | {"consumed": 4 * 12})
    for k in range(4, 10):
        assert all(torch.equal(a, b) for a, b in zip(resumed.next_step(2), steps[1][k]))


def test_validation_batches_are_equal_in_number_on_every_rank():
    val = np.zeros((7, 5), np.int32)
    counts = [len(data.val_batches(val, r, 2, 2, limit=10)) for r in range(2)]
    assert counts == [1, 1]


def test_warmup_then_cosine():
    f = WarmupCosine(warmup=10, steps=110, min_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == 1.0
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5)
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
    assert all(f(i) >= f(i + 1) for i in range(10, 120))
    assert math.isclose(WarmupCosine(0, 10, 0.0)(0), 1.0)


def test_batch_size_check():
    assert check_batch(64, 4, 8, "r.toml") == 2
    with pytest.raises(ConfigError) as info:
        check_batch(60, 4, 8, "r.toml")
    assert str(info.value) == ("r.toml: train.global_batch_size: 60 is not divisible by "
                               "micro_batch_size x world size = 4 x 8 = 32")
