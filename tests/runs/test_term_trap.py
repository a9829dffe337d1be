"""The job script's TERM trap. Its look-up of why SIGTERM came (time limit, node failure,
cancel) runs in Slurm's KillWait before SIGKILL: a slow or hung controller must not eat
that window. And the TERM that ends the script's own requeue is a requeue, also the
requeue-with-hold that moves a job off bad nodes (requeue_excluding)."""

from __future__ import annotations

import os
import time

import pytest

from script_functions import run_bash
from stand_ins import FAKE_SRUN_STOP


@pytest.mark.slow  # two 5 s bounds run out
def test_term_cause_is_bounded_when_the_controller_hangs(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("scontrol", "squeue"):
        (fake / tool).write_text("#!/bin/sh\nexec sleep 300\n")
        os.chmod(fake / tool, 0o755)
    began = time.monotonic()
    proc = run_bash(["requeued_since_start", "term_cause"], 'JOB_END=2026-11-22T10:00:00; term_cause', tmp_path,
                    env={"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "7"})
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == "cancel"  # nothing learnt: not a time limit, not a requeue
    assert took < 20, f"term_cause took {took:.0f} s with a hung controller"


# `scontrol requeue` as Slurm does it on a loaded machine: the job is requeued (its restart
# count goes up) and the job's processes (the batch script, its subshells) get SIGTERM
# before scontrol has reported success; scontrol itself dies of the same TERM (exit 143,
# nothing printed).
FAKE_SCONTROL_REQUEUE_RACE = """#!/bin/bash
case "$1 $2" in
  "show hostnames") for n in $FAKE_NODES; do echo $n; done ;;
  "show job") echo "JobId=77 Restarts=$(cat "$FAKE_STATE" 2>/dev/null || echo 0) ExcNodeList=(null)" ;;
  "requeue 77") echo 1 > "$FAKE_STATE"; pkill -TERM -f "$FAKE_SCRIPT"; sleep 0.5; exit 143 ;;
esac
"""


@pytest.mark.slow  # the whole rendered script, with stand-ins
def test_the_scripts_own_requeue_ended_by_slurms_sigterm_is_a_requeue(tmp_path):
    """The script's own `scontrol requeue` ended by the SIGTERM Slurm sends when it requeues
    the job: the run was requeued, not failed, and no node failed (a loaded CI run said
    "node failure" and "requeue failed" for a preempted job)."""
    import subprocess

    from slurmtrain import events
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    from slurmtrain.runs import classify
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN_STOP), ("scontrol", FAKE_SCONTROL_REQUEUE_RACE),
                       ("squeue", "#!/bin/sh\necho N/A\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    run_dir = tmp_path / "runs" / "r1"
    profile = load_profile("local", ["resilience.requeue_when='always'", "resilience.stop_timeout=1"])
    (tmp_path / "job.sbatch").write_text(render(profile, JobSpec(command=("python3", "x.py"), run_dir=str(run_dir))))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NODES": "n1 n2",
           "FAKE_STATE": str(tmp_path / "restarts"), "FAKE_SCRIPT": str(tmp_path / "job.sbatch"),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert (tmp_path / "restarts").read_text().strip() == "1", proc.stderr  # the requeue was asked for
    names = [e["event"] for e in events.read(run_dir)]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "requeue" in names and "requeue_failed" not in names and "requeued_by_slurm" not in names, names
    (end,) = classify.ends(run_dir)
    assert end.kind == classify.TIME_LIMIT and end.detail.endswith("requeued"), end
    assert "failed" not in proc.stderr.splitlines()[-1], proc.stderr


def requeue_excluding(tmp_path, tools: dict[str, str], **fake_env: str):
    """``requeue_excluding stnode1`` of the rendered script, for job 77, with stand-ins
    ``tools`` (name: text) first on PATH; stdout is ``rc=N why=REQUEUE_WHY``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in tools.items():
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "77", "FAKE_LOG": str(tmp_path / "scontrol.log"),
           **fake_env}
    return run_bash(["event", "requeued_since_start", "retry", "requeue_went_through", "requeue_excluding"],
                    'requeue_excluding stnode1; rc=$?; echo "rc=$rc why=$REQUEUE_WHY"', tmp_path, env=env)


# `scontrol requeuehold` as a loaded sandbox did it to the preflight gate's requeue: the job
# is requeued and held (its restart count goes up), and scontrol dies of Slurm's SIGTERM for
# that requeue, printing nothing. update and release are recorded; with FAKE_KILL_RELEASE the
# first release dies of that SIGTERM instead (as another loaded run's did).
FAKE_SCONTROL_REQUEUEHOLD = """#!/bin/bash
case "$1 $2" in
  "release 77") echo "$*" >> "$FAKE_LOG"
                if [ -n "$FAKE_KILL_RELEASE" ] && ! [ -e "$FAKE_LOG.killed" ]; then touch "$FAKE_LOG.killed"; exit 143; fi ;;
  "show job") echo "JobId=77 Restarts=$(cat "$FAKE_STATE" 2>/dev/null || echo 0) ExcNodeList=(null)" ;;
  "requeuehold 77") [ -n "$FAKE_REFUSE" ] && { echo "$FAKE_REFUSE" >&2; exit 1; }
                    if [ -n "$FAKE_LAG" ]; then (sleep "$FAKE_LAG"; echo 1 > "$FAKE_STATE") &
                    else echo 1 > "$FAKE_STATE"; fi
                    exit 143 ;;
  *) echo "$*" >> "$FAKE_LOG" ;;
esac
"""


@pytest.mark.parametrize("refusal, lag, kill_release", [
    (None, None, False), (None, "2", False), (None, None, True),
    ("Requested operation is presently disabled", None, False)])
def test_requeue_excluding_releases_the_job_when_scontrol_dies_of_the_requeues_sigterm(
        tmp_path, refusal, lag, kill_release):
    """The hold went through although scontrol died: the job gets its ExcNodeList and is
    released, not left held for ever as 'the requeue failed' (a loaded CI run's gated job
    waited in JobHeldUser), also when the controller shows the new restart count 2 s later
    (another loaded run's), and when the SIGTERM kills the release instead (a third's: it
    is released again). A real refusal (the restart count unchanged) still fails."""
    chosen = {"FAKE_REFUSE": refusal, "FAKE_LAG": lag, "FAKE_KILL_RELEASE": "1" if kill_release else None}
    proc = requeue_excluding(tmp_path, {"scontrol": FAKE_SCONTROL_REQUEUEHOLD}, FAKE_STATE=str(tmp_path / "restarts"),
                             **{k: v for k, v in chosen.items() if v})
    out = proc.stdout.decode().strip()
    log = (tmp_path / "scontrol.log").read_text().splitlines() if (tmp_path / "scontrol.log").exists() else []
    if refusal:
        assert out == f"rc=1 why={refusal}", proc.stderr
        assert log == []
    else:
        assert out == "rc=0 why=", proc.stderr
        releases = ["release 77"] * (2 if kill_release else 1)
        assert log == ["update jobid=77 ExcNodeList=stnode1", *releases]


# Slurm's SIGTERM for the requeue reaches every process of the job, so it kills whichever
# child of the script runs at that moment. Each stand-in here counts the commands run after
# the hold; the FAKE_TERM_AT-th of them dies of SIGTERM (exit 143) instead of running.
TERM_LANDS_HERE = """
if [ -e "$FAKE_COUNT" ]; then
  c=$(( $(cat "$FAKE_COUNT") + 1 )); echo "$c" > "$FAKE_COUNT"
  [ "$c" = "$FAKE_TERM_AT" ] && kill -TERM $$
fi
"""
FAKE_SCONTROL_TERM_LANDS = "#!/bin/bash\n" + TERM_LANDS_HERE + """
case "$1 $2" in
  "show job") echo "JobId=77 Restarts=0 ExcNodeList=(null)" ;;
  "requeuehold 77") echo 0 > "$FAKE_COUNT" ;;
  *) echo "$*" >> "$FAKE_LOG" ;;
esac
"""


@pytest.mark.parametrize("term_at", [1, 2])
def test_requeue_excluding_survives_the_requeues_sigterm_on_any_of_its_commands(tmp_path, term_at):
    """Whichever command the SIGTERM kills after the hold (the first or the second: the
    update or the release), the job gets its ExcNodeList and is released. A CI run's gated job
    was released without it and started again on the node the gate had rejected: the
    retry loop's `seq` was killed, so the update was tried zero times."""
    tools = {tool: f"#!/bin/bash\n{TERM_LANDS_HERE}\nexec /usr/bin/{tool} \"$@\"\n" for tool in ("seq", "sleep")}
    proc = requeue_excluding(tmp_path, {"scontrol": FAKE_SCONTROL_TERM_LANDS, **tools},
                             FAKE_COUNT=str(tmp_path / "count"), FAKE_TERM_AT=str(term_at))
    assert proc.stdout.decode().strip() == "rc=0 why=", proc.stderr
    assert int((tmp_path / "count").read_text()) >= term_at  # the TERM did land
    log = (tmp_path / "scontrol.log").read_text().splitlines()
    assert log == ["update jobid=77 ExcNodeList=stnode1", "release 77"]


@pytest.mark.slow  # 20 tries a second apart
def test_requeue_excluding_warns_when_slurm_never_takes_the_exclusion(tmp_path):
    """An update Slurm refuses for all 20 tries still releases the job (held for ever is
    worse), and the batch log says the job may start on the excluded node again."""
    refusing = FAKE_SCONTROL_TERM_LANDS.replace(
        '  *) echo', '  "update jobid=77") echo "Job is no longer pending execution" >&2; exit 1 ;;\n  *) echo')
    proc = requeue_excluding(tmp_path, {"scontrol": refusing}, FAKE_COUNT=str(tmp_path / "count"), FAKE_TERM_AT="0")
    assert proc.stdout.decode().strip() == "rc=0 why=", proc.stderr
    assert (tmp_path / "scontrol.log").read_text().splitlines() == ["release 77"]
    assert proc.stderr.decode().strip() == ("slurmtrain: warning: Slurm refused ExcNodeList=stnode1 for 20 s; "
                                            "the job may start on stnode1 again")
