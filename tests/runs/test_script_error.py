"""A job script that stopped before its supervisor started (bash's own error in the batch
log: an unbound variable of the profile's, a command not found): `status` said "it was
cancelled, killed, or never started" (Slurm had forgotten the job) or only "Slurm says
FAILED (exit code 1)", the cause in the batch log alone."""

from __future__ import annotations

from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.profile import load_profile
from slurmtrain.render import warnings
from slurmtrain.runs import rundir
from slurmtrain.runs.logs import script_error

SCRIPT = "#!/bin/bash\nset -uo pipefail\nexport HF_HOME=/scratch/\"${NOT_SET}\"/hf\n"
BATCH = "/var/spool/slurmd/job00460/slurm_script: line 3: NOT_SET: unbound variable\n"


def failed_run(root):
    run = rundir.create(root, "unset")
    run.update_manifest(job_ids=["460"], state="submitted", submitted_at="2026-11-28T00:19:37")
    run.script.write_text(SCRIPT)
    (run.logs / "job-460.out").write_text(BATCH)
    events.append(run.path, "submitted", job_id="460")
    return run


def test_status_names_the_script_line_and_bashs_words(tmp_path, fake_slurm):
    run = failed_run(tmp_path)
    said = 'the job script stopped at its line 3: NOT_SET: unbound variable  (export HF_HOME=/scratch/"${NOT_SET}"/hf)'
    assert script_error(run) == said
    fake_slurm(scontrol="", sacct=None)  # Slurm forgot the job
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert f"note       {said}" in out and "never started" not in out, out
    # once the supervisor started, a later line of bash's is the program's business, not this
    events.append(run.path, "started", job_id="460", restart=0, nodes="n1")
    assert script_error(run) is None


def test_a_variable_not_set_here_is_warned_of_before_the_queue(monkeypatch):
    monkeypatch.delenv("NOT_SET", raising=False)
    monkeypatch.setenv("SET_HERE", "x")
    loaded = load_profile("local", ['env.vars.HF_HOME="/scratch/$NOT_SET/hf"', 'env.vars.A="$SET_HERE/$SLURM_JOB_ID"'])
    said = [w for w in warnings(loaded) if "is not set here" in w]
    assert said == ["env.vars.HF_HOME = '/scratch/$NOT_SET/hf' (profile local, or --set): $NOT_SET is not set here, "
                    "and the job gets this environment: its script would stop at once (unbound variable); export it "
                    "before submitting, or write the value"], said


def test_a_variable_in_env_vars_and_container_env_is_warned_of_naming_the_one_that_wins():
    """A profile extending hpc-apptainer (container.env HF_HOME) with runtime = "none" and its
    own env.vars HF_HOME: the job had the parent's value."""
    loaded = load_profile("hpc-apptainer", ['container.runtime="none"', 'container.env.HF_HOME="/.hf_cache"',
                                            'env.vars.HF_HOME="/data/hf"'])
    said = [w for w in warnings(loaded) if "is replaced by" in w]
    assert said == ["env.vars.HF_HOME = '/data/hf' is replaced by container.env.HF_HOME = '/.hf_cache' (profile "
                    "hpc-apptainer): container.env is set over the job's environment, the program sees it; give "
                    "the value there"], said
