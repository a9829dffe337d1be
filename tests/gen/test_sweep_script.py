"""Sweeps without Slurm (slurmtrain/sweep.py and what render writes for one): the points of
--sweep and --sweep-file, the array script `gen --sweep` prints (shellcheck-clean), and a
command's {key} words as bash expands them."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from click.testing import CliRunner

from slurmtrain import sweep
from slurmtrain.cli import main
from slurmtrain.errors import ConfigError, UsageError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

SRUN = ['launch.launcher="srun"', "launch.procs_per_node=1", "slurm.nodes=1", "slurm.gpus_per_node=0"]


def test_sweep_options_multiply_in_the_order_given():
    points = sweep.from_options(("train.lr=1e-4,3e-4", "train.global_batch_size=256,512"))
    assert [p.values for p in points] == [
        (("train.lr", "1e-4"), ("train.global_batch_size", "256")), (("train.lr", "1e-4"), ("train.global_batch_size", "512")),
        (("train.lr", "3e-4"), ("train.global_batch_size", "256")), (("train.lr", "3e-4"), ("train.global_batch_size", "512"))]
    assert points[1].label == "lr=1e-4_global_batch_size=512"
    assert sweep.sets_text(points[1]) == "train.lr=1e-4\ntrain.global_batch_size=512"
    assert sweep.env_name("train.lr") == "SLURMTRAIN_SWEEP_TRAIN_LR"


@pytest.mark.parametrize("options, words", [
    (("train.lr=",), "no values"), (("lr",), "expected KEY=V1,V2"), (("lr=1,2", "lr=3"), "given twice"),
    (("9lr=1",), "expected KEY=V1,V2"), (("lr=1e-3,,2e-3",), "an empty value between commas")])
def test_bad_sweep_options_name_the_option(options, words):
    with pytest.raises(ConfigError, match=words):
        sweep.points_of(options, None)


def test_a_sweep_file_in_toml_or_json_lines(tmp_path):
    toml = tmp_path / "points.toml"
    toml.write_text('[[point]]\n"train.lr" = 1e-4\nseed = 1\n\n[[point]]\n"train.lr" = 3e-4\nseed = 2\n')
    jsonl = tmp_path / "points.jsonl"
    jsonl.write_text('{"train.lr": 0.0001, "name": "a b"}\n\n{"train.lr": 0.0003, "name": "c"}\n')
    assert [p.as_dict() for p in sweep.points_of((), toml)] == [{"train.lr": "0.0001", "seed": "1"},
                                                                 {"train.lr": "0.0003", "seed": "2"}]
    assert [p.label for p in sweep.points_of((), jsonl)] == ["lr=0.0001_name=a-b", "lr=0.0003_name=c"]
    # TOML's own dotted keys, and JSON's nested objects, are the same keys
    toml.write_text('[[point]]\ntrain.lr = 1e-4\n\n[[point]]\ntrain.lr = 3e-4\nmodel.dim = 64\n')
    assert [p.as_dict() for p in sweep.points_of((), toml)] == [{"train.lr": "0.0001"},
                                                                 {"train.lr": "0.0003", "model.dim": "64"}]
    jsonl.write_text('{"train": {"lr": 0.0001}}\n')
    assert [p.as_dict() for p in sweep.points_of((), jsonl)] == [{"train.lr": "0.0001"}]
    jsonl.write_text('{"lr": 1}\n{"lr": 1}\n')
    with pytest.raises(ConfigError, match="the same point twice: lr=1"):
        sweep.points_of((), jsonl)
    jsonl.write_text('{"lr": 1}\n[1, 2]\n')
    with pytest.raises(ConfigError, match="points.jsonl:2: a JSON array: the file is JSON Lines"):
        sweep.points_of((), jsonl)
    toml.write_text('[[points]]\nlr = 1\n')
    with pytest.raises(ConfigError, match=r"no \[\[point\]\] tables \(the file has: points\)"):
        sweep.points_of((), toml)
    named = tmp_path / "points.txt"
    named.write_text('[[point]]\nlr = 1\n')
    with pytest.raises(ConfigError, match="a file not named .toml is read as JSON Lines"):
        sweep.points_of((), named)
    with pytest.raises(UsageError, match="either --sweep options or --sweep-file"):
        sweep.points_of(("lr=1",), jsonl)


def test_a_placeholder_no_point_has_is_refused():
    points = sweep.from_options(("lr=1,2",))
    sweep.check_placeholders(("python", "t.py", "--lr={lr}"), points)
    with pytest.raises(ConfigError, match=r"no such sweep key .* the keys are lr"):
        sweep.check_placeholders(("python", "t.py", "--rate={rate}"), points)


def test_a_placeholder_word_expands_to_the_points_value_and_nothing_else(tmp_path):
    word = sweep.shell_word('--lr={lr} "$HOME" `x` \\ {lr}')
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], env={"SLURMTRAIN_SWEEP_LR": "3e-4 x"},
                         capture_output=True, text=True)
    assert out.stdout == '--lr=3e-4 x "$HOME" `x` \\ 3e-4 x'


def sweep_script(command=("python3", "train.py", "--lr={lr}"), options=("lr=1e-4,3e-4",), max_parallel=None):
    points = tuple(sweep.from_options(options))
    return render(load_profile("local", SRUN), JobSpec(command=command, job_name="sw", run_dir="/runs/sw",
                                                       array=len(points), sweep=points, max_parallel=max_parallel))


def test_the_array_script_runs_each_point_in_its_own_run_directory():
    script = sweep_script(max_parallel=1)
    assert "#SBATCH --array=0-1%1" in script
    assert ('  0) RUN_DIR="$RUN_DIR"/points/lr=1e-4; export SLURMTRAIN_SWEEP_LR=1e-4 ;;\n'
            '  1) RUN_DIR="$RUN_DIR"/points/lr=3e-4; export SLURMTRAIN_SWEEP_LR=3e-4 ;;') in script
    assert 'exec python3 train.py "--lr=${SLURMTRAIN_SWEEP_LR}"' in script
    trainer = render(load_profile("local", SRUN), JobSpec(recipe="tiny-demo", job_name="sw", run_dir="/runs/sw",
                                                          array=1, sweep=tuple(sweep.from_options(("train.lr=1e-3",)))))
    assert "export SLURMTRAIN_SWEEP_TRAIN_LR=1e-3 SLURMTRAIN_SWEEP_SETS=train.lr=1e-3 ;;" in trainer


def test_sweep_scripts_are_shellcheck_clean(tmp_path):
    checker = shutil.which("shellcheck")
    if not checker:
        pytest.fail("shellcheck not found: install Debian's shellcheck (scripts/test.sh does)")
    path = tmp_path / "job.sbatch"
    path.write_text(sweep_script(options=("lr=1e-4,3e-4", "opt=adamw,sgd x")))
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    result = subprocess.run([checker, "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_gen_sweep_prints_the_array_script_and_max_parallel_needs_a_sweep():
    runner = CliRunner()
    out = runner.invoke(main, ["gen", "--profile", "local", "--launcher", "srun", "--sweep", "lr=1,2,3",
                               "--max-parallel", "2", "--", "python3", "t.py", "{lr}"])
    assert out.exit_code == 0, out.output
    assert "#SBATCH --array=0-2%2" in out.output and "points/lr=3" in out.output
    out = runner.invoke(main, ["gen", "--profile", "local", "--max-parallel", "2", "--", "python3", "t.py"])
    assert out.exit_code == 2 and "--max-parallel is for a sweep" in out.output


def test_a_sweep_files_key_is_named_by_its_file_and_point_in_the_trainers_checks(tmp_path):
    from slurmtrain.recipes.jobcheck import _point_sets

    toml = tmp_path / "points.toml"
    toml.write_text('[[point]]\ntrain.lr = 1e-3\n\n[[point]]\ntrain.lrr = 3e-3\n')
    second = sweep.points_of((), toml)[1]
    assert [where for _, _, where in _point_sets(second)] == [f"{toml} [[point]] 2: train.lrr = 0.003"]
    (first,) = sweep.points_of(("train.lr=1e-3",), None)
    assert [where for _, _, where in _point_sets(first)] == ["--sweep train.lr=1e-3"]


def test_a_sweep_warns_of_a_key_the_command_never_names_and_of_a_set_it_replaces():
    points = sweep.points_of(("lr=1,2", "seed=3,4"), None)
    said = sweep.warnings(("python", "train.py", "--lr", "{lr}"), points, ())
    assert said == ["sweep key seed is not in the command as {seed}: every point runs the same command, with "
                    "$SLURMTRAIN_SWEEP_SEED its only difference"]
    recipe = sweep.points_of(("train.lr=1e-3,2e-3",), None)
    assert sweep.warnings((), recipe, ("train.lr=5e-2", "train.steps=9")) == [
        "--set train.lr=5e-2: the sweep's train.lr replaces it in every point"]
    assert sweep.warnings(("echo", "{lr}-{seed}"), points, ()) == []


def test_labels_keep_sections_that_share_a_key_name_and_a_folder_two_points_share_is_refused():
    (point,) = sweep.points_of(("train.seed=1", "data.seed=2", "train.lr=3"), None)
    assert point.label == "train.seed=1_data.seed=2_lr=3"
    with pytest.raises(ConfigError, match=r"share the run directory points/name=a-b \(name=a/b and name=a-b\)"):
        sweep.points_of(("name=a/b,a-b",), None)
