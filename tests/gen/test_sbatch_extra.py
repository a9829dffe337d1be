"""slurm.extra against the directives the job script writes itself: sbatch takes the last of
two, and extra comes last. An --output there hid the batch log from status and logs, a
--no-requeue turned survival off, silently (a user migrating a guide's script)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from slurmtrain import sbatchextra
from slurmtrain.cli import main
from slurmtrain.errors import ConfigError, UsageError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render, warnings

COMMAND = ("python", "train.py")


def script(extra: list[str], *sets: str, exclude: tuple[str, ...] = ()) -> str:
    quoted = ", ".join(f'"{d}"' for d in extra)
    return render(load_profile("local", [f"slurm.extra=[{quoted}]", *sets]), JobSpec(command=COMMAND, exclude=exclude))


@pytest.mark.parametrize("directive, says", [
    ("--output=logs/%x_%j.out", "the batch log is <run>/logs/job-%j.out, where status and logs read it"),
    ("-o=out.txt", "writes --output itself"),
    ("--error=logs/%j.err", "stdout and stderr together"),
    ("--no-requeue", "resilience.requeue = false"),
    ("--signal=B:TERM@60", "resilience.signal and resilience.signal_seconds"),
    ("--job-name=foo", "--name"),
    ("--ntasks-per-node=2", "launch.procs_per_node"),
    ("--nodes=4", "slurm.nodes"),
    ("--open-mode=truncate", "appended to"),
])
def test_a_directive_the_script_writes_itself_is_refused_naming_what_sets_it(directive, says):
    with pytest.raises(ConfigError) as err:  # as the profile loads, naming what gave it
        script([directive])
    assert str(err.value).startswith(f'--set slurm.extra=["{directive}"]: slurm.extra: {directive}: the job '
                                     "script writes"), err.value
    assert sbatchextra.owned((directive,))[0] == directive  # and the renderer's own check, for a profile made in code
    assert says in str(err.value) and "drop it from slurm.extra" in str(err.value), err.value


def test_a_keyed_directive_is_refused_only_where_its_key_is_set_too():
    assert "#SBATCH --account=ml" in script(["--account=ml"])
    with pytest.raises(UsageError, match=r"slurm.extra has --account=ml \(profile local\) and slurm.account is set "
                                         r"too: sbatch would take the last of the two; give it once, as slurm.account"):
        script(["--account=ml"], "slurm.account=research")
    with pytest.raises(UsageError, match="slurm.partition is set too"):
        script(["-p=big"])  # the local profile names its partition


def test_an_exclude_in_extra_joins_the_ledgers_in_one_directive():
    text = script(["--exclude=n7,n8"], exclude=("n2",))
    assert text.count("#SBATCH --exclude=") == 1 and "#SBATCH --exclude=n2,n7,n8" in text, text


def test_an_option_sbatch_does_not_know_is_warned_of_with_the_closest_name():
    loaded = load_profile("local", ['slurm.extra=["--reservaton=p4d-res", "--mail-type=END"]'])
    said = [w for w in warnings(loaded) if "slurm.extra" in w]
    assert said == ["slurm.extra has --reservaton=p4d-res: sbatch knows no --reservaton (did you mean "
                    "--reservation?); sbatch would refuse the job (profile local)"], said
    assert sbatchextra.unknown(("--mail-user=a@b", "--segment=2", "-w=n1")) == []


def test_gen_says_it_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["gen", "--set", 'slurm.extra=["--output=x.out"]', "--", *COMMAND])
    assert result.exit_code == 2 and result.output.startswith('slurmtrain: error: --set slurm.extra=["--output=x.out"]: '
                                                              "slurm.extra: --output=x.out: the job script writes"), \
        result.output
    assert len(result.output.splitlines()) == 1, result.output


def test_sbatchs_refusal_of_an_extra_option_names_the_profile_key(tmp_path):
    from slurmtrain.runs import rundir
    from slurmtrain.runs.submit import _extra_hint

    run = rundir.create(tmp_path, "x")
    run.script.write_text("#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --reservaton=p4d-res\n")
    refused = "sbatch: unrecognized option '--reservaton=p4d-res'"
    assert _extra_hint(run, refused) == "; --reservaton comes from the profile's slurm.extra (--set " \
                                        "slurm.extra=[...] or its file)"
    assert _extra_hint(run, "sbatch: error: Batch job submission failed: Invalid account") == ""


def test_a_run_directory_with_a_space_is_written_quoted_on_its_output_line():
    """A project under "my proj": submit refused it (no spaces on an #SBATCH line), though
    sbatch reads a double-quoted value whole (22.05 and 24.11); a path with letters beyond
    ASCII is written as it is; quotes or a newline stay refused, named."""
    text = render(load_profile("local"), JobSpec(command=COMMAND, run_dir="/home/u/my proj/runs/r-1"))
    assert '#SBATCH --output="/home/u/my proj/runs/r-1/logs/job-%j.out"' in text, text
    text = render(load_profile("local"), JobSpec(command=COMMAND, run_dir="/home/jürgen/läufe/r-1"))
    assert "#SBATCH --output=/home/jürgen/läufe/r-1/logs/job-%j.out" in text, text  # sbatch reads UTF-8 as it is
    for bad, chars in (('/home/u/my "proj"/runs/r-1', repr(' "')), ("/home/u/a\nb/r-1", repr("\n"))):
        with pytest.raises(UsageError, match=re.escape(f"sbatch cannot read {chars} on an #SBATCH line")):
            render(load_profile("local"), JobSpec(command=COMMAND, run_dir=bad))


def test_python_output_reaches_the_node_logs_unbuffered_unless_the_profile_says_otherwise():
    """print() without flush=True reached a node log (a file) in 8 KiB blocks: `logs -f`
    showed nothing for minutes of a user's training."""
    assert "\nexport PYTHONUNBUFFERED=1\n" in script([])
    text = render(load_profile("local", ['env.vars.PYTHONUNBUFFERED=""']), JobSpec(command=COMMAND))
    assert "\nexport PYTHONUNBUFFERED=''\n" in text and "PYTHONUNBUFFERED=1" not in text, text


def test_slurm_extra_is_refused_naming_where_it_came_from_and_how_a_list_is_written():
    with pytest.raises(ConfigError) as err:
        load_profile("local", ['slurm.extra=["--output=x"]'])
    assert str(err.value).startswith('--set slurm.extra=["--output=x"]: slurm.extra: --output=x: the job script '
                                     "writes --output itself"), err.value
    with pytest.raises(ConfigError) as err:
        load_profile("local", ["slurm.extra=--qos=foo"])
    assert "(a list is written [\"--qos=foo\"]; in --set, quote it for the shell: --set 'slurm.extra=" \
           "[\"--qos=foo\"]')" in str(err.value), err.value


@pytest.mark.parametrize("value", ["USR1", "SIGUSR1", "\"10\""])
def test_usr1_as_the_stop_signal_is_warned_of(value):
    """Lightning's SLURM auto-requeue answers SIGUSR1 by requeueing the job itself."""
    said = [w for w in warnings(load_profile("local", [f"resilience.signal={value}"])) if "resilience.signal" in w]
    assert len(said) == 1 and "Lightning's SLURM auto-requeue handles it" in said[0], said
    assert not [w for w in warnings(load_profile("local", ["resilience.signal=USR2"])) if "resilience.signal" in w]
