"""The trainer on `slurmtrain tokenize` shards end to end (CPU, gloo): the same losses as on
the raw jsonl, and an exact resume, also at another world size."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from trainer_util import events, fsdp2_reference, losses, rank_exit_codes, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")


def tokenize(work) -> str:
    from slurmtrain.cli import main
    res = CliRunner().invoke(main, ["tokenize", str(work / "corpus.jsonl"), "--tokenizer", "bytes",
                                    "--out", str(work / "tok"), "--shard-mb", "0.002", "-j", "2"])
    assert res.exit_code == 0, res.output
    return str(work / "tok")


@pytest.fixture(scope="module")
def on_shards(tmp_path_factory):
    """20 steps on two ranks from shards (several of them: sequences straddle shards)."""
    work = tmp_path_factory.mktemp("shards")
    recipe = setup_run(work, steps=20)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--data-path", tokenize(work)], work,
                 nproc=2)
    assert proc.returncode == 0, show(proc)
    return work


def test_shards_train_like_the_raw_jsonl(on_shards, tmp_path_factory):
    raw, _ = fsdp2_reference(tmp_path_factory)  # the same recipe on the raw corpus.jsonl
    got = losses(on_shards / "run")
    assert sorted(got) == list(range(1, 21)) and got == losses(raw)


def test_resume_from_shards_exact_and_at_another_world_size(on_shards, tmp_path):
    """Stopped at step 10 on two ranks, then resumed on two ranks: the same loss at every step
    as the uninterrupted run. Resumed on one rank instead (a copy of the stopped run): steps
    11-20 train on the same sequences (the loss matches up to the order of gradient sums)."""
    import shutil
    work = tmp_path / "two"
    recipe = setup_run(work, steps=20)
    args = ["--recipe", str(recipe), "--run-dir", "run", "--data-path", tokenize(work)]
    first = train(args + ["--set", "debug.stop_at_step=10"], work, nproc=2)
    assert 75 in rank_exit_codes(first) <= {75, -15}, show(first)
    shutil.copytree(work, tmp_path / "one")
    ref = losses(on_shards / "run")
    for where, nproc in ((work, 2), (tmp_path / "one", 1)):
        again = train(["--recipe", str(where / "recipe.toml"), "--run-dir", "run", "--data-path",
                       str(where / "tok")], where, nproc=nproc)
        assert again.returncode == 0, show(again)
        assert ("resumed", 10) in events(where / "run")
        got = losses(where / "run")
        assert sorted(got) == list(range(1, 21))
        if nproc == 2:
            assert got == ref
        else:
            assert all(got[s] == ref[s] for s in range(1, 11))
            assert [got[s] for s in range(11, 21)] == pytest.approx([ref[s] for s in range(11, 21)],
                                                                    rel=1e-4)
