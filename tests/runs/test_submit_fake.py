"""`slurmtrain submit` against a fake sbatch: the run directory, the exact script, refusals.

The real sbatch is exercised in tests/e2e; here the run directory contract is checked
without a cluster.
"""

import json
import os
import stat

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.cli.submit import _without_runs_dir
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

FAKE_SBATCH = """#!/bin/bash
echo "$@" >> "$(dirname "$0")/sbatch.calls"
if grep -q -- '--partition=nope' "${@: -1}"; then
  echo "sbatch: error: invalid partition specified: nope" >&2
  echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
  exit 1
fi
if grep -q -- '--job-name=noconf' "${@: -1}"; then
  echo "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
  echo "sbatch: error: fetch_config: DNS SRV lookup failed" >&2
  echo "sbatch: error: _establish_config_source: failed to fetch config" >&2
  echo "sbatch: fatal: Could not establish a configuration source" >&2
  exit 1
fi
if grep -q -- '--nodes=3' "${@: -1}"; then
  echo "sbatch: error: Batch job submission failed: Node count specification invalid" >&2
  exit 1
fi
echo "Submitted batch job 4242"
"""
FAKE_SINFO = """#!/bin/bash
echo "$@" >> "$(dirname "$0")/sinfo.calls"
echo 'debug*|2|4|(null)'
"""


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("sinfo", FAKE_SINFO), ("srun", "#!/bin/sh\nexit 0\n")):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")  # the program the commands name: submit refuses a missing one
    return bin_dir


def test_submit_writes_the_run_directory(fake_bin, tmp_path):
    result = CliRunner().invoke(main, ["submit", "--runs-dir", "myruns", "--name", "demo", "--",
                                       "python", "x.py", "--lr", "3e-4"])
    assert result.exit_code == 0, result.output
    assert "submitted job 4242" in result.output
    (run,) = (tmp_path / "myruns").iterdir()
    assert run.name.startswith("demo-")
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".")) == [
        "events.jsonl", "job.sbatch", "logs", "manifest.json", "profile.toml"]
    # sbatch got the run directory's job.sbatch itself
    assert (fake_bin / "sbatch.calls").read_text().split()[-1] == str(run / "job.sbatch")
    # ...which is the script gen renders for the same inputs, with the run directory filled in
    loaded = load_profile("local")
    script = (run / "job.sbatch").read_text()
    expected = render(loaded, JobSpec(command=("python", "x.py", "--lr", "3e-4"), job_name="demo",
                                      run_dir=str(run), regen_command=script.splitlines()[2][4:]))
    assert script == expected
    assert f"#SBATCH --output={run}/logs/job-%j.out" in script
    m = json.loads((run / "manifest.json").read_text())
    assert m["state"] == "submitted" and m["job_ids"] == ["4242"]
    assert m["profile"] == {"name": "local", "source": m["profile"]["source"], "digest": loaded.digest()}
    assert m["command"] == ["python", "x.py", "--lr", "3e-4"] and m["recipe"] is None
    assert m["slurmtrain_version"] and m["submitted_at"] and m["launcher"] == "torchrun"
    assert "git" in m
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["job_id"]) for e in events] == [("submitted", "4242")]
    assert (run / "profile.toml").read_text() == loaded.to_toml()


def test_refusal_is_one_line_nonzero_and_recorded(fake_bin, tmp_path):
    result = CliRunner().invoke(main, ["submit", "--partition", "nope", "--", "python", "x.py"])
    assert result.exit_code == 1
    err_lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(err_lines) == 1, result.output
    assert err_lines[0].startswith("slurmtrain: error: sbatch refused the job: ")
    assert "Invalid partition name specified" in err_lines[0]
    (run,) = (tmp_path / "runs").iterdir()
    m = json.loads((run / "manifest.json").read_text())
    assert m["state"] == "refused" and "Invalid partition name" in m["refusal"] and m["job_ids"] == []
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["submit_refused"]
    logs = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path / "runs"), run.name])
    assert logs.exit_code == 2 and f"run {run.name} has no logs: sbatch refused its job (" in logs.output \
        and "Invalid partition name" in logs.output, logs.output


def test_a_job_larger_than_its_partition_is_told_what_the_partition_has(fake_bin, tmp_path):
    result = CliRunner().invoke(main, ["submit", "--nodes", "3", "--", "python", "x.py"])
    assert result.exit_code == 1
    assert ("Node count specification invalid (recorded in " in result.output and
            "; partition debug has 2 node(s) of 4 CPUs, no GPUs (GRES); the job asks for 3 node(s) (sinfo)"
            in result.output), result.output
    # Spares count: the job asks for them too.
    result = CliRunner().invoke(main, ["submit", "--nodes", "2", "--set", "slurm.spare_nodes=1", "--", "python", "x.py"])
    assert ("; partition debug has 2 node(s) of 4 CPUs, no GPUs (GRES); the job asks for 3 node(s) (2 + 1 spare(s): "
            "slurm.spare_nodes) (sinfo)" in result.output), result.output
    # Any other refusal asks nothing more of Slurm.
    CliRunner().invoke(main, ["submit", "--partition", "nope", "--", "python", "x.py"])
    assert len((fake_bin / "sinfo.calls").read_text().splitlines()) == 2


def test_a_shell_without_the_slurm_configuration_is_told_how_to_get_the_sandboxs(fake_bin, tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    result = CliRunner().invoke(main, ["submit", "--name", "noconf", "--", "python", "x.py"])
    assert result.exit_code == 1
    assert result.output.rstrip().endswith("; sbatch found no Slurm configuration (SLURM_CONF is unset): for the "
                                           "sandbox, run eval \"$(slurmtrain sandbox env)\" in this shell first"), \
        result.output


def test_render_error_leaves_no_run_directory(fake_bin, tmp_path):
    result = CliRunner().invoke(main, ["submit", "--name", "bad name", "--", "python", "x.py"])
    assert result.exit_code == 2
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_no_slurm_commands_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")
    result = CliRunner().invoke(main, ["submit", "--", "python", "x.py"])
    assert result.exit_code == 1
    assert "srun: command not found" in result.output


def test_regen_line_is_a_gen_command():
    assert _without_runs_dir(["--runs-dir", "r", "-N", "2", "--runs-dir=x", "--", "python", "--runs-dir"]) == [
        "-N", "2", "--", "python", "--runs-dir"]


def test_a_job_name_with_a_slash_is_refused_before_any_directory(fake_bin, tmp_path):
    result = CliRunner().invoke(main, ["submit", "--name", "x;$(touch /tmp/pwned)", "--", "python", "x.py"])
    assert result.exit_code == 2 and "job name 'x;$(touch /tmp/pwned)': use 1-128 ASCII letters" in result.output, \
        result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*"))


def test_a_program_file_the_job_would_not_find_is_refused_before_the_queue(fake_bin, tmp_path):
    """A typo or the wrong directory fails every rank, after the wait in the queue: refused
    here. Not judged where this machine lacks the folder (only the nodes mount it)."""
    result = CliRunner().invoke(main, ["submit", "--name", "typo", "--", "torchrun", "--nproc_per_node", "2",
                                       "trian.py"])
    assert result.exit_code == 2, result.output
    assert f"trian.py: no such file in {tmp_path} (relative to {tmp_path}, the submit directory, where the job starts); nothing was submitted" \
        in result.output, result.output
    assert not (tmp_path / "runs").exists() and not (fake_bin / "sbatch.calls").exists()
    elsewhere = CliRunner().invoke(main, ["submit", "--name", "nodes", "--", "python", "/nodes-only/train.py"])
    assert elsewhere.exit_code == 0, elsewhere.output
    # DeepSpeed's config is read by every rank at its start: refused too; a file the program
    # may write (--out res.json) is only warned of
    (tmp_path / "train.py").write_text("")
    config = CliRunner().invoke(main, ["submit", "--name", "ds", "--", "deepspeed", "train.py", "--deepspeed",
                                       "--deepspeed_config", "configs/ds.json"])
    assert config.exit_code == 2 and "configs/ds.json: no such file in" in config.output, config.output
    out = CliRunner().invoke(main, ["submit", "--name", "out", "--", "python", "train.py", "--out", "res.json"])
    assert out.exit_code == 0 and "warning: res.json: no such file" in out.output, out.output


def test_the_program_and_its_config_are_looked_for_in_the_profiles_workdir(fake_bin, tmp_path):
    """launch.workdir = "mistral" (a guide's `cd mistral`): the job runs the command there.
    train.py was looked for in the submit directory, and a correct job refused; the
    DeepSpeed config was never read. Relative and absolute workdirs alike."""
    work = tmp_path / "mistral"
    (work / "conf").mkdir(parents=True)
    (work / "train.py").write_text("")
    (work / "conf" / "ds.json").write_text('{"train_batch_size": 6, "train_micro_batch_size_per_gpu": 1, '
                                           '"gradient_accumulation_steps": 1}')
    for workdir in ("mistral", str(work)):
        ok = CliRunner().invoke(main, ["submit", "--name", "wd", "--set", f"launch.workdir={workdir}", "--",
                                       "deepspeed", "train.py", "--deepspeed_config", "conf/ds.json"])
        # read from the workdir: 6 is no batch of the local profile's 4 ranks
        assert ok.exit_code == 2 and "train_batch_size: 6 is not train_micro_batch_size_per_gpu 1" in ok.output, \
            (workdir, ok.output)
        missing = CliRunner().invoke(main, ["submit", "--name", "wd", "--set", f"launch.workdir={workdir}", "--",
                                            "python", "trian.py"])
        assert missing.exit_code == 2 and f"trian.py: no such file in {work} (relative to {work}, where the job " \
            "starts: launch.workdir of profile local)" in missing.output, (workdir, missing.output)
    (work / "conf" / "ds.json").write_text('{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, '
                                           '"gradient_accumulation_steps": 1}')
    ok = CliRunner().invoke(main, ["submit", "--name", "wd", "--set", "launch.workdir=mistral", "--",
                                   "deepspeed", "train.py", "--deepspeed_config", "conf/ds.json"])
    assert ok.exit_code == 0 and "no such file" not in ok.output, ok.output


def test_a_pipeline_split_leaves_fewer_data_parallel_ranks_for_the_deepspeed_batch(fake_bin, tmp_path):
    """FMEngine's --pipe_parallel_size 2 on 4 ranks: DeepSpeed's batch rule counts the 2
    data-parallel ranks, so 1 x 2 x 2 = 4 is right (it was refused as 1 x 2 x 4 = 8)."""
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ds.json").write_text('{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, '
                                      '"gradient_accumulation_steps": 2}')
    piped = CliRunner().invoke(main, ["submit", "--name", "pp", "--", "deepspeed", "train.py", "--deepspeed_config",
                                      "ds.json", "--pipe_parallel_size", "2"])
    assert piped.exit_code == 0, piped.output
    plain = CliRunner().invoke(main, ["submit", "--name", "dp", "--", "deepspeed", "train.py", "--deepspeed_config",
                                      "ds.json"])
    assert plain.exit_code == 2 and "x 4 ranks = 8" in plain.output, plain.output
    wrong = CliRunner().invoke(main, ["submit", "--name", "tp", "--", "deepspeed", "train.py", "--deepspeed_config",
                                      "ds.json", "--tensor-model-parallel-size=4"])
    assert wrong.exit_code == 2 and ("x 1 data-parallel ranks (4 ranks / --tensor-model-parallel-size 4) = 2"
                                     in wrong.output), wrong.output


def test_a_time_limit_the_stop_signal_would_come_at_the_start_of_is_refused(fake_bin, tmp_path):
    """`--time 1` with the local profile's 60 s lead: each start would save at once and
    requeue, up to max_requeues times. gen warns; submit refuses, queueing nothing."""
    result = CliRunner().invoke(main, ["submit", "--time", "1", "--", "python", "x.py"])
    assert result.exit_code == 2, result.output
    assert ("the job would be told to stop as it starts: give a longer --time, or a shorter "
            "resilience.signal_seconds; hours are written H:MM:SS (2:00:00 is two hours); nothing was submitted"
            in result.output), result.output
    assert "warning" not in result.output and result.output.count("is 1 min to Slurm") == 1, result.output  # said once
    assert not (fake_bin / "sbatch.calls").exists()
    longer = CliRunner().invoke(main, ["submit", "--time", "2", "--", "python", "x.py"])  # stops after 60 s: warned
    assert longer.exit_code == 0 and "about 60 s after it starts" in longer.output, longer.output


def test_a_refusal_of_its_size_names_the_nodes_the_job_left_out(fake_bin, tmp_path):
    """--nodes 3 on a partition of 2 with a node left out: the event and the outcome name it
    (the bad-node ledger leaving too few nodes read as a plain "user error")."""
    from slurmtrain import ledger
    from slurmtrain.runs import classify

    ledger.add(tmp_path / "runs", "stnode2", "node_failure")
    CliRunner().invoke(main, ["submit", "--nodes", "3", "--", "python", "x.py"])
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    (refused,) = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
                  if e["event"] == "submit_refused"]
    assert refused["excluded"] == "stnode2", refused
    detail = classify.classify(run).detail
    assert detail.endswith("; the job left out node(s) stnode2 (the bad-node ledger, --exclude): too few left? "
                           "`slurmtrain nodes`"), detail
