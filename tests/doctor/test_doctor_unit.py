"""doctor without a cluster: check names, the verdicts that compare nodes, the table and
JSON, the bad-node ledger and how submit/resubmit exclude its nodes (a fake sbatch)."""

import json
import os
import subprocess
import sys

import pytest
import waiting
from stand_ins import FAKE_SRUN_STOP
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain import ledger
from slurmtrain.arrivals import SetupFailure
from slurmtrain.doctor import checks, report
from slurmtrain.doctor.report import FAIL, PASS, SKIP, WARN, Expect
from slurmtrain.errors import UsageError


def node_result(node, torch="2.5.0", gflops=100.0, busbw=1.0, offset=0.0, wrote=True, missing=()):
    return {"node": node, "results": {
        "versions": {"ok": True, "figure": f"python 3.11 torch {torch}", "data": {"python": "3.11", "torch": torch}},
        "gpus": {"ok": True, "value": 0, "figure": "0"},
        "rundir": {"ok": wrote, "figure": "/r", "data": {"wrote": wrote, "missing": list(missing)}},
        "matmul": {"ok": True, "value": gflops, "figure": f"{gflops} GFLOP/s"},
        "allreduce": {"ok": True, "value": busbw, "figure": f"{busbw} GB/s", "data": {"world": 3}},
        "clock": {"ok": True, "value": offset, "figure": f"{offset} s"}}}


def verdicts(rows):
    return {(r.node, r.check): r.verdict for r in rows}


NODES = ["n1", "n2", "n3"]


def test_unknown_check_is_named_with_the_known_ones():
    with pytest.raises(UsageError, match=r"unknown check 'allreduc' \(did you mean \"allreduce\"\?\); known checks: setup"):
        checks.parse("versions,allreduc")
    assert checks.parse("clock,versions") == ("versions", "clock")  # canonical order
    assert checks.parse(None) == checks.DEFAULT


def test_healthy_nodes_pass_every_check():
    rows = report.rows(NODES, {n: node_result(n) for n in NODES}, checks.DEFAULT, Expect())
    assert report.failures(rows) == []
    assert {r.verdict for r in rows} == {PASS}
    assert verdicts(rows)[("n1", "gpus")] == PASS and "no GPUs in profile" in rows[[
        (r.node, r.check) for r in rows].index(("n1", "gpus"))].detail
    assert report.summary(rows) == "doctor: every check passed"


def test_the_odd_node_is_named_for_each_check():
    results = {"n1": node_result("n1"), "n2": node_result("n2", torch="2.4.0", gflops=50, offset=9.0),
               "n3": node_result("n3", gflops=95)}
    rows = report.rows(NODES, results, checks.DEFAULT, Expect(gpus_per_node=8, expected_busbw_gbps=10.0))
    v = verdicts(rows)
    assert v[("n2", "versions")] == FAIL and v[("n1", "versions")] == PASS
    assert v[("n2", "matmul")] == WARN and v[("n3", "matmul")] == PASS  # 95 of median 95: not slow
    assert v[("n2", "clock")] == FAIL
    assert all(v[(n, "gpus")] == FAIL for n in NODES)          # 0 GPUs, profile says 8
    assert all(v[(n, "allreduce")] == FAIL for n in NODES)     # 1 GB/s < 90% of 10
    assert report.summary(rows) == ("doctor: failing: n2: versions, gpus, allreduce, clock; "
                                    "n1: gpus, allreduce; n3: gpus, allreduce")


def test_setup_failure_blames_the_node_that_did_not_start_only():
    results = {"n1": node_result("n1")}
    rows = report.rows(NODES, results, checks.DEFAULT, Expect(), arrived={"n1", "n3"})
    v = verdicts(rows)
    assert v[("n2", "setup")] == FAIL and v[("n3", "setup")] == PASS
    assert v[("n3", "checks")] == SKIP   # taken down by n2's failure, not blamed
    assert [(r.node, r.check) for r in report.failures(rows)] == [("n2", "setup")]
    # every node started, one wrote nothing: that node fails
    rows = report.rows(NODES, results, checks.DEFAULT, Expect(), arrived=set(NODES))
    assert {(r.node, r.check) for r in report.failures(rows)} == {("n2", "checks"), ("n3", "checks")}


def test_a_node_taken_down_by_another_nodes_failed_setup_is_not_blamed():
    """srun ends every task once one fails: a node still in its setup lines then never
    arrives, and that is the failed node's doing."""
    failed = {"n2": SetupFailure("n2", 1, 'test "$SLURMD_NODENAME" != n2')}
    rows = report.rows(NODES, {}, checks.DEFAULT, Expect(), arrived={"n3"}, setup_failed=failed)
    v = verdicts(rows)
    assert (v[("n1", "setup")], v[("n2", "setup")], v[("n3", "setup")]) == (SKIP, FAIL, PASS)
    assert [(r.node, r.check) for r in report.failures(rows)] == [("n2", "setup")]


def test_rundir_blames_the_reader_not_a_writer_that_failed():
    results = {"n1": node_result("n1", missing=["n3"]), "n2": node_result("n2", missing=["n1"]),
               "n3": node_result("n3", wrote=False, missing=["n3"])}
    results["n3"]["results"]["rundir"]["detail"] = "cannot write"
    v = verdicts(report.rows(NODES, results, ("rundir",), Expect()))
    assert v == {("n1", "rundir"): PASS, ("n2", "rundir"): FAIL, ("n3", "rundir"): FAIL}


def test_table_and_json_carry_the_same_rows(tmp_path):
    rows = report.rows(["n1", "n2"], {"n1": node_result("n1")}, ("setup", "versions"), Expect(), arrived={"n1"})
    text = report.table(rows)
    assert text.splitlines()[0].split() == ["NODE", "CHECK", "VERDICT", "FIGURE", "DETAIL"]
    assert any(line.split()[:3] == ["n2", "setup", "FAIL"] for line in text.splitlines())
    data = json.loads(report.to_json(rows, job_id="7"))
    assert data["passed"] is False and data["failing"] == [{"node": "n2", "check": "setup"}]
    assert len(data["rows"]) == len(rows) and data["job_id"] == "7"


def test_ledger_expiry_forget_and_torn_lines(tmp_path):
    ledger.add(tmp_path, "n1", "old", now=1000.0)
    ledger.add(tmp_path, "n2", "doctor: rundir", run="r1", source="doctor", now=10_000.0)
    ledger.add(tmp_path, "n3", "watchdog", now=10_500.0)
    with open(ledger.path(tmp_path), "a") as f:
        f.write('{"time": 1, "node"\n')  # a torn write is skipped
    assert [e.node for e in ledger.read(tmp_path)] == ["n1", "n2", "n3"]
    assert ledger.excluded(tmp_path, hours=1, now=11_000.0) == ["n2", "n3"]   # n1 is older than 1 h
    assert ledger.excluded(tmp_path, hours=0, now=11_000.0) == []             # 0: never excluded
    assert ledger.forget(tmp_path, ["n2"]) == 1
    assert [e.node for e in ledger.read(tmp_path)] == ["n1", "n3"]
    assert ledger.forget(tmp_path, None) == 2 and ledger.read(tmp_path) == []


def test_a_straggler_is_recorded_but_not_excluded(tmp_path):
    """A slow node still works, and a shared machine can look slow for a while: named, kept."""
    ledger.add(tmp_path, "n1", "node failure", source="node_failure", now=10_000.0)
    ledger.add(tmp_path, "n1", "computed 80% slower", source="straggler", now=10_100.0)  # newer: must not hide it
    ledger.add(tmp_path, "n2", "computed 80% slower", source="straggler", now=10_100.0)
    assert [e.node for e in ledger.read(tmp_path)] == ["n1", "n1", "n2"]
    assert ledger.excluded(tmp_path, hours=1, now=10_200.0) == ["n1"]


FAKE_SBATCH = '#!/bin/bash\necho "$@" >> "$(dirname "$0")/sbatch.calls"\necho "Submitted batch job 4242"\n'


@pytest.fixture
def fake_sbatch(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", "#!/bin/sh\nexit 0\n"),
                       ("scontrol", "#!/bin/sh\nexit 0\n"), ("sacct", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("")  # the program the commands name: submit refuses a missing one
    return bin_dir


def test_submit_excludes_ledger_nodes_and_nodes_forget_clears(fake_sbatch, tmp_path):
    runs = tmp_path / "runs"
    ledger.add(runs, "stnode2", "start-up watchdog: did not join", source="watchdog")
    r = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "x", "--", "python", "x.py"])
    assert r.exit_code == 0, r.output
    run = next(p for p in runs.iterdir() if p.is_dir())
    assert "#SBATCH --exclude=stnode2\n" in (run / "job.sbatch").read_text()
    assert "excluding node(s) stnode2: the bad-node ledger" in r.output
    listed = CliRunner().invoke(main, ["nodes", "--runs-dir", str(runs)])
    assert listed.output.startswith("stnode2\t") and "watchdog" in listed.output
    r = CliRunner().invoke(main, ["nodes", "--runs-dir", str(runs), "forget", "stnode2"])
    assert r.exit_code == 0 and "forgot 1 entry" in r.output
    assert "no bad nodes" in CliRunner().invoke(main, ["nodes", "--runs-dir", str(runs)]).output
    r = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "y", "--", "python", "x.py"])
    assert "--exclude" not in next(runs.glob("y-*/job.sbatch")).read_text()


def test_the_sites_ledger_excludes_its_nodes_and_is_never_written(fake_sbatch, tmp_path, monkeypatch):
    """A site's ledger ($SLURMTRAIN_SITE_LEDGER, read-only for users) excludes as the user's
    does; `nodes` lists it marked "site"; `nodes forget` leaves it whole and says so."""
    site = tmp_path / "site" / "bad-nodes.jsonl"
    ledger.add(site.parent, "stnode1", "site health check: ECC errors", source="site")
    site.chmod(0o444)
    before = site.read_text()
    monkeypatch.setenv(ledger.SITE_VAR, str(site))
    runs = tmp_path / "runs"
    ledger.add(runs, "stnode2", "watchdog", source="watchdog")
    r = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "x", "--", "python", "x.py"])
    assert r.exit_code == 0, r.output
    assert "#SBATCH --exclude=stnode1,stnode2\n" in next(runs.glob("x-*/job.sbatch")).read_text()
    listed = CliRunner().invoke(main, ["nodes", "--runs-dir", str(runs)]).output.splitlines()
    assert [line.split("\t")[0] for line in listed] == ["stnode2", "stnode1"] and listed[1].endswith("\tsite"), listed
    r = CliRunner().invoke(main, ["nodes", "--runs-dir", str(runs), "forget", "--all"])
    assert r.exit_code == 0 and "forgot 1 entry" in r.output, r.output
    assert f"still in the site's ledger {site}" in r.output and r.output.rstrip().endswith("stnode1"), r.output
    assert site.read_text() == before and ledger.excluded(runs, hours=24) == ["stnode1"]
    monkeypatch.setenv(ledger.SITE_VAR, str(tmp_path / "missing.jsonl"))  # a site file that is not there: nothing
    assert ledger.excluded(runs, hours=24) == []


def test_resubmit_passes_exclude_to_sbatch(fake_sbatch, tmp_path, monkeypatch):
    from slurmtrain.runs import resubmit, rundir, submit
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec
    runs = tmp_path / "runs"
    run = submit.prepare(load_profile("local"), JobSpec(command=("true",), job_name="z"), runs)
    ledger.add(runs, "stnode1", "doctor: matmul", source="doctor")
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    resubmit.resubmit(rundir.RunDir(run.path))
    first = rundir.RunDir(run.path).manifest()["submit_cwd"]  # where the job runs again: see below
    assert (fake_sbatch / "sbatch.calls").read_text().split()[:3] == ["--exclude=stnode1", f"--chdir={first}",
                                                                     str(run.script)]


def test_a_resubmitted_job_runs_where_the_run_was_first_submitted_from(fake_sbatch, tmp_path, monkeypatch):
    """Its command's relative paths are from there; a resubmission from elsewhere (a detached
    watch runs in the run directory) would break them. Gone: refused, saying so."""
    import pytest
    from slurmtrain.errors import UsageError
    from slurmtrain.runs import resubmit, rundir, submit
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    run = submit.prepare(load_profile("local"), JobSpec(command=("true",), job_name="z"), tmp_path / "runs", cwd=project)
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    monkeypatch.chdir(elsewhere)
    resubmit.resubmit(rundir.RunDir(run.path))
    assert f"--chdir={project}" in (fake_sbatch / "sbatch.calls").read_text().split()
    project.rmdir()
    with pytest.raises(UsageError, match=f"was submitted from {project}, which is gone: its job runs there"):
        resubmit.resubmit(rundir.RunDir(run.path))


def test_a_resubmission_from_a_shell_with_another_environment_is_warned_of(fake_sbatch, tmp_path, monkeypatch):
    """sbatch gives the job the resubmitting shell's environment: a program that reads its
    settings from it (OUT=... STEPS=... slurmtrain submit ...) would run with others, and
    resume some other run's checkpoints. The manifest keeps a digest, never a value."""
    from slurmtrain.runs import resubmit, rundir, submit
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec
    monkeypatch.setenv("OUT", "/scratch/run-a")
    monkeypatch.setenv("STEPS", "6000")
    monkeypatch.setenv("API_TOKEN", "sk-SENTINEL-do-not-keep")
    run = submit.prepare(load_profile("local"), JobSpec(command=("true",), job_name="z"), tmp_path / "runs")
    assert "sk-SENTINEL" not in (run.path / "manifest.json").read_text()
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    said: list[str] = []
    resubmit.resubmit(rundir.RunDir(run.path), say=said.append)
    assert said == []  # the same shell: nothing to say
    for name in ("HOME", "USER", "LOGNAME"):  # a teammate's resubmit: their own, by nature
        monkeypatch.setenv(name, "/home/bob" if name == "HOME" else "bob")
    resubmit.resubmit(rundir.RunDir(run.path), say=said.append)
    assert said == []
    monkeypatch.delenv("OUT")
    monkeypatch.setenv("STEPS", "10")
    monkeypatch.setenv("PWD", "/elsewhere")  # differs between any two shells: not counted
    monkeypatch.setenv("PYENV_DIR", "/elsewhere")  # pyenv's: the directory each call runs in
    monkeypatch.setenv("NEW_ONE", "1")
    resubmit.resubmit(rundir.RunDir(run.path), say=said.append)
    assert len(said) == 1 and "has this shell's environment, not the one run" in said[0], said
    assert "(unset here: OUT; changed: STEPS; new here: NEW_ONE)" in said[0], said
    # the command refuses a variable unset here before anything is queued; --this-environment goes on
    from click.testing import CliRunner
    from slurmtrain.cli import main
    log = fake_sbatch / "sbatch.calls"
    calls = log.read_text().count("\n") if log.exists() else 0
    refused = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(tmp_path / "runs"), run.name])
    assert refused.exit_code == 2 and (f"run {run.name} was submitted with OUT set, which this shell does not set"
                                       in refused.output), refused.output
    assert (log.read_text().count("\n") if log.exists() else 0) == calls  # nothing queued
    went = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(tmp_path / "runs"), "--this-environment", run.name])
    assert went.exit_code == 0 and "resubmitted run" in went.output, went.output
    # a run whose job still runs is refused for that first: the environment is no matter then
    from slurmtrain.runs.resubmit import JobEnd
    monkeypatch.setattr(resubmit, "job_end", lambda run: JobEnd("9", "RUNNING", None, True))
    busy = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(tmp_path / "runs"), run.name])
    assert busy.exit_code == 2 and "is still RUNNING" in busy.output and "OUT" not in busy.output, busy.output


def test_resubmit_keeps_the_nodes_the_run_already_excluded(fake_sbatch, tmp_path, monkeypatch):
    """sbatch's --exclude replaces the script's: a resubmit adds the ledger's new nodes to
    the run's own exclusions (the manifest's), it does not drop them."""
    from slurmtrain.runs import resubmit, rundir, submit
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec
    runs = tmp_path / "runs"
    ledger.add(runs, "stnode9", "watchdog", source="watchdog")
    run = submit.prepare(load_profile("local"), JobSpec(command=("true",), job_name="z"), runs)
    assert rundir.RunDir(run.path).manifest()["exclude"] == ["stnode9"]
    ledger.forget(runs, None)
    ledger.add(runs, "stnode1", "doctor: matmul", source="doctor")
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    resubmit.resubmit(rundir.RunDir(run.path))
    assert (fake_sbatch / "sbatch.calls").read_text().split()[0] == "--exclude=stnode1,stnode9"
    assert submit.excluded_nodes(rundir.RunDir(run.path)) == "stnode1,stnode9"


def test_resubmit_time_changes_the_runs_time_limit_from_then_on(fake_sbatch, tmp_path, monkeypatch):
    """A long run's mind changed: `resubmit --time` gives sbatch the new limit (over the
    script's #SBATCH line) and keeps it for the resubmissions after; a limit the stop signal
    would come at the start of, or one Slurm cannot read, is refused with nothing queued."""
    from slurmtrain.runs import resubmit
    runs = tmp_path / "runs"
    r = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "long", "--time", "0:30:00", "--",
                                  "python", "x.py"])
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(resubmit, "job_end", lambda run: None)
    calls = fake_sbatch / "sbatch.calls"
    sent = lambda: calls.read_text().splitlines()  # noqa: E731
    before = len(sent())
    for bad, said in (("1", "the job would be told to stop as it starts"), ("1h", "--time 1h")):
        refused = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(runs), "--time", bad, "long"])
        assert refused.exit_code == 2 and said in refused.output and "Traceback" not in refused.output, refused.output
    assert len(sent()) == before
    went = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(runs), "--time", "4:00:00", "long"])
    assert went.exit_code == 0 and went.output.rstrip().endswith(", time limit 4:00:00"), went.output
    assert "--time=4:00:00" in sent()[-1].split()
    again = CliRunner().invoke(main, ["resubmit", "--runs-dir", str(runs), "long"])
    assert again.exit_code == 0 and "--time=4:00:00" in sent()[-1].split(), (again.output, sent())


def test_a_refusal_after_exclusion_points_at_the_ledger(fake_sbatch, tmp_path):
    (fake_sbatch / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: Batch job submission failed: "
                                        "Requested node configuration is not available' >&2\nexit 1\n")
    ledger.add(tmp_path / "runs", "stnode2", "watchdog")
    r = CliRunner().invoke(main, ["submit", "--runs-dir", str(tmp_path / "runs"), "--", "python", "x.py"])
    assert r.exit_code == 1
    assert "the bad-node ledger excluded stnode2: too few nodes left?" in r.output


def test_bad_input_is_one_line_exit_2(fake_sbatch):
    r = CliRunner().invoke(main, ["doctor", "--checks", "versions,bogus"])
    assert r.exit_code == 2 and "unknown check 'bogus'" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["doctor", "-N", "1", "--checks", "allreduce"])
    assert r.exit_code == 2 and "--checks allreduce: needs at least 2 nodes, and the job has 1" in r.output
    r = CliRunner().invoke(main, ["doctor", "--set", "fabric.expected_busbw_gbps=-1"])
    assert r.exit_code == 2 and "fabric.expected_busbw_gbps: expected a positive number" in r.output
    r = CliRunner().invoke(main, ["nodes", "forget"])
    assert r.exit_code == 2 and "give node names or --all" in r.output
    ledger.add("runs", "stnode2", "watchdog", source="watchdog")
    r = CliRunner().invoke(main, ["nodes", "forget", "stnode9"])  # a typo forgets nothing: said, not "forgot 0"
    assert r.exit_code == 2 and "stnode9 not in the bad-node ledger under runs (its nodes: stnode2)" in r.output, \
        r.output


def test_doctor_cli_path_imports_no_torch():
    code = ("import sys; from slurmtrain.cli import main\nfrom click.testing import CliRunner\n"
            "CliRunner().invoke(main, ['doctor', '--help']); CliRunner().invoke(main, ['nodes'])\n"
            "import slurmtrain.doctor.run, slurmtrain.doctor.report, slurmtrain.ledger\n"
            "print(' '.join(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the doctor's CLI path imported: {out}"


FAKE_SRUN = """#!/bin/bash
# Runs the step's `bash -c CMD NAME` once per fake node, as srun would on each.
while [ "$1" != bash ]; do shift; done
rc=0
for node in $FAKE_NODES; do SLURMD_NODENAME=$node bash "$2" "$3" "$4" || rc=$?; done
exit $rc
"""
FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_LOG"
case "$*" in
  "show hostnames $SLURM_JOB_NODELIST") for n in $FAKE_NODES; do echo $n; done ;;
  "show hostnames"*) echo "$3" | tr , '\n' ;;
  *"show job"*) echo "JobId=77 Restarts=0 ExcNodeList=(null)" ;;
esac
"""


@pytest.mark.slow
def test_gate_requeues_without_the_failing_node(tmp_path):
    """The rendered gate (the job script and its supervisor) with fake srun/scontrol: n2's setup line
    fails, so n2 goes to the ledger and the job holds, excludes n2 and releases itself."""
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL), ("squeue", "#!/bin/sh\necho N/A\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    loaded = load_profile("local", ["resilience.preflight=true",
                                    """launch.setup=['[ "$SLURMD_NODENAME" != n2 ] || exit 3']"""])
    run_dir = tmp_path / "runs" / "r1"
    script = render(loaded, JobSpec(command=("python3", "never-started.py"), run_dir=str(run_dir)))
    (tmp_path / "job.sbatch").write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NODES": "n1 n2",
           "FAKE_LOG": str(tmp_path / "scontrol.log"), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NAME": "r1"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "preflight: node(s) n2 failed the checks" in proc.stderr
    gate_dir = run_dir / ".preflight-77-0"
    assert sorted(p.name for p in gate_dir.iterdir()) == ["n1.ok"]
    assert "torch" in (gate_dir / "n1.ok").read_text()
    calls = (tmp_path / "scontrol.log").read_text().splitlines()
    assert [c for c in calls if "show " not in c] == [
        "requeuehold 77", "update jobid=77 ExcNodeList=n2", "release 77"]
    assert [(e.node, e.source, e.job_id) for e in ledger.read(run_dir.parent)] == [("n2", "gate", "77")]
    from slurmtrain import events
    names = [e["event"] for e in events.read(run_dir)]
    assert "preflight_failed" in names and "preflight_passed" not in names and "finished" not in names


def _ring(bw: dict[tuple[str, str], float], busbw: float = 1.0) -> list[report.Row]:
    """The report of a ring whose pairs measured ``bw`` (each pair recorded by both its nodes)."""
    nodes = sorted({n for pair in bw for n in pair})
    results = {n: node_result(n, busbw=busbw) for n in nodes}
    for n in nodes:
        results[n]["results"]["allreduce"]["data"]["pairs_busbw_gbps"] = {
            (b if a == n else a): v for (a, b), v in bw.items() if n in (a, b)}
    return report.rows(nodes, results, ("allreduce",), Expect())


def test_pairwise_allreduce_names_the_node_on_the_slow_link():
    # ring n1-n2-n3-n4-n1; n3's links are slow
    rows = _ring({("n1", "n2"): 1.0, ("n2", "n3"): 0.3, ("n3", "n4"): 0.3, ("n4", "n1"): 1.1})
    assert {n: v for (n, _), v in verdicts(rows).items()} == {"n1": PASS, "n2": PASS, "n3": WARN, "n4": PASS}
    assert "slow link: pairs with n2 0.3, with n4 0.3 GB/s" in next(r.detail for r in rows if r.node == "n3")


def test_on_three_nodes_the_slow_node_is_named_though_most_pairs_are_its():
    """Measured on the networked sandbox, stnode2 at 50 Mbit/s: 4 of the 6 pair figures are
    stnode2's, so a median over pairs is slow itself; each other node has one fast pair."""
    rows = _ring({("n1", "n2"): 0.0052, ("n2", "n3"): 0.0046, ("n3", "n1"): 0.555})
    assert {n: v for (n, _), v in verdicts(rows).items()} == {"n1": PASS, "n2": WARN, "n3": PASS}
    assert "median node's best pair 0.555" in next(r.detail for r in rows if r.node == "n2")


def test_two_slow_neighbours_are_both_named_and_an_evenly_slow_ring_is_not():
    rows = _ring({("n1", "n2"): 0.1, ("n2", "n3"): 0.1, ("n3", "n4"): 1.0, ("n4", "n1"): 0.1})
    assert {n: v for (n, _), v in verdicts(rows).items()} == {"n1": WARN, "n2": WARN, "n3": PASS, "n4": PASS}
    even = _ring({("n1", "n2"): 0.1, ("n2", "n3"): 0.1, ("n3", "n1"): 0.1})
    assert set(verdicts(even).values()) == {PASS}


def test_the_message_shrinks_to_what_a_slow_link_carries_in_time():
    """The probe's 64 KiB all-reduce sizes the real one: on loopback (0.1 ms) the full
    4 MiB; at 1 Mbit/s (0.7 s) 64 KiB, where 4 MiB took half a minute a collective and the
    warm-up outlasted the group's 60 s timeout (walk-through G: doctor never finished)."""
    from slurmtrain.doctor.node import PROBE_BYTES, message_bytes
    assert message_bytes(0.0001, 2, 4) == 4 * 2 ** 20
    assert message_bytes(0.01, 2, 4) == 4 * 2 ** 20        # a loaded loopback: 4 MiB in ~0.6 s at most
    assert message_bytes(0.7, 1, 4) == PROBE_BYTES
    assert message_bytes(0.05, 2, 4) == 2 ** 20            # 64 KiB * 2 / 2 / 0.05 = 1.25 MiB, down to a power of 2
    assert message_bytes(0.0, 2, 4) == 4 * 2 ** 20          # no probe figure: the size asked for
    assert message_bytes(0.5, 1, 0.01) == 10484             # never more than asked


def test_a_network_too_slow_for_training_is_warned_of_without_a_profile_figure():
    """Two nodes (no ring pairs to compare) over a 1 Mbit/s link, no expected_busbw_gbps:
    the figure alone says it. The loopback sandbox's figures stay far above the floor."""
    results = {n: node_result(n, busbw=0.000125) for n in ("n1", "n2")}
    rows = report.rows(["n1", "n2"], results, ("allreduce",), Expect())
    assert {r.verdict for r in rows} == {WARN}
    assert "a slow network: 1.0 Mbit/s busbw" in rows[0].detail
    fine = report.rows(["n1", "n2"], {n: node_result(n, busbw=0.3) for n in ("n1", "n2")}, ("allreduce",), Expect())
    assert {r.verdict for r in fine} == {PASS}
    # Three nodes, one on a 1 Mbit/s link: the ring's figure is the slow node's, and the
    # others' fast pair clears them; an evenly slow ring is a slow network for every node.
    one_slow = _ring({("n1", "n2"): 0.0001, ("n2", "n3"): 0.0001, ("n3", "n1"): 0.5}, busbw=0.0001)
    assert {n: v for (n, _), v in verdicts(one_slow).items()} == {"n1": PASS, "n2": WARN, "n3": PASS}
    even = _ring({("n1", "n2"): 0.0001, ("n2", "n3"): 0.0001, ("n3", "n1"): 0.0001}, busbw=0.0001)
    assert {v for v in verdicts(even).values()} == {WARN}


@pytest.mark.slow
def test_node_program_on_three_local_processes(tmp_path):
    """The program the doctor job runs on every node, as three "nodes" on this machine
    (gloo over loopback): every check answers, the ring pairs are measured, and the report
    over their files passes. Ports 29890-29891: the Slurm doctor tests (29860-29879) run on
    this host at the same time, in the other lane; a shared port failed CI."""
    procs = []
    for rank in range(3):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": "29890", "SLURMD_NODENAME": f"n{rank}", "SLURMTRAIN_HEAD_NODE": "n0",
               "SLURMTRAIN_RUN_DIR": str(tmp_path), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        procs.append(subprocess.Popen([sys.executable, "-m", "slurmtrain.doctor.node", "--checks",
                                       ",".join(checks.NODE_CHECKS), "--seconds", "0.2", "--check-timeout", "120",
                                       "--rdzv-port", "29891"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = waiting.communicate(p, "the node program on three local processes")
        assert p.returncode == 0, out
    results = report.load_results(tmp_path / "doctor")
    assert sorted(results) == ["n0", "n1", "n2"]
    allreduce = results["n1"]["results"]["allreduce"]
    assert "data" in allreduce, allreduce  # an error names itself in "detail"
    pairs = allreduce["data"]["pairs_busbw_gbps"]
    assert sorted(pairs) == ["n0", "n2"] and all(bw > 0 for bw in pairs.values())
    assert results["n0"]["results"]["port"]["figure"] == "29891 free"
    assert "port" not in results["n1"]["results"]  # only the head node checks it
    rows = report.rows(["n0", "n1", "n2"], results, checks.DEFAULT, Expect())
    assert not [r for r in rows if r.verdict == FAIL], report.table(rows)


FAKE_SRUN_NODE_FAILURE = """#!/bin/bash
# The launch step: every node arrives, then Slurm requeues the job after a node failure
# (the script gets SIGTERM and its restart count has gone up) and the step ends.
for n in $FAKE_NODES; do touch "$SLURMTRAIN_ARRIVED/$n"; done
sleep 1
kill -TERM $PPID
sleep 1
exit 1
"""
FAKE_SCONTROL_REQUEUED = """#!/bin/bash
case "$*" in
  "show hostnames"*) for n in $FAKE_NODES; do echo $n; done ;;
  *"show job"*) echo "JobId=77 Restarts=1 ExcNodeList=(null)" ;;
esac
"""


@pytest.mark.slow
def test_node_failure_requeue_records_the_down_node(tmp_path):
    """The rendered script after Slurm requeued it for a node failure: the job's node that
    sinfo shows down goes to the ledger (source node_failure); the healthy one does not."""
    from slurmtrain import events
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN_NODE_FAILURE), ("scontrol", FAKE_SCONTROL_REQUEUED),
                       ("squeue", "#!/bin/sh\necho 2026-11-22T12:00:00\n"),
                       ("sinfo", '#!/bin/sh\necho "$*" > "$FAKE_LOG"; echo n2\n')):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    run_dir = tmp_path / "runs" / "r1"
    (tmp_path / "job.sbatch").write_text(render(load_profile("local"), JobSpec(command=("python3", "x.py"),
                                                                               run_dir=str(run_dir))))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NODES": "n1 n2",
           "FAKE_LOG": str(tmp_path / "sinfo.log"), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "Slurm has requeued the job" in proc.stderr, proc.stdout + proc.stderr
    assert "requeued_by_slurm" in [e["event"] for e in events.read(run_dir)]
    assert "-n n[1-2]" in (tmp_path / "sinfo.log").read_text()
    assert [(e.node, e.source, e.job_id) for e in ledger.read(run_dir.parent)] == [("n2", "node_failure", "77")]




@pytest.mark.slow
def test_stop_requeue_leaves_out_the_ledger_nodes(tmp_path):
    """After a stop, the script's own requeue adds the ledger's unexpired nodes to the job's
    ExcNodeList (hold, update, release); an expired entry is left out."""
    import time as _time
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = FAKE_SCONTROL.replace("Restarts=0 ExcNodeList=(null)", "Restarts=0 ExcNodeList=n9")
    for name, text in (("srun", FAKE_SRUN_STOP), ("scontrol", scontrol), ("squeue", "#!/bin/sh\necho N/A\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    runs = tmp_path / "runs"
    ledger.add(runs, "n2", "watchdog", source="watchdog")
    ledger.add(runs, "n5", "long ago", now=_time.time() - 2 * 3600)
    (tmp_path / "job.sbatch").write_text(render(load_profile("local", ["resilience.bad_node_hours=1",
                                                                       "resilience.requeue_when='always'",
                                                                       "resilience.stop_timeout=1"]),
                                                JobSpec(command=("python3", "x.py"), run_dir=str(runs / "r1"))))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_NODES": "n1 n2",
           "FAKE_LOG": str(tmp_path / "scontrol.log"), "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n[1-2]"}
    proc = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "requeueing without the bad-node ledger's node(s) n2" in proc.stderr, proc.stderr
    calls = [c for c in (tmp_path / "scontrol.log").read_text().splitlines() if "show " not in c]
    assert calls == ["requeuehold 77", "update jobid=77 ExcNodeList=n2,n9", "release 77"]


def test_submit_with_spares_says_how_to_cover_the_batch_host(fake_sbatch, tmp_path):
    runs = tmp_path / "runs"
    plain = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "a", "--", "python", "x.py"])
    assert plain.exit_code == 0 and "--detach" not in plain.output, plain.output
    spares = CliRunner().invoke(main, ["submit", "--runs-dir", str(runs), "--name", "b", "--set", "slurm.spare_nodes=1",
                                       "--", "python", "x.py"])
    assert spares.exit_code == 0, spares.output
    name = next(runs.glob("b-*")).name
    assert spares.output.rstrip().endswith(f"to requeue it if that one dies: slurmtrain resubmit --runs-dir {runs} "
                                           f"--watch --detach {name}"), spares.output


def test_a_check_failed_on_every_node_puts_no_node_in_the_ledger():
    """A typo in a module name fails setup on every node: the profile's doing, as the job's
    start-up reads it; one run of doctor took every node out of later jobs for 24 hours."""
    from slurmtrain.doctor.run import _nodes_to_blame
    from slurmtrain.doctor.report import FAIL, PASS, Row

    every = [Row("n1", "setup", "-", FAIL, "exit 127"), Row("n2", "setup", "-", FAIL, "exit 127"),
             Row("n1", "matmul", "1", PASS, ""), Row("n2", "matmul", "0.2", FAIL, "slow")]
    assert [(r.node, r.check) for r in _nodes_to_blame(every)] == [("n2", "matmul")]
    alone = [Row("n1", "setup", "-", FAIL, "exit 127")]  # one node checked: its own failure
    assert [(r.node, r.check) for r in _nodes_to_blame(alone)] == [("n1", "setup")]


def test_a_node_that_wrote_no_result_is_told_by_its_logs_error(tmp_path):
    """doctor in an image whose bind source is missing: "checks: no result" named nothing;
    the node's log held apptainer's FATAL line."""
    from slurmtrain.doctor.report import FAIL, PASS, Row
    from slurmtrain.doctor.run import _with_node_errors
    fatal = "FATAL:   container creation failed: mount /home/u/nodata->/data error: no such file or directory"
    (tmp_path / "7-n1.out").write_text(f"INFO:    starting\n{fatal}\nsrun: error: n1: task 0: Exited with exit code 255\n")
    rows = [Row("n1", "setup", "started", PASS), Row("n1", "checks", "no result", FAIL, "see its log"),
            Row("n2", "checks", "no result", FAIL, "see its log")]
    out = _with_node_errors(rows, tmp_path, "7")
    assert out[0] == rows[0] and out[2] == rows[2]  # n2 has no log: as it was
    assert out[1].detail == f"{fatal} (its log: {tmp_path}/7-n1.out)"


def test_doctor_notes_a_node_that_passed_but_the_ledger_keeps_out(tmp_path, capsys):
    """A hang blamed on n1 put it in the ledger; doctor finds nothing wrong with it: said,
    with how to clear it (it kept refusing every submit for a day)."""
    from slurmtrain.cli.doctor import _note_ledger
    from slurmtrain.doctor.report import FAIL, PASS, Row
    ledger.add(tmp_path, "n1", "its ranks hung in 2 launches of job 5", source="in_job")
    ledger.add(tmp_path, "n2", "doctor: gpus", source="doctor")
    rows = [Row("n1", "gpus", "8", PASS), Row("n2", "gpus", "7", FAIL), Row("n3", "gpus", "8", PASS)]
    _note_ledger(rows, str(tmp_path), hours=24)
    assert capsys.readouterr().out == ("note: n1 passed every check, but the bad-node ledger keeps it out of new jobs "
                                       "(`slurmtrain nodes` says why); `slurmtrain nodes forget n1` clears it\n")
    _note_ledger([Row("n3", "gpus", "8", PASS)], str(tmp_path), hours=24)
    assert capsys.readouterr().out == ""
