"""The parts of submitit that slurmtrain/runs/jobs.py relies on beyond its public API.

jobs.py overrides submitit's private submission hooks and reads its watcher's private
state (see its module docstring). setup.cfg pins submitit to the releases these tests
passed on; a release that renames or reshapes any of these names fails here, saying
which name changed, rather than in a user's `slurmtrain submit`.
"""

from __future__ import annotations

import inspect
import os
import stat

import pytest

submitit = pytest.importorskip("submitit")
from submitit.core import utils  # noqa: E402
from submitit.slurm import slurm  # noqa: E402

from slurmtrain.errors import SlurmError  # noqa: E402
from slurmtrain.runs import jobs  # noqa: E402

VERSION = submitit.__version__


def _params(owner, name: str) -> list[str]:
    fn = getattr(owner, name, None)
    assert fn is not None, f"submitit {VERSION}: {owner.__name__}.{name} is gone (jobs.py overrides or calls it)"
    return list(inspect.signature(fn).parameters)


@pytest.mark.parametrize("owner, name, params", [
    (slurm.SlurmExecutor, "_submit_command", ["self", "command"]),
    (slurm.SlurmExecutor, "_make_submission_file_text", ["self", "command", "uid"]),
    (slurm.SlurmExecutor, "_make_submission_command", ["self", "submission_file_path"]),
    (slurm.SlurmExecutor, "_num_tasks", ["self"]),
    (slurm.SlurmExecutor, "_get_job_id_from_submission_command", ["string"]),
    (slurm.SlurmInfoWatcher, "__init__", ["self", "delay_s"]),
    (slurm.SlurmInfoWatcher, "update", ["self"]),
    (slurm.SlurmInfoWatcher, "get_info", ["self", "job_id", "mode"]),
    (slurm.SlurmInfoWatcher, "is_done", ["self", "job_id", "mode"]),
    (submitit.SlurmJob, "__init__", ["self", "folder", "job_id", "tasks"]),
])
def test_private_signatures(owner, name, params):
    got = _params(owner, name)
    assert got == params, (f"submitit {VERSION}: {owner.__name__}.{name}{tuple(got)} changed "
                           f"signature; jobs.py was written against {tuple(params)}")


def test_submit_command_still_calls_the_hooks_we_override():
    """Our hooks only matter if _submit_command still goes through them, in this order."""
    source = inspect.getsource(slurm.SlurmExecutor._submit_command)
    calls = ["self._make_submission_file_text(", "self._make_submission_command(",
             "utils.CommandFunction(", "self._get_job_id_from_submission_command(",
             "self._num_tasks()", "self.job_class("]
    missing = [c for c in calls if c not in source]
    assert not missing, f"submitit {VERSION}: SlurmExecutor._submit_command no longer calls {missing}"
    positions = [source.index(c) for c in calls[:4]]
    assert positions == sorted(positions), f"submitit {VERSION}: SlurmExecutor._submit_command reordered its hooks"


def test_watcher_private_state():
    """Watcher.update fills these itself instead of asking sacct; get_info/is_done read them."""
    w = slurm.SlurmInfoWatcher(delay_s=60)
    expected = {"_registered": set, "_finished": set, "_info_dict": dict, "_num_calls": int,
                "_last_status_check": float}
    for name, kind in expected.items():
        assert isinstance(getattr(w, name, None), kind), (
            f"submitit {VERSION}: SlurmInfoWatcher.{name} is gone or no longer a {kind.__name__}")
    w._info_dict["7"] = {"State": "RUNNING"}
    assert w.get_info("7", mode="cache") == {"State": "RUNNING"} and "7" in w._registered, (
        f"submitit {VERSION}: SlurmInfoWatcher.get_info(mode='cache') no longer reads _info_dict")
    assert not w.is_done("7", mode="cache")
    w._info_dict["7"] = {"State": "COMPLETED"}
    assert w.is_done("7", mode="cache"), f"submitit {VERSION}: is_done no longer reads the cached State"


def test_job_registers_with_the_class_watcher(tmp_path):
    assert isinstance(submitit.SlurmJob.__dict__.get("watcher"), slurm.SlurmInfoWatcher), (
        f"submitit {VERSION}: SlurmJob.watcher is no longer a class-level SlurmInfoWatcher")
    job = jobs.job(tmp_path, "8")
    assert job.job_id == "8" and "8" in jobs.TrackedJob.watcher._registered


def test_command_function_failure_carries_the_exit_status():
    """jobs.submit_script tells sbatch's timeout (124/137) from a refusal by this."""
    with pytest.raises(utils.FailedJobError) as err:
        utils.CommandFunction(["sh", "-c", "echo refused >&2; exit 124"], verbose=False)()
    assert getattr(err.value.__cause__, "returncode", None) == 124, (
        f"submitit {VERSION}: CommandFunction's FailedJobError no longer has the process error as its cause")
    assert "refused" in str(err.value)


@pytest.fixture
def sbatch(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def install(body: str) -> None:
        for name, text in (("sbatch", body), ("srun", "exit 0\n")):
            path = bin_dir / name
            path.write_text("#!/bin/sh\n" + text)
            path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return install


def test_script_executor_end_to_end(tmp_path, sbatch):
    """The whole hook chain with a stand-in sbatch: our file is what sbatch gets."""
    sbatch('echo "$@" > "$(dirname "$0")/argv"; echo "Submitted batch job 4242"\n')
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\necho hi\n")
    job = jobs.ScriptExecutor(tmp_path, script).submit_script()
    assert isinstance(job, jobs.TrackedJob) and job.job_id == "4242"
    assert (tmp_path / "bin" / "argv").read_text().split()[-1] == str(script)

    sbatch('echo "sbatch: error: Batch job submission failed: Invalid partition" >&2; exit 1\n')
    with pytest.raises(SlurmError, match="Invalid partition"):
        jobs.ScriptExecutor(tmp_path, script).submit_script()
