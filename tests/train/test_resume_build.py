"""A resumed trainer draws no initial parameters: the checkpoint's load sets them all, and the
draws (each rank its shard, on the CPU) cost seconds a restart at scale. One process, in
this test's own process so that the draw can be watched; the bitwise resumes elsewhere
(test_trainer_e2e.py, test_memtier_e2e.py, test_pipeline_e2e.py) show nothing changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from trainer_util import one_rank, setup_run  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")


def test_a_resume_draws_no_parameters_and_a_fresh_start_does(tmp_path, monkeypatch):
    from slurmtrain.recipes.recipe import load_recipe_sources
    from slurmtrain.train import model as model_mod
    from slurmtrain.train import trainer as trainer_mod

    draws: list[int] = []
    real = model_mod.init_parameters
    monkeypatch.setattr(model_mod, "init_parameters", lambda *a, **k: (draws.append(1), real(*a, **k))[1])
    recipe = setup_run(tmp_path, steps=4, save_steps=4)
    (tmp_path / "run").mkdir()
    with one_rank(tmp_path) as world:
        def build(steps: int):
            loaded, sources = load_recipe_sources(str(recipe), [("train.steps", steps, "test"),
                                                                ("train.eval_steps", 0, "test")])
            return trainer_mod.build(loaded, sources, world, tmp_path / "run", None)

        first = build(4)
        assert (first.step, draws) == (0, [1])
        assert first.train() == 0
        saved = {k: v.detach().clone() for k, v in first.engine.model.state_dict().items()}
        draws.clear()
        second = build(6)
        assert (second.step, draws) == (4, [])  # loaded, nothing drawn
        got = second.engine.model.state_dict()
        assert sorted(got) == sorted(saved)
        for name, value in saved.items():
            assert torch.equal(got[name], value), name
        assert second.train() == 0


def test_a_recipe_edited_to_another_model_is_refused_at_the_resume_naming_what_changed(tmp_path):
    """A resubmitted (or requeued) run whose recipe file gained a layer since: the load would
    fail with a missing tensor's name only."""
    from slurmtrain.errors import ConfigError
    from slurmtrain.recipes.recipe import load_recipe_sources
    from slurmtrain.train import trainer as trainer_mod

    recipe = setup_run(tmp_path, steps=2, save_steps=2)
    (tmp_path / "run").mkdir()
    with one_rank(tmp_path) as world:
        def build(*sets):
            loaded, sources = load_recipe_sources(str(recipe), [("train.eval_steps", 0, "test"), *sets])
            return trainer_mod.build(loaded, sources, world, tmp_path / "run", None)

        assert build(("model.n_layers", 2, "test")).train() == 0
        with pytest.raises(ConfigError, match=r"was saved by another model \(n_layers 2 -> 3\): the recipe "
                                              r"changed since; put it back to resume, or start a new run"):
            build(("model.n_layers", 3, "test"))
        assert build(("model.n_layers", 2, "test")).step == 2  # put back: resumes
