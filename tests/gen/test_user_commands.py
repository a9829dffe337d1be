"""Users' own commands: the interpreter they name runs the launcher, and a launcher
written into the command is taken over or refused, never nested.

Each rendered script runs for real with stand-ins for srun and the launcher's
interpreter (tests/gen/fakebin), so what bash hands the interpreter is checked."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from test_injection import FAKEBIN, run_script

from slurmtrain.cli import main
from slurmtrain.command import parse
from slurmtrain.errors import UsageError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

FAKE_PY = str(FAKEBIN / "launcher-python")
VENV_PY = str(FAKEBIN / "venv" / "bin" / "python")  # a venv's interpreter, not on the job's PATH


def launched(tmp_path, command, launcher="torchrun", sets=()):
    """The argv the interpreter of the launcher got on node A, and the interpreter's name.
    A command without an interpreter of its own gets the stand-in as launch.python."""
    if VENV_PY not in command and not sets:
        sets = [f'launch.python="{FAKE_PY}"']
    profile = load_profile("local", [f'launch.launcher="{launcher}"', *sets])
    records = run_script(tmp_path, render(profile, JobSpec(command=tuple(command), run_dir=str(tmp_path / "run"))))
    (name,) = [k for k in records if k.endswith("-nodeA")]
    return name.removesuffix("-nodeA"), records[name]["argv"]


@pytest.mark.parametrize("launcher,module", [("torchrun", "torch.distributed.run"),
                                             ("srun-loop", "torch.distributed.run"),
                                             ("deepspeed", "deepspeed.launcher.launch")])
def test_the_venv_python_in_the_command_runs_the_launcher(tmp_path, launcher, module):
    name, argv = launched(tmp_path, [VENV_PY, "train.py", "--lr", "3e-4"], launcher)
    assert name == "python"  # the venv's, not python3 from PATH
    assert argv[0] == "-c" and argv[2] == module
    assert argv[-3:] == ["train.py", "--lr", "3e-4"] and "--no-python" not in argv and "--no_python" not in argv


def test_the_srun_launcher_execs_the_named_interpreter_itself(tmp_path):
    name, argv = launched(tmp_path, [VENV_PY, "train.py", "--lr", "3e-4"], "srun")
    assert name == "python" and argv == ["train.py", "--lr", "3e-4"]


def test_interpreter_options_keep_the_interpreter_for_the_workers(tmp_path):
    name, argv = launched(tmp_path, [VENV_PY, "-u", "-X", "dev", "train.py"])
    assert name == "python"
    assert argv[-6:] == ["--no-python", VENV_PY, "-u", "-X", "dev", "train.py"]


def test_launch_python_set_in_the_profile_runs_the_launcher_and_the_command_keeps_its_own(tmp_path):
    name, argv = launched(tmp_path, ["/opt/venv/bin/python", "-m", "pkg.train", "x"],
                          sets=[f'launch.python="{FAKE_PY}"'])
    assert name == "launcher-python"
    assert argv[-5:] == ["--no-python", "/opt/venv/bin/python", "-m", "pkg.train", "x"]


NESTED = [
    (["torchrun", "--nproc_per_node", "2", "train.py", "--a", "1"], None),
    (["torchrun", "--standalone", "--nnodes=2", "--nproc-per-node=2", "-m", "pkg.train", "--a", "1"], "module"),
    ([VENV_PY, "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--a", "1"], "interp"),
    (["deepspeed", "--num_gpus", "2", "train.py", "--a", "1"], None),
]


@pytest.mark.parametrize("command,form", NESTED, ids=["torchrun", "torchrun-module", "python-m", "deepspeed"])
def test_a_launcher_in_the_command_is_taken_over_not_nested(tmp_path, command, form):
    name, argv = launched(tmp_path, command)
    head = argv[:3]
    assert head[0] == "-c" and head[2] == "torch.distributed.run"
    assert argv.count("torch.distributed.run") == 1 and "torchrun" not in argv and "deepspeed" not in argv
    if form == "module":
        assert argv[-4:] == ["-m", "pkg.train", "--a", "1"]
    else:
        assert argv[-3:] == ["train.py", "--a", "1"]
    assert name == ("python" if form == "interp" else "launcher-python")


@pytest.mark.parametrize("command,words", [
    (["accelerate", "launch", "--num_processes", "4", "--mixed_precision", "bf16", "train.py", "--a", "1"],
     ["`accelerate launch` in the command", "write `-- python train.py --a 1`",
      # what accelerate launch gives Accelerator() for them (its config file is the launcher's alone)
      "give its options as the variables it would set: --set env.vars.ACCELERATE_MIXED_PRECISION=bf16"]),
    (["/env/bin/accelerate", "launch", "train.py"], ["write `-- /env/bin/python train.py`",
                                                     "its config file is read by the launcher alone"]),
    (["accelerate-launch", "--cpu", "train.py"], ["`accelerate-launch` in the command",
                                                  "--set env.vars.ACCELERATE_USE_CPU=true"]),
    (["python", "-m", "accelerate.commands.accelerate_cli", "launch", "train.py"],
     ["`python -m accelerate.commands.accelerate_cli launch` in the command"]),
    (["srun", "-n", "4", "python3", "train.py"], ["`srun` in the command", "python3 train.py"]),
    (["torchrun", "--nproc_per_node", "4", "train.py"], ["asks for 4 processes per node, the profile runs 2",
                                                          "give --set launch.procs_per_node=4 (the profile sets it)"]),
    (["torchrun", "--nnodes", "3", "train.py"], ["asks for 3 nodes, the profile runs 2", "give --nodes 3"]),
    (["torchrun", "--nnodes", "1:4", "train.py"], ["'1:4' nodes", "fixed count"]),
    (["torchrun", "--foo", "train.py"], ["option '--foo'", "write `-- python train.py`"]),
    (["deepspeed", "--num_gpus"], ["has no value"]),
    # --include picks the processes of each node: held to the profile's, as --num_gpus is
    (["deepspeed", "--include", "localhost:0,1,2,3", "train.py"], ["asks for 4 processes per node, the profile runs 2"]),
    (["deepspeed", "--include", "n1:0,1@n2:0", "train.py"], ["different numbers of processes on different nodes"]),
    (["deepspeed", "--exclude", "n1", "train.py"], ["`deepspeed --exclude n1` in the command", "sbatch's --exclude"]),
    (["torchrun", "--nproc_per_node=2"], ["names no program"]),
])
def test_launchers_that_cannot_be_taken_over_are_refused_with_the_command_to_write(command, words):
    result = CliRunner().invoke(main, ["gen", "--profile", "local", "--", *command])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("slurmtrain: error: ") and "\n" not in line
    for w in words:
        assert w in line


def test_parse_keeps_what_it_does_not_recognise():
    assert parse(("python3", "train.py")).interpreter == "python3"
    assert parse(("my tool", "x")).kind == "exec"
    assert parse(("train.py",)).kind == "script"
    assert parse(("/venv/bin/torchrun", "train.py")).interpreter == "/venv/bin/python"
    assert parse(("deepspeed", "--no_python", "bash", "run.sh")).kind == "exec"
    with pytest.raises(UsageError):
        parse(())


@pytest.mark.parametrize("limit, warned", [
    ("2:00", "2:00 is 2 min to Slurm (minutes:seconds, in whole minutes)"),
    ("0:30", "0:30 is 1 min to Slurm (minutes:seconds, in whole minutes)"),
    ("00:01:30", "00:01:30 is 2 min to Slurm (hours:minutes:seconds, in whole minutes)"),  # rounded up
    ("3", "3 is 3 min to Slurm (minutes, in whole minutes)"), ("1-0", None), ("2:00:00", None), ("90", None),
    ("UNLIMITED", None), ("0", None), ("0:00", None), ("00:00:00", None)])  # zero: no limit to Slurm
def test_gen_warns_of_a_time_limit_that_leaves_no_time_before_the_stop_signal(limit, warned):
    result = CliRunner().invoke(main, ["gen", "-p", "aws-p4d", "-t", limit, "--", "python", "x.py"])
    assert result.exit_code == 0, result.output
    if warned:
        assert f"warning: the time limit (slurm.time, --time) {warned}, and the stop signal comes " \
               "resilience.signal_seconds (120 s) before the end" in result.stderr, result.stderr
        when = "about 60 s after it starts" if limit == "3" else "as it starts"
        hours = "" if limit.count(":") == 2 else "; hours are written H:MM:SS (2:00:00 is two hours)"
        assert (f"the job would be told to stop {when}: give a longer --time, or a shorter "
                f"resilience.signal_seconds{hours}\n") in result.stderr, result.stderr
    else:
        assert "time limit" not in result.stderr, result.stderr


def test_gen_warns_of_a_launcher_that_cuts_the_stop_window_short_without_blaming_the_profile_file(monkeypatch):
    import dataclasses

    from slurmtrain import launchers
    # a launcher with a window of its own below stop_timeout (DeepSpeed's 30 s, before the agent stretched it)
    monkeypatch.setitem(launchers.LAUNCHERS, "deepspeed",
                        dataclasses.replace(launchers.get("deepspeed"), term_window=30))
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--launcher", "deepspeed", "--", "python", "x.py"])
    assert result.exit_code == 0, result.output
    (said,) = [line for line in result.stderr.splitlines() if "at preemption" in line]
    assert said.startswith("slurmtrain: warning: the launcher deepspeed (launch.launcher, --launcher): at preemption "
                           "(SIGTERM) it kills its workers after 30 s, less than resilience.stop_timeout"), said
    assert "local.toml" not in said  # it says torchrun; the choice was the command line's


def test_gen_warns_when_the_checkpoint_window_outlasts_the_warning(tmp_path):
    result = CliRunner().invoke(main, ["gen", "--profile", "local", "--set", "resilience.stop_timeout=100",
                                       "--", "python3", "t.py"])
    assert result.exit_code == 0
    assert "slurmtrain: warning:" in result.stderr and "resilience.stop_timeout (100 s)" in result.stderr
    assert "signal_seconds (60 s)" in result.stderr


def test_torchrun_gets_the_profiles_stop_window(tmp_path):
    profile = load_profile("local", ["resilience.stop_timeout=50"])
    out = tmp_path / "out"
    run_script(tmp_path, render(profile, JobSpec(command=(VENV_PY, "t.py"), run_dir=str(tmp_path / "run"))),
               env_keys="TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    rec = json.loads((out / "python-nodeA.json").read_text())
    assert rec["env"]["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "50"
    assert os.path.exists(tmp_path / "run" / "logs")


def test_a_newline_in_the_command_stays_inside_the_header_comment(tmp_path):
    """`gen -- python3 -c 'import x\nrun()'`: the regeneration command in the header is a
    comment on every line, and the program still gets its argument whole."""
    code = "import time\nfor i in range(3): time.sleep(0)"
    result = CliRunner().invoke(main, ["gen", "--profile", "local", "--set", f'launch.python="{FAKE_PY}"',
                                       "--", "python3", "-c", code])
    assert result.exit_code == 0, result.output
    header = result.stdout.split("#SBATCH", 1)[0]
    assert all(line.startswith("#") for line in header.splitlines() if line), header
    rec = run_script(tmp_path, result.stdout)["launcher-python-nodeA"]
    assert rec["argv"][-2:] == ["-c", code]


@pytest.mark.parametrize("command,appended", [
    (["python", "train.py"], True), (["deepspeed", "train.py"], True),
    (["torchrun", "--nproc_per_node=2", "train.py"], False), (["python", "-m", "pkg.train"], False),
    # as `deepspeed` in the command would have: not after --no_local_rank, to a module too
    (["deepspeed", "--no_local_rank", "train.py"], False), (["deepspeed", "--module", "pkg.train"], True),
])
def test_deepspeed_passes_local_rank_only_to_scripts_that_expect_it(tmp_path, command, appended):
    _, argv = launched(tmp_path, command, "deepspeed")
    assert ("--no_local_rank" not in argv) == appended, argv


@pytest.mark.slow
@pytest.mark.torch
def test_a_signal_that_ends_torchrun_is_said_in_one_line_not_its_traceback(tmp_path):
    """srun ending the step after another node's task failed, or a preemption's SIGTERM to
    every process: torchrun ends its workers and raises SignalException, whose traceback
    filled 30 lines of every node log at every stop. The rendered agent says it in one."""
    import signal
    import subprocess
    import sys
    import time

    profile = load_profile("local", [f'launch.python="{FAKEBIN}/launcher-python"'])
    rec = run_script(tmp_path, render(profile, JobSpec(command=(VENV_PY, "t.py"), run_dir=str(tmp_path / "run"))))
    argv = rec["launcher-python-nodeA"]["argv"]
    agent = argv[argv.index("-c") + 1]
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", agent, "torch.distributed.run", "--standalone", "--nnodes=1",
                             "--nproc-per-node=1", "--no-python", "bash", "-c", f"touch {ready}; exec sleep 120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), proc.poll()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err  # as torchrun's own: the supervisor reads it alike
    assert err.rstrip().splitlines()[-1] == "slurmtrain: torch.distributed.run got SIGTERM and ended its workers", err
    assert "Traceback" not in err, err


def test_a_torchrun_process_count_the_gpus_decide_points_to_gpus_per_node():
    result = CliRunner().invoke(main, ["gen", "--profile", "aws-p4d", "--", "torchrun", "--nproc_per_node", "4",
                                       "train.py"])
    assert result.exit_code == 2 and "give --gpus-per-node 4 or --set launch.procs_per_node=4" in result.output
    fixed = CliRunner().invoke(main, ["gen", "--profile", "aws-p4d", "-G", "4", "--", "torchrun", "--nproc_per_node",
                                      "4", "train.py"])
    assert fixed.exit_code == 0, fixed.output
