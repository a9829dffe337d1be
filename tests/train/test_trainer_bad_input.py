"""Bad input to ``python -m slurmtrain.train``: one line on stderr, from rank 0 only, no
traceback, exit status 2, and nothing written that a corrected start would trip over."""

from __future__ import annotations

import pytest

from trainer_util import rank_exit_codes, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
pytest.importorskip("torch")


def one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("slurmtrain: error: ")]
    assert len(lines) == 1, show(proc)
    # torchrun prints its own traceback when a rank fails; none may come from the trainer.
    assert "slurmtrain/train/" not in proc.stderr, show(proc)
    if "torch.distributed.elastic" not in proc.stderr:
        assert "Traceback" not in proc.stderr, show(proc)
    return lines[0]


def test_missing_data_path(tmp_path):
    recipe = setup_run(tmp_path)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--data-path", "nowhere.jsonl"],
                 tmp_path)
    assert proc.returncode == 2, show(proc)
    assert one_error_line(proc) == (f"slurmtrain: error: --data-path: data.path: no such file or "
                                    f"folder: {tmp_path / 'nowhere.jsonl'}")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_checkpoints_folder_that_cannot_be_written_is_found_before_the_first_step(tmp_path):
    """Found at the first save (tiny-demo's step 250), after every step up to it, and said
    as a traceback."""
    recipe = setup_run(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").write_text("")  # a file where the folder goes
    proc = train(["--recipe", str(recipe), "--run-dir", "run"], tmp_path)
    assert proc.returncode == 2, show(proc)
    assert one_error_line(proc) == (f"slurmtrain: error: {tmp_path / 'run' / 'checkpoints'}: the checkpoints "
                                    f"cannot be written there ({tmp_path / 'run' / 'checkpoints'} is a file, not a "
                                    "folder); give --run-dir a folder this job can write")


def test_empty_corpus(tmp_path):
    recipe = setup_run(tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--data_path", "empty.jsonl"],
                 tmp_path)
    assert proc.returncode == 2, show(proc)
    line = one_error_line(proc)
    assert "data.path: corpus" in line and "is too small: 0 tokens in 0 documents" in line


def test_unknown_recipe_key(tmp_path):
    recipe = setup_run(tmp_path)
    recipe.write_text(recipe.read_text().replace("warmup_steps", "warmup_stpes"))
    proc = train(["--recipe", str(recipe), "--run-dir", "run"], tmp_path)
    assert proc.returncode == 2, show(proc)
    assert one_error_line(proc).startswith(
        f'slurmtrain: error: {recipe}: train.warmup_stpes: unknown key (did you mean "warmup_steps"?)')
    assert not (tmp_path / "run").exists()


def test_batch_size_the_world_size_does_not_divide(tmp_path):
    """Two ranks under torchrun, which ends rank 1 once rank 0 has left with the message:
    6 sequences cannot be split into micro-batches of 2 on each of 2 ranks."""
    recipe = setup_run(tmp_path)
    proc = train(["--recipe", str(recipe), "--run-dir", "run",
                  "--set", "train.global_batch_size=6"], tmp_path, nproc=2, torchrun=True)
    assert rank_exit_codes(proc) <= {2, -15} and 2 in rank_exit_codes(proc), show(proc)
    assert one_error_line(proc) == (
        "slurmtrain: error: --set train.global_batch_size=6: train.global_batch_size: 6 is not "
        "divisible by micro_batch_size x world size = 2 x 2 = 4")


def test_init_ckpt_of_another_shape(tmp_path):
    """The Hugging Face loader refuses it on rank 0; the user sees its one line."""
    import dataclasses

    import torch

    from slurmtrain.train.hf import export_hf
    from slurmtrain.train.model import Transformer
    from slurmtrain.recipes.presets import get_preset
    other = dataclasses.replace(get_preset("tiny"), dim=32, ffn_dim=96)
    model = Transformer(other)
    model.init_weights(seed=0)
    export_hf(model.state_dict(), other, tmp_path / "hf")
    recipe = setup_run(tmp_path)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--init-ckpt", "hf"], tmp_path)
    assert proc.returncode == 2, show(proc)
    line = one_error_line(proc)
    assert "hf" in line and "shape" in line and "32" in line, line
    assert not (tmp_path / "run" / "checkpoints").exists()
    del torch


INJECT = '''
import os, runpy, sys
from slurmtrain.train import trainer
step = trainer.Trainer._train_step
def failing(self):
    if os.environ["RANK"] == "1" and self.step >= 2:
        raise RuntimeError("injected on rank 1")
    return step(self)
trainer.Trainer._train_step = failing
runpy.run_module("slurmtrain.train", run_name="__main__", alter_sys=True)
'''


def test_an_error_on_one_rank_ends_the_run_instead_of_hanging(tmp_path):
    """Rank 1 fails mid-run while rank 0 waits in the step's collective: rank 1 must leave
    without the closing barrier (which rank 0 would never reach), so torchrun sees the
    failure and ends the run. With the barrier, both sat until gloo's 30-minute timeout."""
    import sys

    import waiting
    from trainer_util import env

    recipe = setup_run(tmp_path)
    (tmp_path / "inject.py").write_text(INJECT)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "inject.py", "--recipe", str(recipe), "--run-dir", "run"]
    proc = waiting.run(argv, "trainer with an error injected on rank 1", [tmp_path], stall=120,
                       cwd=tmp_path, env=env())
    assert proc.returncode != 0, show(proc)
    assert "RuntimeError: injected on rank 1" in proc.stderr, show(proc)
