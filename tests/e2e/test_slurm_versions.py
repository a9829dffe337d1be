"""What every Slurm slurmtrain supports must do, with no torch: submit, status, logs,
cancel, exit codes, a job array, the stop contract under preemption, the time limit and
the requeue limit, and doctor's Slurm checks, with a user's own program (counter.py).

These run twice in CI: in the suite, on this machine's Slurm (Debian 12's 22.05), and in
the Slurm-version lane (scripts/slurm_lane.sh), on Debian 13's 24.11 in a tree of its own
with that tree's Python and no torch. So: nothing here imports torch, and each test says
which Slurm it ran on when it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_util import cli, run_dir, submit, wait_final, wait_for_file
from slurmtrain import events, slurmversion
from slurmtrain.runs import classify

pytestmark = pytest.mark.slurm

COUNTER = Path(__file__).resolve().parent / "counter.py"
# One process on one node, launched by srun: no torchrun, so no torch.
USER = ["--profile", "local", "--launcher", "srun", "-N", "1", "--set", "launch.procs_per_node=1"]


def counter(steps: int, seconds: float = 0.2, save_every: int = 5) -> list[str]:
    return ["--", sys.executable, str(COUNTER), str(steps), str(seconds), str(save_every)]


@pytest.fixture(scope="module")
def version(_sandbox_session) -> str:
    """The Slurm the sandbox runs, as its controller says: named in every failure."""
    return slurmversion.text(slurmversion.of_cluster())


def named(cwd: Path, name: str, event: str) -> list[dict]:
    return [e for e in events.read(run_dir(cwd, name)) if e.get("event") == event]


def take_all_nodes(seconds: int) -> None:
    """A job on the `high` partition that needs every CPU of both nodes: it preempts `low`."""
    subprocess.run(["sbatch", "-p", "high", "-N", "2", "--ntasks-per-node=4", "-J", "preemptor", "-o", "/dev/null",
                    "--wrap", f"sleep {seconds}"], check=True, capture_output=True, timeout=60)


def preempt_after_a_checkpoint(cwd: Path, name: str, start: int) -> None:
    """Once start ``start`` of the run has saved, preempt it."""
    wait_for_file(cwd, name, f"a checkpoint in start {start}",
                  lambda: len(named(cwd, name, "started")) == start
                  and events.read(run_dir(cwd, name))[-1].get("event") == "checkpoint_saved")
    take_all_nodes(5)


def test_the_sandbox_wrote_what_its_slurm_needs(version):
    """24.05 and later: CgroupPlugin=disabled (the lane's tree has no cgroup file system at
    all, and slurmd starts); 22.05: no cgroup.conf (it refuses "disabled")."""
    conf = Path(os.environ["SLURM_CONF"]).with_name("cgroup.conf")
    if slurmversion.parse(version) >= (24, 5):
        assert "CgroupPlugin=disabled" in conf.read_text().splitlines(), version
    else:
        assert not conf.exists(), (version, conf.read_text())
    print(f"Slurm {version}; /sys/fs/cgroup {'mounted' if os.path.ismount('/sys/fs/cgroup') else 'absent'}")


def test_a_program_completes_and_status_and_logs_say_so(tmp_path, version):
    """From a project folder with a space in its name: the batch log's #SBATCH --output is
    double-quoted there, which sbatch reads whole."""
    cwd = tmp_path / "my proj"
    cwd.mkdir()
    name = submit(cwd, *USER, "--name", "counts", *counter(5, 0.1))
    final = wait_final(cwd, [name])[name]
    logs = cli(cwd, "logs", name).stdout
    assert (final["state"], final["exit_code"], final["outcome"]) == ("COMPLETED", 0, "completed"), (version, final)
    assert "counted to 5" in logs, (version, logs[-2000:])
    assert (run_dir(cwd, name) / "logs" / f"job-{final['job_id']}.out").is_file(), (version, logs[-2000:])
    manifest = json.loads((run_dir(cwd, name) / "manifest.json").read_text())
    assert manifest["slurm_version"] == version != "unknown", manifest
    table = cli(cwd, "runs").stdout
    assert name in table and "COMPLETED" in table, (version, table)


def test_exit_status_3_fails_and_says_3(tmp_path, version):
    name = submit(tmp_path, *USER, "--name", "three", "--", sys.executable, "-c",
                  "import sys; print('giving up', flush=True); sys.exit(3)")
    final = wait_final(tmp_path, [name])[name]
    assert (final["state"], final["exit_code"]) == ("FAILED", 3), (version, final)
    assert "3" in final["outcome_detail"] and final.get("restarts", 0) in (0, None), (version, final)
    assert "giving up" in cli(tmp_path, "logs", name).stdout, version


def test_cancel_ends_cancelled_and_is_not_requeued(tmp_path, version):
    name = submit(tmp_path, *USER, "--name", "cancelled", *counter(10_000, 0.5))
    wait_for_file(tmp_path, name, "the program to start", lambda: named(tmp_path, name, "started"))
    proc = cli(tmp_path, "cancel", name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    final = wait_final(tmp_path, [name])[name]
    assert (final["state"], final["outcome"]) == ("CANCELLED", "cancelled"), (version, final)
    assert (final.get("restarts") or 0) == 0 and not named(tmp_path, name, "requeue"), (version, final)


@pytest.mark.parametrize("limit", [None, 1], ids=["default-limit", "max-requeues-1"])
def test_one_preemption_one_requeue_then_completed(tmp_path, version, limit):
    """Started exactly as often as it was stopped, plus once: Slurm 24.11 requeued a
    preempted job that had already been requeued by its script a second time at its end."""
    extra = ["--max-requeues", str(limit)] if limit is not None else []
    name = submit(tmp_path, *USER, "--partition", "low", "--name", f"preempted{limit}", *extra,
                  *counter(60, 0.25, 5))
    preempt_after_a_checkpoint(tmp_path, name, 1)
    final = wait_final(tmp_path, [name], timeout=180)[name]
    started = named(tmp_path, name, "started")
    assert (final["state"], final["exit_code"], final["outcome"]) == ("COMPLETED", 0, "completed"), (version, final)
    assert (final["restarts"], len(started), len(named(tmp_path, name, "requeue"))) == (1, 2, 1), \
        f"{version}: {final}\n{(run_dir(tmp_path, name) / 'events.jsonl').read_text()}"
    assert named(tmp_path, name, "resumed")[0]["step"] >= 5
    kinds = [o.kind for o in classify.ends(run_dir(tmp_path, name))]
    assert kinds == [classify.PREEMPTED, classify.COMPLETED], (version, kinds)


def _events_text(cwd: Path, name: str) -> str:
    return (run_dir(cwd, name) / "events.jsonl").read_text()


def test_a_preempted_program_that_lingers_after_stopping_is_ended_within_the_grace_time(tmp_path, version):
    """A preemption's SIGTERM reaches the tasks only: the program saved and reported `stopped`,
    but its process stayed. stop_timeout (20 s) after that the supervisor ends the launch,
    within the partition's GraceTime (60 s): a preemption, requeued, and the run completes."""
    name = submit(tmp_path, *USER, "--partition", "low", "--name", "lingers", "--set", "resilience.stop_timeout=20",
                  *counter(60, 0.25, 5), "--linger", "300")
    preempt_after_a_checkpoint(tmp_path, name, 1)
    final = wait_final(tmp_path, [name], timeout=240)[name]
    assert (final["state"], final["outcome"], final["restarts"]) == ("COMPLETED", "completed", 1), \
        f"{version}: {final}\n{_events_text(tmp_path, name)}"
    [lingered] = named(tmp_path, name, "stop_lingered")
    assert lingered["seconds"] == 20 and not named(tmp_path, name, "requeued_by_slurm"), version
    kinds = [o.kind for o in classify.ends(run_dir(tmp_path, name))]
    assert kinds == [classify.PREEMPTED, classify.COMPLETED], (version, kinds)


def test_a_launch_that_outlives_the_preemptions_grace_time_is_a_preemption_and_starts_twice(tmp_path, version):
    """Asked to stop, the program takes longer than the GraceTime (60 s) to save: Slurm kills
    the job and requeues it itself. That start reads as a preemption (24.11 may send the
    script SIGTERM: it read as an administrator's requeue; 22.05 kills the script with it: said
    by the next start), the run resumes from its periodic checkpoint, and the program runs
    twice: 24.11's third start of the finished job ends at once."""
    name = submit(tmp_path, *USER, "--partition", "low", "--name", "outlives", "--set", "resilience.stop_timeout=300",
                  *counter(60, 0.25, 5), "--stall", "300")
    preempt_after_a_checkpoint(tmp_path, name, 1)
    final = wait_final(tmp_path, [name], timeout=300)[name]
    started = named(tmp_path, name, "started")
    # 24.05+ starts a job it preempted once again when it completes (Requeue=0 would end it
    # PREEMPTED, no afterok's): that start ends at once, writing no event.
    restarts = 2 if slurmversion.requeues_preempted(slurmversion.parse(version)) else 1
    assert (final["state"], final["outcome"], final["restarts"], len(started)) == \
        ("COMPLETED", "completed", restarts, 2), f"{version}: {final}\n{_events_text(tmp_path, name)}"
    [by] = named(tmp_path, name, "requeued_by_slurm")
    assert by["by"] == "preemption", f"{version}: {_events_text(tmp_path, name)}"
    kinds = [o.kind for o in classify.ends(run_dir(tmp_path, name))]
    assert kinds == [classify.PREEMPTED, classify.COMPLETED], (version, kinds)


def test_requeue_limit_counts_stops(tmp_path, version):
    name = submit(tmp_path, *USER, "--partition", "low", "--max-requeues", "1", "--name", "limit",
                  *counter(10_000, 0.25, 5))
    for start in (1, 2):
        preempt_after_a_checkpoint(tmp_path, name, start)
    final = wait_final(tmp_path, [name], timeout=180)[name]
    # From 24.05 Slurm ends a job it signalled for preemption and did not requeue as PREEMPTED,
    # whatever its script's exit status (3 here): the outcome is ours to say.
    ended = ("PREEMPTED", 0) if slurmversion.requeues_preempted(slurmversion.parse(version)) else ("FAILED", 3)
    if final["source"] == "events.jsonl" and "SIGNALING" in (final["note"] or ""):
        ended = ("FAILED", 3)  # Slurm kept the job SIGNALING after its end: the events' word (track.py)
    assert (final["state"], final["exit_code"]) == ended, (version, final)
    assert final["outcome"] == "requeue limit" and "max_requeues=1" in final["outcome_detail"], (version, final)
    assert len(named(tmp_path, name, "started")) == 2, version


def test_time_limit_stops_requeues_and_resumes(tmp_path, version):
    # Slurm sends the warning on its 30-second tick once the time left is at most the
    # warning's plus 30 s: 60 s before the 2-minute limit, so 30 to 60 s after the start,
    # before 300 steps of 0.25 s are done, and after the program's first save even on a busy
    # machine. (90 s before it came on the first tick, 2 s after the start in one CI run,
    # and with a 1-minute limit once: stopped with nothing saved, rightly not requeued.)
    name = submit(tmp_path, *USER, "--time", "2", "--set", "resilience.signal_seconds=60", "--name", "timelimit",
                  *counter(300, 0.25, 10))
    wait_for_file(tmp_path, name, "the time-limit stop and requeue", lambda: named(tmp_path, name, "requeue"))
    job = json.loads((run_dir(tmp_path, name) / "manifest.json").read_text())["job_ids"][-1]
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=10"], check=True, capture_output=True, timeout=60)
    final = wait_final(tmp_path, [name], timeout=240)[name]
    assert (final["state"], final["outcome"]) == ("COMPLETED", "completed"), (version, final)
    assert [e["signal"] for e in named(tmp_path, name, "signal")][:1] == ["USR2"], version
    assert named(tmp_path, name, "resumed") and named(tmp_path, name, "finished")[0]["step"] == 300, version
    kinds = [o.kind for o in classify.ends(run_dir(tmp_path, name))]
    assert (kinds[0], kinds[-1]) == (classify.TIME_LIMIT, classify.COMPLETED), (version, kinds)


def _corpus(folder: Path) -> None:
    folder.mkdir()
    for i in range(4):
        lines = [json.dumps({"text": f"document {i}.{j}: " + "the quick brown fox " * 40}) for j in range(50)]
        (folder / f"{i}.jsonl").write_text("\n".join(lines) + "\n")


def test_tokenize_array_of_two_tasks_completes(tmp_path, version):
    _corpus(tmp_path / "corpus")
    proc = cli(tmp_path, "tokenize", "corpus", "--tokenizer", "bytes", "--out", "tok", "--shard-mb", "0.005",
               "-j", "1", "--profile", "local", "--nodes", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = Path(next(line.split(": ", 1)[1] for line in proc.stdout.splitlines()
                     if line.startswith("run directory: "))).name
    final = wait_final(tmp_path, [name])[name]
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), (version, final)
    assert [(t["task"], t["state"]) for t in final["tasks"]] == [(0, "COMPLETED"), (1, "COMPLETED")], version
    assert (tmp_path / "tok" / "index.json").exists() or list((tmp_path / "tok").glob("*.json")), version


def test_doctor_slurm_checks_pass(tmp_path, version):
    """The checks that need no torch: each node ran the job's setup, and Slurm's facts."""
    proc = cli(tmp_path, "doctor", "--profile", "local", "-N", "2", "--checks", "setup,slurm",
               "--seconds", "1", "--set", "launch.launcher=srun", "--set", "launch.procs_per_node=1", timeout=300)
    assert proc.returncode == 0, (version, proc.stdout[-3000:], proc.stderr[-2000:])
    [report] = (tmp_path / "runs").glob("doctor-*/doctor.json")
    doc = json.loads(report.read_text())
    assert doc.get("slurm_version") == version, (version, doc.get("slurm_version"))
    [row] = [r for r in doc["rows"] if r["figure"].startswith("Slurm ")]
    assert (row["figure"], row["verdict"]) == (f"Slurm {version}", "pass"), row


def test_an_administrators_requeue_is_named_as_such_and_the_run_resumes(tmp_path, version):
    # 24 s of counting: room for the requeue to land mid-run on a busy machine (with 10 s the
    # program had once finished before it).
    name = submit(tmp_path, *USER, "--name", "adminrequeue", *counter(120, 0.2, 5))
    wait_for_file(tmp_path, name, "a checkpoint", lambda: named(tmp_path, name, "checkpoint_saved"))
    job = json.loads((run_dir(tmp_path, name) / "manifest.json").read_text())["job_ids"][-1]
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, timeout=60)
    final = wait_final(tmp_path, [name], timeout=120)[name]
    assert (final["state"], final["outcome"], final["restarts"]) == ("COMPLETED", "completed", 1), (version, final)
    [by] = named(tmp_path, name, "requeued_by_slurm")
    assert by["by"] == "scontrol requeue" and not named(tmp_path, name, "requeue"), (version, by)
    kinds = [o.kind for o in classify.ends(run_dir(tmp_path, name))]
    assert kinds == [classify.REQUEUED, classify.COMPLETED], (version, kinds)
    status = cli(tmp_path, "status", name).stdout
    assert "requeued from outside the job (`scontrol requeue` by an administrator" in status, (version, status)
