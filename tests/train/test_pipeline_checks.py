"""A pipelined recipe checked at the trainer's start (before any process group exists):
one line, exit 2, for each key that does not fit the model, the world or the schedule.
(`gen`/`submit` make the same checks: tests/gen/test_recipe_checks.py.)"""

from __future__ import annotations

import pytest

from trainer_util import setup_run

pytestmark = pytest.mark.torch
pytest.importorskip("torch")


@pytest.mark.parametrize("sets, expected", [
    (["pipeline.stages=4"], "pipeline.stages: 4 stages x 1 per rank = 4 model chunks, but the "
                            "model has 2 blocks (model.n_layers)"),
    (["pipeline.stages=2"], "pipeline.stages: world size 1 is not divisible by 2 stages"),
    (["pipeline.schedule=zero-bubble"], "pipeline.schedule: expected one of"),
    (["pipeline.schedule=gpipe", "pipeline.stages_per_rank=2", "pipeline.stages=2"],
     "pipeline.stages_per_rank: 2: only schedule interleaved-1f1b runs several model chunks"),
    (["pipeline.stages=2", "model.tie_embeddings=true"],
     "pipeline.stages: not supported yet: a pipeline with model.tie_embeddings = true"),
])
def test_bad_pipeline_keys_stop_the_trainer_with_one_line(tmp_path, monkeypatch, capsys, sets,
                                                          expected):
    from slurmtrain.train.__main__ import main
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURMTRAIN_RUN_DIR"):
        monkeypatch.delenv(var, raising=False)
    recipe = setup_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtrain: error: --set "), lines
    assert expected in lines[0]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_microbatches_fewer_than_stages(tmp_path):
    """A world of 4 (2 stages x 2 data-parallel ranks) is known only under torchrun: the
    check itself, with the numbers it names."""
    from slurmtrain.errors import ConfigError
    from slurmtrain.recipes.inputs import check_pipeline
    from slurmtrain.recipes.recipe import load_recipe_sources, parse_sets
    recipe, sources = load_recipe_sources(str(setup_run(tmp_path)), parse_sets(
        ["pipeline.stages=2", "pipeline.microbatches=1"]))
    with pytest.raises(ConfigError, match="1 micro-batches per step, fewer than the 2 stages "
                                          "schedule 1f1b needs"):
        check_pipeline(recipe, sources, 4)
    recipe, sources = load_recipe_sources(str(setup_run(tmp_path)), parse_sets(
        ["pipeline.stages=2", "pipeline.schedule=gpipe", "pipeline.microbatches=1"]))
    assert check_pipeline(recipe, sources, 4) == (2, 2, 1)  # GPipe runs with one


def test_blocks_are_split_evenly():
    from slurmtrain.train.engines.pipeline import split_blocks, theoretical_bubble
    assert split_blocks(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert split_blocks(4, 4) == [range(i, i + 1) for i in range(4)]
    assert theoretical_bubble("1f1b", 2, 1, 4) == pytest.approx(1 / 5)
    assert theoretical_bubble("interleaved-1f1b", 2, 2, 4) == pytest.approx(1 / 9)
