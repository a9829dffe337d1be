"""Hostile values end up quoted so bash passes them through literally.

The rendered script runs for real here, with stand-ins for srun/scontrol (fakebin/)
and a launcher that records its argv, so what bash hands the launcher is checked,
not what the text looks like.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from slurmtrain.errors import ConfigError, UsageError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

FAKEBIN = Path(__file__).resolve().parent / "fakebin"
NASTY = [
    "two words", "it's", 'say "hi"', "$(touch PWNED)", "`touch PWNED`", "a; touch PWNED", "x && touch PWNED",
    "*", "?[a]", "ünïcødé ✓", "$HOME", "--flag=$((1+1))", "", "\\", "'\"'", "a|b>c<d",
]


def run_script(tmp_path, script: str, env_keys: str = "", **extra_env: str) -> dict[str, dict]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {
        **os.environ, "PATH": f"{FAKEBIN}:{os.environ['PATH']}", "FAKE_NODES": "nodeA nodeB",
        "FAKE_OUT": str(out), "FAKE_LOG": str(tmp_path / "fake.log"), "FAKE_ENV_KEYS": env_keys,
        "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[A-B]", "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_NAME": "t", "SLURMTRAIN_RUN_DIR": str(tmp_path / "run"), **extra_env,
    }
    result = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "PWNED").exists(), "a value was executed by the shell"
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.parametrize("launcher", ["torchrun", "srun-loop", "deepspeed"])
def test_command_arguments_arrive_unchanged(tmp_path, launcher):
    profile = load_profile("local", [f'launch.launcher="{launcher}"', f'launch.python="{FAKEBIN}/launcher-python"'])
    command = ("python", "train.py", *NASTY)
    records = run_script(tmp_path, render(profile, JobSpec(command=command, run_dir=str(tmp_path / "run"))))
    assert set(records) == {"launcher-python-nodeA", "launcher-python-nodeB"}
    for rec in records.values():
        assert rec["argv"][-len(NASTY) - 1:] == ["train.py", *NASTY]


@pytest.mark.parametrize("plain", [False, True], ids=["supervised", "plain"])
def test_the_tasks_get_the_jobs_cpus_per_task(tmp_path, plain):
    """Slurm 22.05 and later: srun takes --cpus-per-task from SRUN_CPUS_PER_TASK only, not
    from sbatch's; without it each node's launcher and its workers are bound to one CPU."""
    profile = load_profile("local", ['launch.launcher="srun-loop"', f'launch.python="{FAKEBIN}/launcher-python"',
                                     "slurm.cpus_per_task=8"])
    script = render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"), plain=plain))
    assert "#SBATCH --cpus-per-task=8" in script
    records = run_script(tmp_path, script, env_keys="SRUN_CPUS_PER_TASK", SLURM_CPUS_PER_TASK="8",
                         SLURM_JOB_NUM_NODES="2")
    assert {rec["env"].get("SRUN_CPUS_PER_TASK") for rec in records.values()} == {"8"}, records
    (tmp_path / "out").rename(tmp_path / "out-before")
    unset = run_script(tmp_path, script, env_keys="SRUN_CPUS_PER_TASK", SLURM_JOB_NUM_NODES="2")  # no -c: none
    assert {rec["env"].get("SRUN_CPUS_PER_TASK") for rec in unset.values()} == {None}, unset


def test_exec_command_and_node_ranks(tmp_path):
    profile = load_profile("local", ['launch.launcher="srun-loop"', f'launch.python="{FAKEBIN}/launcher-python"'])
    records = run_script(tmp_path, render(profile, JobSpec(command=("my tool", "x y"), run_dir=str(tmp_path / "r"))))
    for node, rank in (("nodeA", "0"), ("nodeB", "1")):
        argv = records[f"launcher-python-{node}"]["argv"]
        assert argv[-3:] == ["--no-python", "my tool", "x y"]
        assert f"--node-rank={rank}" in argv


def test_profile_values_arrive_unchanged_in_container_and_env(tmp_path):
    hostile = "$(touch PWNED) `touch PWNED`; it's \"quoted\" ✓"
    profile = load_profile("hpc-apptainer", [
        f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]',
        f'container.image="{tmp_path}/img with space.sif"',
        'container.binds=["/data:/data:ro"]',
        f"container.env.MSG={json.dumps(hostile)}",
        f"env.vars.GREETING={json.dumps(hostile)}",
        f"container.options=[{json.dumps('--fakeroot=' + hostile)}]",
    ])
    (tmp_path / "img with space.sif").touch()  # each node checks its image is there
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"))),
                         env_keys="GREETING APPTAINERENV_MSG")
    argv = records["apptainer-nodeA"]["argv"]
    assert argv[:2] == ["exec", "--nv"]
    pairs = list(zip(argv, argv[1:]))
    # container.env reaches apptainer as APPTAINERENV_MSG, whole (its --env splits at commas)
    assert records["apptainer-nodeA"]["env"]["APPTAINERENV_MSG"] == hostile and "--env" not in argv
    assert ("--bind", "/data:/data:ro") in pairs
    assert f"--fakeroot={hostile}" in argv and f"{tmp_path}/img with space.sif" in argv
    assert records["apptainer-nodeB"]["env"]["GREETING"] == hostile


def test_a_profiles_dollar_names_are_the_jobs_variables_and_nothing_else_runs(tmp_path):
    """As in a hand-written script: /scratch/$USER/hf and ${SLURM_SUBMIT_DIR} expand on the
    node; $(...), backquotes and globs stay text."""
    profile = load_profile("hpc-apptainer", [
        f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]', 'container.home="$HOME"',
        f'container.image="{tmp_path}/img.sif"',
        'container.binds=["$SLURM_SUBMIT_DIR:/workspace", "/scratch/${USER}/c:/c:ro"]',
        'container.env.CACHE="/scratch/$USER/$(touch PWNED)`touch PWNED`*"',
        'env.vars.HF_HOME="/scratch/${USER}/hf $HOME"',
    ])
    (tmp_path / "img.sif").touch()
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"))),
                         env_keys="HF_HOME APPTAINERENV_CACHE", USER="alice", HOME="/home/alice")
    argv = records["apptainer-nodeA"]["argv"]
    pairs = list(zip(argv, argv[1:]))
    assert ("--home", "/home/alice") in pairs and ("--bind", f"{tmp_path}:/workspace") in pairs, argv
    assert ("--bind", "/scratch/alice/c:/c:ro") in pairs, argv
    assert records["apptainer-nodeA"]["env"]["APPTAINERENV_CACHE"] == "/scratch/alice/$(touch PWNED)`touch PWNED`*"
    assert records["apptainer-nodeB"]["env"]["HF_HOME"] == "/scratch/alice/hf /home/alice"


def srun_calls(tmp_path) -> list[list[str]]:
    return [p.read_bytes().decode().split("\0")[:-1] for p in sorted((tmp_path / "out").glob("srun-*.args"))]


def test_pyxis_mounts_go_to_srun_with_the_run_directory(tmp_path):
    profile = load_profile("local", ['container.runtime="pyxis"', 'container.image="nvcr.io#nvidia/pytorch:24.05-py3"',
                                     'container.binds=["/fsx:/fsx", "/fsx/$USER:/u"]',
                                     'container.workdir="/fsx/${USER}/w"',
                                     f'launch.python="{FAKEBIN}/launcher-python"'])
    run_dir = str(tmp_path / "run")
    run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=run_dir)), USER="alice")
    (call,) = srun_calls(tmp_path)
    assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in call
    assert f"--container-mounts=/fsx:/fsx,/fsx/alice:/u,{run_dir}:{run_dir}" in call
    assert "--container-workdir=/fsx/alice/w" in call


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
@pytest.mark.parametrize("plain", [False, True], ids=["supervised", "plain"])
def test_no_line_of_a_container_script_ends_in_a_space(runtime, plain):
    profile = load_profile("aws-p5", [f'container.runtime="{runtime}"', 'container.image="/img"',
                                      'container.workdir="/fsx/w"'])
    script = render(profile, JobSpec(command=("python", "t.py"), plain=plain))
    assert [line for line in script.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize("binds,bound", [
    ([], True), (["/data:/data"], True), (["{tmp}"], False), (["{tmp}:/elsewhere"], True),
])
def test_apptainer_binds_the_run_directory_unless_a_bind_covers_it(tmp_path, binds, bound):
    binds = [b.format(tmp=tmp_path) for b in binds]
    profile = load_profile("hpc-apptainer", [f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]',
                                             f"container.binds={json.dumps(binds)}", _image(tmp_path)])
    run_dir = str(tmp_path / "run")
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=run_dir)))
    pairs = list(zip(records["apptainer-nodeA"]["argv"], records["apptainer-nodeA"]["argv"][1:]))
    assert (("--bind", run_dir) in pairs) == bound, pairs


def _image(tmp_path) -> str:
    """An image file the nodes find (each checks after its setup lines), as a --set."""
    (tmp_path / "train.sif").touch()
    return f'container.image="{tmp_path / "train.sif"}"'


def test_a_missing_apptainer_image_is_each_nodes_setup_failure_named(tmp_path):
    """docs/doctor.md: a missing image shows as the node's setup failure (it passed setup and
    died in apptainer, the cause in the node's log alone)."""
    profile = load_profile("hpc-apptainer", [f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]',
                                             f'container.image="{tmp_path}/gone.sif"'])
    with pytest.raises(AssertionError, match=rf"error: .*: container.image {tmp_path}/gone.sif: no such file, or not readable, on node"):
        run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"))))
    assert not (tmp_path / "out" / "apptainer-nodeA.json").exists()  # apptainer never ran


def test_a_comma_in_a_container_env_value_and_a_home_relative_path_arrive_as_written(tmp_path):
    """Seen on the container lane: apptainer's --env split DATA_OPTS at its comma, and a
    value naming no variable then dropped every container.env; `~/` in the image and a bind
    was quoted as text, and every node failed to find it."""
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "img.sif").touch()
    profile = load_profile("hpc-apptainer", [
        f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]', 'container.image="~/img.sif"',
        'container.binds=["~/data:/data"]', 'container.env.DATA_OPTS="split=train,streaming=true"',
        'container.env.XARGS="--lr=1,--wd=2"'])
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"))),
                         env_keys="APPTAINERENV_DATA_OPTS APPTAINERENV_XARGS", HOME=str(home))
    rec = records["apptainer-nodeA"]
    assert rec["env"] == {"APPTAINERENV_DATA_OPTS": "split=train,streaming=true", "APPTAINERENV_XARGS": "--lr=1,--wd=2"}
    pairs = list(zip(rec["argv"], rec["argv"][1:]))
    assert ("--bind", f"{home}/data:/data") in pairs and f"{home}/img.sif" in rec["argv"], rec["argv"]


def test_a_node_without_the_container_runtime_on_its_path_is_named(tmp_path):
    """A `module load apptainer` forgotten: each node's setup says so, not exit 127 of a launch."""
    (tmp_path / "bin").mkdir()
    for tool in ("launcher-python", "srun", "scontrol", "squeue", "sleep", "argv-recorder"):
        (tmp_path / "bin" / tool).symlink_to(FAKEBIN / tool)
    profile = load_profile("hpc-apptainer", [f'launch.python="{tmp_path}/bin/launcher-python"', 'launch.setup=[]',
                                             _image(tmp_path), 'container.runtime="singularity"'])
    with pytest.raises(AssertionError, match=r"error: .*: container.runtime singularity: not on PATH \(a `module load` "
                                             r"in launch.setup\?\) on node"):
        run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"), run_dir=str(tmp_path / "r"))))


def test_apptainer_binds_the_run_directory_gen_picks_at_run_time(tmp_path):
    """`gen` without a run directory: the script's own run directory is bound."""
    profile = load_profile("hpc-apptainer", [f'launch.python="{FAKEBIN}/launcher-python"', 'launch.setup=[]',
                                             _image(tmp_path)])
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py"))))
    argv = records["apptainer-nodeB"]["argv"]
    assert ("--bind", str(tmp_path / "run")) in list(zip(argv, argv[1:]))


@pytest.mark.parametrize("sets,part", [
    (['slurm.partition="gpu;rm -rf /"'], "slurm.partition"),
    (['slurm.partition="a b"'], "slurm.partition"),
    (['container.binds=["/a b:/c"]'], "container.binds"),
    (['env.vars.BAD-NAME=x'], "env.vars.BAD-NAME"),
    (['slurm.extra=["--x\\n#SBATCH --y"]'], "slurm.extra"),
])
def test_values_that_cannot_be_valid_are_rejected(sets, part):
    with pytest.raises(ConfigError) as info:
        load_profile("local", sets)
    assert part in str(info.value)


def test_run_dir_that_sbatch_cannot_read_is_rejected():
    """A space is double-quoted (tests/gen/test_sbatch_extra.py); a quote or a tab is not."""
    for bad in ('/tmp/has "quote"', "/tmp/has\ttab"):
        with pytest.raises(UsageError, match="#SBATCH --output"):
            render(load_profile("local"), JobSpec(command=("x",), run_dir=bad))


# Each example runs a whole script (about a second), so few examples with many arguments each.
@settings(max_examples=12, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
                min_size=1, max_size=25))
def test_random_arguments_round_trip_through_bash(tmp_path_factory, args):
    tmp_path = tmp_path_factory.mktemp("rt")
    profile = load_profile("local", ['launch.launcher="srun-loop"', f'launch.python="{FAKEBIN}/launcher-python"'])
    records = run_script(tmp_path, render(profile, JobSpec(command=("python", "t.py", *args), run_dir=str(tmp_path / "r"))))
    assert records["launcher-python-nodeA"]["argv"][-len(args):] == args


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_srun_launcher_wraps_every_process_in_the_container(tmp_path, runtime):
    image = _image(tmp_path) if runtime == "apptainer" else 'container.image="/img/train.sif"'
    profile = load_profile("local", ['launch.launcher="srun"', f'container.runtime="{runtime}"', image,
                                     'container.binds=["/data:/data"]', f'launch.python="{FAKEBIN}/launcher-python"'])
    run_dir = str(tmp_path / "run")
    records = run_script(tmp_path, render(profile, JobSpec(command=("python3", "t.py", "a b"), run_dir=run_dir)))
    (call,) = srun_calls(tmp_path)
    assert "--ntasks-per-node=2" in " ".join(call)
    if runtime == "pyxis":
        assert f"--container-mounts=/data:/data,{run_dir}:{run_dir}" in call
        assert "--container-image=/img/train.sif" in call
        assert records["launcher-python-nodeA"]["argv"] == ["t.py", "a b"]  # no agent in between
    else:
        argv = records["apptainer-nodeA"]["argv"]
        assert argv[:1] == ["exec"] and argv[-3:] == [f"{FAKEBIN}/launcher-python", "t.py", "a b"]
        assert ("--bind", run_dir) in list(zip(argv, argv[1:]))


@pytest.mark.parametrize("option", ["--cleanenv", "-e", "--containall", "-C"])
def test_an_option_that_keeps_the_jobs_environment_out_of_the_container_is_refused(option):
    """The ranks would run without SLURMTRAIN_RUN_DIR and the launcher's variables: the
    trainer checkpointed into the submit directory, status saw nothing (container lane)."""
    from slurmtrain.errors import ConfigError
    with pytest.raises(ConfigError, match=rf"container.options: {option} keeps the job's environment out of the "
                                          "container"):
        load_profile("hpc-apptainer", [f'container.options=["{option}"]'])
    load_profile("local", [f'container.options=["{option}"]', 'container.runtime="pyxis"',
                           'container.image="nvcr.io#nvidia/pytorch:24.05-py3"'])  # pyxis's options are its own


def test_container_keys_that_run_but_not_as_meant_are_warned_of(tmp_path):
    from slurmtrain.render import warnings
    (tmp_path / "img.sif").touch()
    loaded = load_profile("hpc-apptainer", [f'container.image="{tmp_path}/img.sif"', 'container.binds=[]',
                                            'container.options=["--bind /x:/y", "--pwd=/a", "--fakeroot=a b"]',
                                            'container.workdir="proj"', 'container.env.CUDA_VISIBLE_DEVICES="0"'])
    said = [w for w in warnings(loaded) if w.startswith("container.")]
    assert said == [
        "container.options entry '--bind /x:/y' (profile hpc-apptainer) holds a space: it reaches apptainer as one "
        "argument; an option and its value are two entries (or OPTION=VALUE)",
        "container.options has --pwd and container.workdir is 'proj' (profile hpc-apptainer): the line gets two "
        "--pwd; keep container.workdir",
        "container.workdir 'proj' (profile hpc-apptainer) is relative: apptainer's --pwd is a path inside the image; "
        "write it whole (\"/workspace\")",
        "container.env.CUDA_VISIBLE_DEVICES (profile hpc-apptainer) is set for every rank inside the image, over what "
        "Slurm gives each task: leave GPU visibility to Slurm and the launcher"], said
    quiet = load_profile("hpc-apptainer", [f'container.image="{tmp_path}/img.sif"'])
    assert not [w for w in warnings(quiet) if w.startswith("container.")]
