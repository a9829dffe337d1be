"""The gen command line: output, secrets, help text, and a light import path."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.profile import available, load_profile

SENTINEL = "sk-SENTINEL-7f3a9c-do-not-leak"


def test_gen_prints_script_matching_render():
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    result = CliRunner().invoke(main, ["gen", "--profile", "aws-p4d", "--nodes", "4", "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    assert "#SBATCH --nodes=4" in result.output and "export FI_PROVIDER=efa" in result.output
    assert "export FI_EFA_USE_DEVICE_RDMA=1" in result.output and "export FI_EFA_FORK_SAFE=1" in result.output
    job = JobSpec(command=("python", "train.py"), job_name="train",
                  regen_command="slurmtrain gen --profile aws-p4d --nodes 4 -- python train.py")
    expected = render(load_profile("aws-p4d", ["slurm.nodes=4"]), job)
    body = lambda s: s.split("\n", 4)[4]  # the header names the exact command line
    assert body(result.stdout) == body(expected)  # stderr warns that train.py is not here


def test_g5_has_efa_without_rdma():
    out = CliRunner().invoke(main, ["gen", "-p", "aws-g5", "--", "x"]).output
    assert "FI_PROVIDER=efa" in out and "FI_EFA_USE_DEVICE_RDMA" not in out


def test_gen_without_command_is_a_clear_error():
    result = CliRunner().invoke(main, ["gen", "--profile", "local"])
    assert result.exit_code == 2 and "nothing to run" in result.output


@pytest.mark.parametrize("argv, said", [
    (["gen", "--node", "2", "--", "python", "train.py"], "no such option --node (did you mean --nodes"),
    (["gen", "--tme=1:00", "--", "python", "train.py"], "no such option --tme (did you mean --time"),
    (["submit", "--plain", "--", "python", "train.py"], "no such option --plain (it is `slurmtrain gen`'s)"),
    (["gen", "--", "--", "python", "train.py"], "begins with a second `--`"),
    (["submit", "--", "FOO=1", "python", "train.py"],
     "begins with an environment assignment (FOO=1); the job runs it without a shell: "
     "set it with --set 'env.vars.FOO=\"1\"'"),
])
def test_what_cannot_be_a_command_is_refused_before_anything_is_queued(tmp_path, monkeypatch, argv, said):
    # click takes unknown options as the command's first words: a mistyped option of ours
    # would have been the program (and `submit` queued it).
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2 and said in result.output, result.output
    assert not (tmp_path / "runs").exists()


def test_a_script_not_in_the_submit_directory_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    said = "nosuch.py: no such file in"
    for argv, warned in ((["--", "python", "nosuch.py"], True), (["--", "torchrun", "--nproc_per_node", "2",
                          "nosuch.py", "--lr", "1"], True), (["--", "python", "train.py"], False),
                         (["--", "python", "-m", "pkg.train"], False),
                         (["-p", "hpc-apptainer", "--", "python", "nosuch.py"], False),  # the image may hold it
                         (["--", "python", "train.py", "--deepspeed_config", "nosuch.json"], "nosuch.json: no such"),
                         (["--", "python", "-m", "pkg", "--config=nosuch.yaml"], "nosuch.yaml: no such"),
                         (["--", "python", "train.py", "--lrs={lr}.json"], False)):
        result = CliRunner().invoke(main, ["gen", *argv])
        assert result.exit_code == 0, result.output
        assert ((warned if isinstance(warned, str) else said) in result.stderr) is bool(warned), (argv, result.stderr)


def test_a_launchers_options_the_script_sets_itself_are_said_to_be_left_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    result = CliRunner().invoke(main, ["gen", "--", "torchrun", "--nproc_per_node", "2", "--master_port", "1234",
                                       "--standalone", "--max_restarts=3", "train.py"])
    assert result.exit_code == 0, result.output
    assert ("slurmtrain: note: torchrun's --master_port 1234, --standalone, --max_restarts=3 in the command left "
            "out: the job script starts the launcher") in result.stderr, result.stderr
    assert "to keep port 1234: --set launch.rdzv_port=1234" in result.stderr  # a firewall's port, say
    plain = CliRunner().invoke(main, ["gen", "--", "torchrun", "--nproc_per_node", "2", "train.py"])
    assert "left out" not in plain.stderr, plain.stderr  # taken over whole: nothing to say of its options
    # deepspeed --include names hosts: its GPUs a node are kept, its hosts are Slurm's
    hosts = CliRunner().invoke(main, ["gen", "--launcher", "deepspeed", "--", "deepspeed", "--include",
                                      "stnode1:0,1@stnode2:0,1", "train.py"])
    assert hosts.exit_code == 0 and ("deepspeed's --include hosts stnode1 stnode2 in the command left out"
                                     in hosts.stderr), hosts.stderr
    local = CliRunner().invoke(main, ["gen", "--launcher", "deepspeed", "--", "deepspeed", "--include",
                                      "localhost:0,1", "train.py"])
    assert "left out" not in local.stderr, local.stderr


def test_a_shell_variable_in_the_command_is_warned_of_as_unexpanded(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    result = CliRunner().invoke(main, ["gen", "--", "python", "train.py", "--output-dir", "$SLURMTRAIN_RUN_DIR/out"])
    assert result.exit_code == 0, result.output
    assert ("warning: '$SLURMTRAIN_RUN_DIR/out' in the command reaches the program as it is: the job runs the command "
            "without a shell") in result.stderr, result.stderr
    for fine in ("--lr=3$", "cost$1", "{lr}"):
        quiet = CliRunner().invoke(main, ["gen", "--", "python", "train.py", fine])
        assert "without a shell" not in quiet.stderr, (fine, quiet.stderr)


def test_deepspeed_in_the_command_under_another_launcher_says_which_runs_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print(1)\n")
    said = CliRunner().invoke(main, ["gen", "--", "deepspeed", "--num_gpus", "2", "t.py"]).stderr
    assert "note: `deepspeed` in the command runs under the launcher torchrun (launch.launcher)" in said, said
    quiet = CliRunner().invoke(main, ["gen", "--launcher", "deepspeed", "--", "deepspeed", "t.py"]).stderr
    assert "runs under the launcher" not in quiet and ".deepspeed_env" not in quiet, quiet
    (tmp_path / ".deepspeed_env").write_text("NCCL_IB_DISABLE=1\n")
    said = CliRunner().invoke(main, ["gen", "--launcher", "deepspeed", "--", "deepspeed", "t.py"]).stderr
    assert "/.deepspeed_env: read by deepspeed's own multi-node runner only" in said, said


def test_a_shells_own_forms_in_a_profile_value_are_warned_of_as_text():
    """Only $NAME and ${NAME} expand on the nodes: ${SLURM_TMPDIR:-/tmp}, common in sbatch
    scripts, made a folder of that literal name."""
    said = CliRunner().invoke(main, ["gen", "--set", 'env.vars.TMPDIR="${SLURM_TMPDIR:-/tmp}"',
                                     "--set", 'container.env.X="$(hostname)"', "--", "python", "t.py"]).stderr
    assert "env.vars.TMPDIR = '${SLURM_TMPDIR:-/tmp}' (profile local, or --set): ${SLURM_TMPDIR:-/tmp} stays text" \
        in said, said
    assert "container.env.X = '$(hostname)'" in said
    ticks = CliRunner().invoke(main, ["gen", "--set", 'env.vars.H="/x/`hostname`/y"', "--", "python", "t.py"]).stderr
    assert "env.vars.H = '/x/`hostname`/y' (profile local, or --set): `hostname` stays text" in ticks, ticks
    quiet = CliRunner().invoke(main, ["gen", "--set", 'env.vars.A="$HOME/x ${USER}"', "--", "python", "t.py"]).stderr
    assert "stays text" not in quiet, quiet


def test_a_hang_timeout_for_a_program_that_sends_no_heartbeat_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.py").write_text("print(1)\n")
    (tmp_path / "beats.py").write_text("from slurmtrain import stop\n")
    said = [CliRunner().invoke(main, ["gen", "--set", "resilience.hang_timeout=45", "--", "python", name]).stderr
            for name in ("plain.py", "beats.py")]
    assert "resilience.hang_timeout = 45: plain.py sends no heartbeat" in said[0], said[0]
    assert "heartbeat" not in said[1], said[1]
    assert "heartbeat" not in CliRunner().invoke(main, ["gen", "--", "python", "plain.py"]).stderr  # derived: quiet


def test_a_script_that_needs_the_local_rank_option_its_launcher_would_not_pass_is_warned_of(tmp_path, monkeypatch):
    """`deepspeed train.py` appends --local_rank=N; taken over by torchrun or the srun loop
    the script gets LOCAL_RANK only, and a parser that requires the option stops at once."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.py").write_text("import argparse\np = argparse.ArgumentParser()\n"
                                    "p.add_argument('--local_rank', type=int, required=True)\n")
    (tmp_path / "env.py").write_text("import os\nrank = int(os.environ['LOCAL_RANK'])\n")
    said = "ds.py parses --local_rank, which `{}` passes and the profile's launcher {} does not"
    cases = (
        (["-p", "aws-p4d", "--", "deepspeed", "ds.py"], said.format("deepspeed", "torchrun") + " (it sets "
         "LOCAL_RANK in the environment): use --launcher deepspeed, or read int(os.environ[\"LOCAL_RANK\"])"),
        (["-p", "aws-p4d", "--", "python", "-m", "torch.distributed.launch", "ds.py"],
         said.format("python -m torch.distributed.launch", "torchrun")),
        (["-p", "hpc-apptainer", "--", "deepspeed", "ds.py"],
         said.format("deepspeed", "srun-loop") + " (it sets LOCAL_RANK in the environment): read "
         "int(os.environ[\"LOCAL_RANK\"]) in the script (no launcher this profile allows passes the option)"),
        (["-p", "aws-p4d", "--launcher", "deepspeed", "--", "deepspeed", "ds.py"], None),  # passes it
        (["-p", "aws-p4d", "--", "deepspeed", "env.py"], None),  # reads the environment
        (["-p", "aws-p4d", "--", "deepspeed", "--no_local_rank", "ds.py"], None),  # was never given it
        (["-p", "aws-p4d", "--", "python", "-m", "torch.distributed.launch", "--use-env", "ds.py"], None),
        (["-p", "aws-p4d", "--", "python", "ds.py"], None),  # never had it
    )
    for argv, warned in cases:
        result = CliRunner().invoke(main, ["gen", *argv])
        assert result.exit_code == 0, result.output
        if warned is None:
            assert "--local_rank" not in result.stderr, (argv, result.stderr)
        else:
            assert warned in result.stderr, (argv, result.stderr)


def test_an_apptainer_image_that_is_not_on_this_machine_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.sif").write_text("")
    said = {}
    for image in (str(tmp_path / "here.sif"), "here.sif", "/nosuch/x.sif", "img/x.sif", "docker://org/x:1",
                  "$HOME/x.sif"):
        result = CliRunner().invoke(main, ["gen", "-p", "hpc-apptainer", "--set", f'container.image="{image}"', "--",
                                           "python", "x.py"])
        assert result.exit_code == 0, result.output
        said[image] = [line for line in result.stderr.splitlines() if "container.image" in line]
    assert said == {
        str(tmp_path / "here.sif"): [], "here.sif": [], "docker://org/x:1": [], "$HOME/x.sif": [],
        "/nosuch/x.sif": ["slurmtrain: warning: container.image /nosuch/x.sif: no such file on this machine"],
        "img/x.sif": [f"slurmtrain: warning: container.image img/x.sif: no such file on this machine (a relative "
                      f"path: from {tmp_path}, where the job starts)"]}


def test_a_pyxis_squashfs_file_not_here_and_an_apptainer_key_are_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pyxis = ["gen", "-p", "aws-p5", "--set", 'container.runtime="pyxis"']
    said = CliRunner().invoke(main, [*pyxis, "--set", 'container.image="/fsx/images/missing.sqsh"', "--set",
                                     'container.home="/fsx/home/me"', "--", "python", "x.py"]).stderr
    assert "container.image /fsx/images/missing.sqsh: no such file on this machine" in said, said
    assert "container.home /fsx/home/me: an apptainer/singularity key" in said, said
    named = CliRunner().invoke(main, [*pyxis, "--set", 'container.image="nvcr.io#nvidia/pytorch:24.05-py3"', "--",
                                      "python", "x.py"]).stderr
    assert "container.image" not in named, named  # a registry's name: not a file


def test_a_bad_value_of_an_option_is_named_as_typed_not_as_a_set_never_typed():
    result = CliRunner().invoke(main, ["gen", "-t", "1h", "--", "python", "x.py"])
    assert result.exit_code == 2 and result.output.startswith("slurmtrain: error: --time 1h: slurm.time: "), \
        result.output
    result = CliRunner().invoke(main, ["gen", "--set", "slurm.time=1h", "--", "python", "x.py"])
    assert "error: --set slurm.time=1h: slurm.time: " in result.output, result.output


def test_the_command_keeps_its_own_options():
    result = CliRunner().invoke(main, ["gen", "--nodes", "2", "--", "python", "train.py", "--node", "2", "A=1"])
    assert result.exit_code == 0, result.output
    assert "\n    train.py --node 2 A=1\n" in result.output


def test_launcher_not_allowed_by_profile():
    result = CliRunner().invoke(main, ["gen", "-p", "hpc-apptainer", "--launcher", "deepspeed", "--", "x"])
    assert result.exit_code == 2 and "allowed_launchers" in result.output


def test_secret_values_never_rendered(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SENTINEL)
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    for name in available():
        for launcher in ("torchrun", "srun-loop", "deepspeed"):
            result = CliRunner().invoke(main, ["gen", "-p", name, "--launcher", launcher, "--", "python", "t.py"])
            if result.exit_code == 2 and "allowed_launchers" in result.output:
                continue
            assert result.exit_code == 0, result.output
            assert SENTINEL not in result.output
            for secret in load_profile(name).profile.env.secrets:  # by name only
                assert f"export {secret}\n" in result.output


def test_the_sandbox_profile_warns_of_no_unset_secret(monkeypatch):
    """Every sandbox job's log said WANDB_API_KEY was unset: `local` named it a secret,
    though its jobs get the submitting environment as it is and W&B is not in use."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--", "python", "t.py"])
    assert result.exit_code == 0 and "warning: secret" not in result.output


def test_secret_cannot_be_given_a_value():
    result = CliRunner().invoke(main, ["gen", "-p", "aws-p4d", "--set", "env.vars.WANDB_API_KEY=abc", "--", "x"])
    assert result.exit_code == 2 and "env.secrets" in result.output


def _all_commands(group, prefix=""):
    ctx = click.Context(group)  # the root group imports each command's module when asked for it
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, f"{prefix}{name} ")


def test_every_command_and_option_has_help():
    for path, cmd in _all_commands(main):
        assert (cmd.help or "").strip(), f"`slurmtrain {path}` has no help text"
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert (param.help or "").strip(), f"`slurmtrain {path}` option {param.opts} has no help"
        result = CliRunner().invoke(main, [*path.split(), "--help"])
        assert result.exit_code == 0


def test_cli_import_path_stays_light():
    code = ("import sys; from slurmtrain.cli import main\n"
            "from click.testing import CliRunner\n"
            "r = CliRunner().invoke(main, ['gen', '-p', 'aws-p4d', '--', 'python', 'x.py']); assert r.exit_code == 0\n"
            "print(' '.join(m for m in ('torch', 'deepspeed', 'submitit', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"gen imported: {out}"


def test_the_command_table_names_each_commands_module():
    """The root group imports a module only for its commands (base.COMMANDS): a command
    missing from the table, or listed under another module, could not be found."""
    import importlib

    from slurmtrain.cli.base import COMMANDS
    for module in set(COMMANDS.values()):
        importlib.import_module(f"slurmtrain.cli.{module}")
    assert set(main.commands) == set(COMMANDS)
    for name, cmd in main.commands.items():
        assert cmd.callback.__module__ == f"slurmtrain.cli.{COMMANDS[name]}", name


def test_gen_imports_no_other_commands_module():
    """`slurmtrain gen` starts on a login node for every job: it loads its own command's
    module, not those of submit, status or doctor, nor the sweep code when no sweep is asked for."""
    others = [f"slurmtrain.cli.{m}" for m in ("sandbox", "submit", "runs", "progress", "trainer", "data", "doctor")]
    probe = [*others, "slurmtrain.sweep", "slurmtrain.eventlog", "slurmtrain.cli.gen"]
    code = ("import contextlib, io, sys; from slurmtrain.entry import main\n"
            "sys.argv = ['slurmtrain', 'gen', '-p', 'aws-p4d', '--', 'python', 'x.py']\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit): main()\n"
            f"print(' '.join(m for m in {probe!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["slurmtrain.cli.gen"], f"gen imported: {out}"


def test_ctrl_c_ends_a_command_quietly_with_130_as_a_shell_reports_it(monkeypatch):
    """Not click's "Aborted!" and 1: `logs -f` and `watch` are left with Ctrl-C, locally as
    through --remote (where ssh gives 130)."""
    from slurmtrain.cli import gen as gen_cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(gen_cli, "render", interrupted)
    result = CliRunner().invoke(main, ["gen", "--", "python", "x.py"])
    assert (result.exit_code, result.output) == (130, ""), result.output


def test_a_setup_line_that_is_no_whole_shell_command_is_refused(tmp_path, monkeypatch):
    """An unbalanced quote in a setup line made the rendered script a syntax error: gen and
    submit said nothing, Slurm failed the job at once, `status` said exit code 2."""
    monkeypatch.chdir(tmp_path)
    bad = CliRunner().invoke(main, ["gen", "--set", 'launch.setup=["module load cuda", "source \\"$HOME/venv/bin/activate"]',
                                    "--", "python", "x.py"])
    assert bad.exit_code == 2, bad.output
    assert bad.stderr.startswith("slurmtrain: error: launch.setup line 2 (profile local): 'source \"$HOME/venv/bin/"
                                 "activate' is not a whole shell command (unexpected EOF"), bad.stderr
    fine = CliRunner().invoke(main, ["gen", "--set", 'launch.setup=["if true; then :; fi", "module load x  # don\'t"]',
                                     "--", "python", "x.py"])
    assert fine.exit_code == 0, fine.output


def test_a_command_not_on_this_shells_path_is_warned_of(tmp_path, monkeypatch):
    """A shell without the venv activated: the job got this PATH, every node failed with
    "exec: python: not found" (exit 127) after the queue."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("print(1)\n")
    said = CliRunner().invoke(main, ["gen", "--", "nosuch-python3", "t.py"]).stderr
    assert "warning: nosuch-python3: not on this shell's PATH, which the job gets" in said, said
    quiet = CliRunner().invoke(main, ["gen", "--set", 'launch.setup=["source venv/bin/activate"]', "--",
                                      "nosuch-python3", "t.py"]).stderr
    assert "PATH" not in quiet, quiet  # a setup line may provide it


def test_slurmtrains_own_option_after_the_dashes_is_noted(tmp_path, monkeypatch):
    """`-- python train.py --profile aws-p4d`: the option went to the program and the job
    quietly used the local profile."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    said = CliRunner().invoke(main, ["gen", "--", "python", "train.py", "--profile", "aws-p4d"]).stderr
    assert ("note: --profile after `--` goes to the program, not to slurmtrain (the job uses profile local, "
            "launcher torchrun)") in said, said
    quiet = CliRunner().invoke(main, ["gen", "--profile", "local", "--", "python", "train.py", "--lr", "3"]).stderr
    assert "after `--`" not in quiet, quiet


def test_a_job_option_after_the_program_that_differs_from_the_jobs_is_noted(tmp_path, monkeypatch):
    """`gen python train.py --nodes 1 --time 5` (no `--`): the options went to the program and
    the job asked Slurm for the profile's; the same value as the job's says nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    said = CliRunner().invoke(main, ["gen", "python", "train.py", "--nodes", "1", "--time", "5"]).stderr
    assert "note: --nodes 1 after the program's name goes to the program; the job itself asks Slurm for nodes 2" \
        in said, said
    quiet = CliRunner().invoke(main, ["gen", "--nodes", "1", "--", "python", "train.py", "--nodes=1"]).stderr
    assert "after the program's name" not in quiet, quiet
    same = CliRunner().invoke(main, ["gen", "--time", "00:30:00", "--", "python", "train.py", "--time", "30"]).stderr
    assert "after the program's name" not in same, same  # the same limit, written otherwise
    for words in (["--nodes", "02"], ["--time", "--epochs", "3"]):  # the same count; a flag of the program's
        quiet = CliRunner().invoke(main, ["gen", "--nodes", "2", "--", "python", "train.py", *words]).stderr
        assert "after the program's name" not in quiet, (words, quiet)


def test_a_python_script_as_the_command_is_told_to_be_run_with_python_where_the_launcher_does_not(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    said = CliRunner().invoke(main, ["gen", "--launcher", "srun", "--", "train.py"]).stderr
    assert "warning: train.py is a Python script, not a command the srun launcher can run: write `python " \
           "train.py`" in said, said
    quiet = CliRunner().invoke(main, ["gen", "--launcher", "torchrun", "--", "train.py"]).stderr
    assert "train.py" not in quiet.replace("train.py does not use", ""), quiet  # torchrun runs it with Python
    (tmp_path / "run.py").write_text("#!/usr/bin/env python3\nprint(1)\n")
    (tmp_path / "run.py").chmod(0o755)
    quiet = CliRunner().invoke(main, ["gen", "--launcher", "srun", "--", "./run.py"]).stderr
    assert "Python script" not in quiet, quiet  # executable, with its interpreter line: srun runs it


def test_gen_says_which_bad_nodes_submit_would_leave_out_and_this_script_does_not(tmp_path, monkeypatch):
    from slurmtrain import ledger

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURMTRAIN_RUNS_DIR", raising=False)
    monkeypatch.delenv(ledger.SITE_VAR, raising=False)
    clean = CliRunner().invoke(main, ["gen", "-p", "local", "--", "true"])
    assert clean.exit_code == 0 and "ledger" not in clean.stderr
    ledger.add(tmp_path / "runs", "stnode2", "doctor: GPU 3 missing", source="doctor")
    ledger.add(tmp_path / "runs", "stnode5", "hung twice", source="hang")
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--", "true"])
    assert result.exit_code == 0 and "--exclude" not in result.stdout  # the script is as it was
    assert ("slurmtrain: warning: the bad-node ledger (runs/bad-nodes.jsonl) lists "
            "stnode2,stnode5: `slurmtrain submit` leaves them out, this script does not (submit it with "
            "`sbatch --exclude=stnode2,stnode5`, or see `slurmtrain nodes`)") in result.stderr, result.stderr


@pytest.mark.parametrize("text, warned, noted", [
    ('import os\nrank = int(os.environ["SLURM_PROCID"])\n', True, True),  # written for `srun python train.py`
    ('import os\nrank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID")))\n', False, True),
    ('from slurmtrain import stop\nrank = int(os.environ["RANK"])\n', False, False),
])
def test_what_a_script_reads_and_does_not_use_is_said_before_the_queue(tmp_path, monkeypatch, text, warned, noted):
    """Its rank from SLURM_PROCID under an agent launcher with two processes a node (they would
    take the same rank); no slurmtrain.stop (after a stop its job is not requeued)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(text)
    err = CliRunner().invoke(main, ["gen", "--", "python", "train.py"]).stderr
    assert ("train.py reads SLURM_PROCID, but the torchrun launcher starts 2 processes a node in one Slurm task, "
            "which all see the same one: if it takes its rank from it, use --launcher srun" in err) is warned, err
    assert ("note: train.py does not use slurmtrain.stop, so it reports no checkpoint: after a preemption or the "
            "time limit its job is not requeued" in err) is noted, err
    srun = CliRunner().invoke(main, ["gen", "--launcher", "srun", "--", "python", "train.py"]).stderr
    assert "SLURM_PROCID" not in srun, srun  # one Slurm task a process: SLURM_PROCID is its rank
    always = CliRunner().invoke(main, ["gen", "--set", 'resilience.requeue_when="always"', "--", "python",
                                       "train.py"]).stderr
    assert "slurmtrain.stop" not in always, always


def test_a_script_that_does_not_compile_is_warned_of_before_the_queue(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("from slurmtrain import stop\ndef f(\n    x = 1\n")
    result = CliRunner().invoke(main, ["gen", "--", "python", "train.py"])
    assert result.exit_code == 0 and "#!/bin/bash" in result.stdout, result.output  # warned, not refused
    assert ("warning: train.py does not compile with this Python (" in result.stderr
            and "SyntaxError: '(' was never closed (line 2); the job would fail as it starts" in result.stderr), \
        result.stderr
    # A regex's escape (a SyntaxWarning on 3.12) and a coding line are no concern of gen's; nor null bytes.
    (tmp_path / "train.py").write_bytes(b"# -*- coding: latin-1 -*-\nfrom slurmtrain import stop\n"
                                        b"import re\nNAME = '\xe9t\xe9'\nPAT = re.compile('\\d+')\n")
    quiet = CliRunner().invoke(main, ["gen", "--", "python", "train.py"])
    assert quiet.exit_code == 0 and "compile" not in quiet.stderr and "Warning" not in quiet.stderr, quiet.stderr
    (tmp_path / "train.py").write_bytes(b"from slurmtrain import stop\n\x00\n")
    assert "compile" not in CliRunner().invoke(main, ["gen", "--", "python", "train.py"]).stderr
