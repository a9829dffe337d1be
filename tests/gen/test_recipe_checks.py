"""`gen --recipe` and `submit --recipe` check the recipe against the profile before
anything is queued: a job that would fail on its nodes fails here, with one line (exit 2)
naming the file and the key, instead of after waiting for an allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main

RECIPE = """\
[model]
preset = "{preset}"

[data]
path = "{data}"
{tokenizer}
[train]
steps = 10
global_batch_size = {batch}
micro_batch_size = 1
"""


def recipe(path, preset="tiny", data="corpus.jsonl", batch=8, tokenizer=None, extra=""):
    tok = f'tokenizer = "{tokenizer}"\n' if tokenizer else ""
    path.write_text(RECIPE.format(preset=preset, data=data, batch=batch, tokenizer=tok) + extra)
    return path


def corpus(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"text": "hello"}) + "\n")
    return path


@pytest.fixture
def work(tmp_path, monkeypatch):
    """An empty directory to run the CLI in, with an sbatch that records being called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", 'touch "$(dirname "$0")/sbatch-called"; echo "Submitted batch job 77"\n'),
                       ("srun", "exit 0\n")):
        (bin_dir / name).write_text("#!/bin/sh\n" + text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def gen(*args: str):
    return CliRunner().invoke(main, ["gen", *args])


def one_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtrain: error: "), result.output
    return lines[0]


def test_missing_demo_corpus_is_refused_before_the_queue(work):
    line = one_error(gen("-p", "local", "--recipe", "tiny-demo"))
    assert "tiny-demo.toml: data.path: " in line and str(work / "demo" / "corpus.jsonl") in line
    assert "slurmtrain demo-corpus" in line
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", "tiny-demo"])
    assert "slurmtrain demo-corpus" in one_error(result)
    assert not (work / "runs").exists() and not (work.parent / "bin" / "sbatch-called").exists()

    corpus(work / "demo" / "corpus.jsonl")
    assert gen("-p", "local", "--recipe", "tiny-demo").exit_code == 0
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", "tiny-demo"])
    assert result.exit_code == 0, result.output
    assert (work.parent / "bin" / "sbatch-called").exists()


def test_unknown_preset_and_unknown_key(work):
    corpus(work / "corpus.jsonl")
    line = one_error(gen("-p", "local", "--recipe", str(recipe(work / "r.toml", preset="tinyy"))))
    assert f"{work / 'r.toml'}: model.preset: unknown preset 'tinyy'" in line
    line = one_error(gen("-p", "local", "--recipe", str(recipe(work / "r.toml", extra="lrr = 1\n"))))
    assert f"{work / 'r.toml'}: train.lrr" in line
    line = one_error(gen("-p", "local", "--recipe", "no-such-recipe"))
    assert "no recipe named 'no-such-recipe'" in line


def test_a_warm_up_as_long_as_the_run_is_warned_of_not_refused(work):
    """A short trial (--set train.steps=20) of a recipe with a long warm-up trains at a
    fraction of its learning rate: said by gen and submit, with where each value came
    from; the script is still printed and the job still submitted."""
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml", extra="warmup_steps = 100\n"))
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--recipe", r, "--set", "train.steps=20"])
    assert result.exit_code == 0 and "#!/bin/bash" in result.stdout, result.output
    assert (f"slurmtrain: warning: train.warmup_steps = 100 ({work / 'r.toml'}) is not below train.steps = 20 "
            "(--set train.steps=20): the learning rate rises for the whole run, to 20% of train.lr") in result.stderr
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", r])
    assert result.exit_code == 0 and "train.warmup_steps = 100" in result.stderr, result.output
    assert (work.parent / "bin" / "sbatch-called").exists()
    quiet = CliRunner().invoke(main, ["gen", "-p", "local", "--recipe", r, "--set", "train.steps=200"])
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr, quiet.stderr


@pytest.mark.parametrize("sets, said", [
    (["train.save_steps=20", "train.memory_steps=40"], "train.memory_steps = 40 (--set train.memory_steps=40) is a "
     "multiple of train.save_steps = 20 (--set train.save_steps=20): each copy would fall on a durable save's step, "
     "which takes its place, so no copy in node memory is ever made; give it a value below 20"),
    (["train.memory_steps=1000"], "train.memory_steps = 1000 (--set train.memory_steps=1000) is not below "
     "train.steps = 200: no copy in node memory is made before the run ends"),
    (["train.save_steps=20", "train.memory_steps=5"], None),
])
def test_a_memory_tier_that_would_never_copy_is_warned_of(work, sets, said):
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml"))
    args = [a for s in ["train.steps=200", *sets] for a in ("--set", s)]
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--recipe", r, *args])
    assert result.exit_code == 0 and "#!/bin/bash" in result.stdout, result.output
    if said is None:
        assert "warning" not in result.stderr, result.stderr
    else:
        assert f"slurmtrain: warning: {said}" in result.stderr, result.stderr


def test_global_batch_must_divide_over_the_profiles_world(work):
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml", batch=6))  # local: 2 nodes x 2 processes = world size 4
    line = one_error(gen("-p", "local", "--recipe", r))
    assert f"{work / 'r.toml'}: train.global_batch_size: 6 is not divisible" in line
    assert "2 nodes x 2 processes per node" in line
    assert gen("-p", "local", "--nodes", "3", "--recipe", r).exit_code == 0  # 6 = 1 x 6
    line = one_error(gen("-p", "local", "--set", "launch.procs_per_node=4", "--recipe", r))
    assert "2 nodes x 4 processes per node" in line


def test_paths_are_checked_where_the_job_starts(work, tmp_path):
    r = str(recipe(work / "r.toml", data="data/c.jsonl"))
    elsewhere = tmp_path / "elsewhere"
    corpus(elsewhere / "data" / "c.jsonl")
    # The submit directory has no data/: the job would start there.
    line = one_error(gen("-p", "local", "--recipe", r))
    assert f"data.path: no such file or folder: {work / 'data' / 'c.jsonl'}" in line
    # With launch.workdir the job starts there, and there it is.
    assert gen("-p", "local", "--set", f'launch.workdir="{elsewhere}"', "--recipe", r).exit_code == 0
    line = one_error(gen("-p", "local", "--set", f'launch.workdir="{tmp_path / "empty"}"', "--recipe", r))
    assert str(tmp_path / "empty" / "data" / "c.jsonl") in line and "launch.workdir" in line


def test_tokenizer_must_exist(work):
    corpus(work / "corpus.jsonl")
    line = one_error(gen("-p", "local", "--recipe", str(recipe(work / "r.toml", tokenizer="tok/"))))
    assert f"{work / 'r.toml'}: data.tokenizer: " in line and str(work / "tok") in line


def test_trainer_command_line_is_checked_too(work):
    """`-- python -m slurmtrain.train ...` is the built-in trainer as well: its --init-ckpt,
    --data-path and --set count."""
    r = str(recipe(work / "r.toml"))
    corpus(work / "corpus.jsonl")
    trainer = ["-p", "local", "--", "python3", "-m", "slurmtrain.train", "--recipe", r]
    assert gen(*trainer).exit_code == 0
    line = one_error(gen(*trainer, "--init-ckpt", "hf-weights"))
    assert line.startswith("slurmtrain: error: --init-ckpt: ") and str(work / "hf-weights") in line
    (work / "hf-weights").mkdir()
    assert gen(*trainer, "--init-ckpt", "hf-weights").exit_code == 0
    line = one_error(gen(*trainer, "--data-path", "nope.jsonl"))
    assert line.startswith("slurmtrain: error: --data-path: data.path: no such file or folder")
    line = one_error(gen(*trainer, "--set", "train.global_batch_size=6"))
    assert "--set train.global_batch_size=6: train.global_batch_size: 6 is not divisible" in line
    line = one_error(gen(*trainer, "--bogus"))
    assert "--bogus" in line
    line = one_error(gen(*trainer, "--set", "train.min_lr=1.0"))
    assert "--set train.min_lr=1.0: train.min_lr: 1 is above train.lr" in line, line


def test_a_sweep_point_that_breaks_a_rule_across_keys_is_named(work):
    """The recipe's global batch is fine; the point's micro-batch makes it indivisible."""
    r = str(recipe(work / "r.toml"))
    corpus(work / "corpus.jsonl")
    line = one_error(gen("-p", "local", "--recipe", r, "--sweep", "train.micro_batch_size=1,5"))
    assert line.startswith("slurmtrain: error: sweep point train.micro_batch_size=5: ") and "not divisible" in line, \
        line


def test_container_paths_are_left_to_the_container(work):
    """Inside a container the program sees the container's filesystem, not this one."""
    r = str(recipe(work / "r.toml", data="/datasets/c.jsonl", batch=8))
    assert gen("-p", "hpc-apptainer", "--recipe", r).exit_code == 0  # 2 nodes x 4 GPUs
    line = one_error(gen("-p", "hpc-apptainer", "--recipe", str(recipe(work / "r.toml", batch=4))))
    assert "train.global_batch_size" in line


def test_gen_with_a_recipe_stays_torch_free(work):
    corpus(work / "demo" / "corpus.jsonl")
    code = ("import sys; from click.testing import CliRunner; from slurmtrain.cli import main\n"
            "r = CliRunner().invoke(main, ['gen', '-p', 'local', '--recipe', 'tiny-demo'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(' '.join(m for m in ('torch', 'numpy', 'submitit', 'tokenizers') if m in sys.modules))")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": repo}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=work,
                         env=env, check=True).stdout.strip()
    assert out == "", f"gen --recipe imported: {out}"


PIPELINE = "\n[pipeline]\n{}\n"


@pytest.mark.parametrize("keys, expected", [
    # local: 2 nodes x 2 processes = world size 4; the tiny preset has 2 blocks
    ("stages = 4", "pipeline.stages: 4 stages x 1 per rank = 4 model chunks, but the model has "
                   "2 blocks (model.n_layers)"),
    ("stages = 3", "pipeline.stages: world size 4 (2 nodes x 2 processes "
                                          "per node, from profile local) is not divisible by 3 stages"),
    ('stages = 2\nschedule = "zero-bubble"', "pipeline.schedule: expected one of"),
    ("stages = 2\nmicrobatches = 1", "pipeline.microbatches: 1 micro-batches per step, fewer than "
                                     "the 2 stages schedule 1f1b needs"),
    ('stages = 2\nschedule = "interleaved-1f1b"', "pipeline.stages_per_rank: 1: schedule "
                                                  "interleaved-1f1b needs 2 or more"),
])
def test_pipeline_keys_are_checked_against_the_profiles_world(work, keys, expected):
    corpus(work / "corpus.jsonl")
    path = recipe(work / "r.toml", extra=PIPELINE.format(keys))
    path.write_text(path.read_text().replace('preset = "tiny"', 'preset = "tiny"\nn_layers = 4')
                    if "stages = 3" in keys else path.read_text())
    r = str(path)
    line = one_error(gen("-p", "local", "--recipe", r))
    assert f"{work / 'r.toml'}: {expected}" in line, line


def test_a_pipeline_that_fits_the_world_passes(work):
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml", extra=PIPELINE.format('stages = 2\nschedule = "gpipe"')))
    assert gen("-p", "local", "--recipe", r).exit_code == 0


def test_the_run_keeps_the_recipe_as_submitted(work):
    """Every start of the run (a requeue, a resubmission) reads the run's copy: the file
    edited meanwhile (a layer more) does not change what the run trains, nor break its resume."""
    corpus(work / "corpus.jsonl")
    mine = recipe(work / "mine.toml")
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", "mine.toml"])
    assert result.exit_code == 0, result.output
    (run,) = (work / "runs").iterdir()
    assert (run / "recipe.toml").read_text() == mine.read_text()
    script = (run / "job.sbatch").read_text()
    assert f"--recipe {run / 'recipe.toml'}" in script and "--recipe mine.toml" not in script.split("#SBATCH")[-1]
    assert "mine" in run.name  # still named after the user's recipe


def test_a_model_vocabulary_smaller_than_the_tokenizers_is_refused_before_the_queue(work):
    """The trainer refuses it at its start, after the wait for an allocation: here, at once."""
    tokenizers = pytest.importorskip("tokenizers")
    corpus(work / "corpus.jsonl")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(298)}, unk_token="w0"))
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(work / "tok.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 300  # what the trainer compares
    for tokenizer, size in (("tok.json", 300), (None, 258)):  # a file's; the byte-level one's
        r = recipe(work / "r.toml", tokenizer=tokenizer)
        r.write_text(r.read_text().replace('[model]\n', '[model]\nvocab_size = 200\n'))
        line = one_error(gen("-p", "local", "--recipe", "r.toml"))
        assert f"model.vocab_size: 200 is smaller than the tokenizer's {size}" in line, line
    r.write_text(r.read_text().replace("vocab_size = 200", "vocab_size = 300"))
    assert gen("-p", "local", "--recipe", "r.toml").exit_code == 0


def test_a_set_of_a_recipe_key_with_recipe_goes_to_the_trainer(work):
    """`--recipe r.toml --set train.steps=20`: the recipe's sections are the trainer's, checked
    before the queue like the file's own keys; the profile's stay the profile's."""
    corpus(work / "corpus.jsonl")
    recipe(work / "r.toml")
    result = gen("-p", "local", "--recipe", "r.toml", "--set", "train.steps=20", "--set", "slurm.nodes=1")
    assert result.exit_code == 0, result.output
    assert "slurmtrain.train --recipe r.toml --set train.steps=20" in result.stdout.replace("\\\n    ", "")
    assert "#SBATCH --nodes=1" in result.stdout
    line = one_error(gen("-p", "local", "--recipe", "r.toml", "--set", "train.stepz=20"))
    assert "--set train.stepz=20: train.stepz: unknown key (did you mean \"steps\"?)" in line, line


@pytest.mark.parametrize("name", ["tiny", "tiny-demo"])
def test_the_small_built_in_recipes_fit_the_local_profile(work, name):
    """The sandbox's profile (2 nodes x 2 ranks) takes the recipes meant to try it."""
    corpus(work / "demo" / "corpus.jsonl")
    result = gen("-p", "local", "--recipe", name)
    assert result.exit_code == 0, result.output


def test_a_recipe_extends_a_built_in_or_a_file_beside_it_and_the_run_keeps_them_merged(work):
    corpus(work / "demo" / "corpus.jsonl")
    (work / "mine.toml").write_text('extends = "tiny-demo"\n[train]\nsteps = 7\n')
    (work / "base").mkdir()
    recipe(work / "base" / "base.toml", data="demo/corpus.jsonl", batch=16)  # data from the submit directory
    (work / "base" / "child.toml").write_text('extends = "base.toml"\n[model]\nn_layers = 3\n')
    from slurmtrain.recipes.recipe import load_recipe_sources
    mine, sources = load_recipe_sources("mine.toml")
    assert (mine.train.steps, sources.of("train.steps")) == (7, "mine.toml")
    assert sources.of("train.lr").endswith("tiny-demo.toml")  # the built-in's own keys stay its
    child, _ = load_recipe_sources("base/child.toml")
    assert (child.model.n_layers, child.train.global_batch_size) == (3, 16)
    assert gen("-p", "local", "--recipe", "base/child.toml").exit_code == 0
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", "base/child.toml"])
    assert result.exit_code == 0, result.output
    (run,) = (work / "runs").iterdir()
    kept, _ = load_recipe_sources(str(run / "recipe.toml"))  # merged: its parent need not be beside it
    assert kept == child
    (work / "loop.toml").write_text('extends = "loop.toml"\n')
    assert "extends: extends cycle" in one_error(gen("-p", "local", "--recipe", "loop.toml"))
    (work / "bad.toml").write_text('extends = "tiny-dmeo"\n')
    assert 'bad.toml: extends: no recipe named \'tiny-dmeo\' (did you mean "tiny-demo"?)' in one_error(
        gen("-p", "local", "--recipe", "bad.toml"))


def test_a_rule_broken_by_a_set_or_a_sweep_names_where_that_value_came_from(work):
    """--set train.micro_batch_size=3 or a sweep's lr made the recipe file's own values wrong:
    the error blamed the file alone, the value that broke the rule unnamed."""
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml", extra="lr = 3e-3\nmin_lr = 3e-4\n"))
    line = one_error(gen("-p", "local", "--recipe", r, "--set", "train.micro_batch_size=3"))
    assert line.startswith(f"slurmtrain: error: {work / 'r.toml'} (train.micro_batch_size from --set "
                           "train.micro_batch_size=3): train.global_batch_size: 8 is not divisible"), line
    line = one_error(gen("-p", "local", "--recipe", r, "--sweep", "train.lr=1e-4,3e-3"))
    assert f"{work / 'r.toml'} (train.lr from --sweep train.lr=1e-4): train.min_lr: 0.0003 is above train.lr" in line


def test_a_memory_tier_with_the_deepspeed_engine_is_refused_before_the_queue(work):
    """The trainer refused it at its start, after the job's wait in the queue."""
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml"))
    line = one_error(gen("-p", "local", "--recipe", r, "--set", "train.engine=deepspeed",
                         "--set", "train.memory_steps=5"))
    assert "train.memory_steps: 5 needs the fsdp2 engine (or the torch pipeline): deepspeed keeps its own state" \
        in line, line


def test_a_trainer_run_dir_of_its_own_is_warned_of(work):
    """`-- python -m slurmtrain.train --run-dir /elsewhere`: its checkpoints and metrics go
    there, and the run's status, watch and export see nothing (a teammate put checkpoints
    in a shared folder that way)."""
    corpus(work / "corpus.jsonl")
    r = str(recipe(work / "r.toml"))
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--", "python", "-m", "slurmtrain.train", "--recipe", r,
                                       "--run-dir", "/shared/ckpt/a"])
    assert result.exit_code == 0 and "#!/bin/bash" in result.stdout, result.output
    assert ("slurmtrain: warning: --run-dir /shared/ckpt/a: the trainer writes its checkpoints, metrics and events "
            "there, not in the run's directory") in result.stderr, result.stderr
    quiet = CliRunner().invoke(main, ["gen", "-p", "local", "--", "python", "-m", "slurmtrain.train", "--recipe", r])
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr, quiet.stderr


def test_a_profile_key_in_a_recipe_says_where_it_belongs(work):
    corpus(work / "corpus.jsonl")
    line = one_error(gen("-p", "local", "--recipe", str(recipe(work / "r.toml", extra='checkpoint_every = "auto"\n'))))
    assert line.endswith("train.checkpoint_every: unknown key; checkpoint_every is a cluster profile's key "
                         "(resilience.checkpoint_every): put it in the profile, or give it to gen/submit as "
                         "--set resilience.checkpoint_every=VALUE"), line
    (work / "s.toml").write_text((work / "r.toml").read_text().replace('checkpoint_every = "auto"\n', "")
                                 + '[resilience]\ncheckpoint_every = "auto"\n')
    line = one_error(gen("-p", "local", "--recipe", str(work / "s.toml")))
    assert line.endswith("resilience: unknown key; [resilience] is a section of the cluster profile, not of a "
                         "recipe"), line


def test_a_relative_checkpoint_dir_is_refused_before_the_queue(work):
    corpus(work / "demo" / "corpus.jsonl")
    line = one_error(gen("-p", "local", "--recipe", "tiny-demo", "--set", "train.checkpoint_dir=ckpt"))
    assert "train.checkpoint_dir: 'ckpt' is relative: give an absolute path" in line, line
    for fine in ("/scratch/ckpt", "$SCRATCH_UNSET_HERE/ckpt", "~/ckpt"):  # a variable only the node knows: its to check
        assert gen("-p", "local", "--recipe", "tiny-demo", "--set", f"train.checkpoint_dir={fine}").exit_code == 0, fine


def test_submit_says_what_an_automatic_checkpoint_cadence_will_do(work):
    corpus(work / "demo" / "corpus.jsonl")
    auto = ["--set", 'resilience.checkpoint_every="auto"', "--set", "resilience.node_mtbf_hours=8000"]
    result = CliRunner().invoke(main, ["submit", "-p", "local", "-N", "2", *auto, "--recipe", "tiny-demo"])
    assert result.exit_code == 0, result.output
    assert ('checkpoints: checkpoint_every = "auto": the first at the recipe\'s save_steps (100 if it has none), '
            "then every sqrt(2 x the save's measured stall x 4,000 h between faults: node_mtbf_hours 8,000 / 2 "
            "node(s), shorter as faults come); `slurmtrain status` shows each choice") in result.stdout, result.output
    plain = CliRunner().invoke(main, ["submit", "-p", "local", "--recipe", "tiny-demo"])
    own = CliRunner().invoke(main, ["submit", "-p", "local", *auto, "--", "python3", "-c", "pass"])
    assert "checkpoint_every" not in plain.output and "checkpoint_every" not in own.output


def test_the_follow_up_commands_quote_a_runs_directory_with_a_space(work):
    """Pasting the printed command must find the run: `--runs-dir runs dir` did not."""
    import shlex
    (work / "x.py").write_text("print('hi')\n")
    result = CliRunner().invoke(main, ["submit", "-p", "local", "--runs-dir", "my runs", "--name", "sp", "--",
                                       "python3", "x.py"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("follow it: "))
    status = shlex.split(line[len("follow it: "):].split(";")[0])
    assert status[:4] == ["slurmtrain", "status", "--runs-dir", "my runs"] and status[4].startswith("sp-"), line


def test_a_recipe_key_set_for_ones_own_command_says_it_is_the_built_in_trainers(work):
    """Not the profile's "train: unknown key (did you mean "tracking"?)"."""
    line = one_error(gen("-p", "local", "--set", "train.memory_steps=10", "--", "python3", "train.py"))
    assert line == ("slurmtrain: error: --set train.memory_steps=10: train.* is a key of the built-in trainer's "
                    "recipe: it applies with --recipe (and no command), not to your command; your program takes "
                    "its own options after --"), line
