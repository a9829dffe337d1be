"""End to end on the sandbox: `slurmtrain submit` -> real Slurm -> `slurmtrain status`.

One batch of jobs is submitted at once (they share the sandbox's two nodes) and
followed with one `slurmtrain status` query per poll; the tests then read the
results. The accounting test comes last: it restarts the sandbox with slurmdbd.

Each job gets its own rendezvous port (--set launch.rdzv_port): the local profile's
fixed port would collide between jobs sharing a node, which every sandbox job does.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from e2e_util import (FINAL, PROGRAM, batch_log, cli, make_venv, ranks, script_decided, statuses, submit,
                      wait_final, wait_for_file, wait_until)

pytestmark = pytest.mark.slurm

LAUNCHERS = ("torchrun", "srun-loop", "deepspeed", "srun")
# Arguments a shell would act on: they must reach the program unchanged.
TRICKY = ["a b", "$(touch {marker})", "it's \"quoted\"", "`touch {marker}`; echo"]


def _tricky(marker) -> list[str]:
    return [a.format(marker=marker) for a in TRICKY]


@pytest.fixture(scope="module")
def batch(_sandbox_session, tmp_path_factory):
    """Submit every job of this module at once (without accounting) and follow them to the end."""
    from slurmtrain import sandbox

    if sandbox.status().settings.accounting:  # the states below are scontrol's: no accounting
        sandbox.down(progress=print)
        sandbox.up(accounting=False, progress=print)
    cwd = tmp_path_factory.mktemp("e2e")
    marker = cwd / "INJECTED"
    # Each launcher's world runs a virtualenv's interpreter that is not on the job's PATH
    # (the job gets the submitting PATH); the failing jobs below run `python` from the PATH.
    venv = cwd / "venv"
    venv_python = make_venv(venv)
    assert str(venv) not in os.environ["PATH"]
    names = {}
    for port, launcher in enumerate(LAUNCHERS, start=29710):
        names[launcher] = submit(cwd, "--profile", "local", "--launcher", launcher, "--name", f"ar-{launcher}",
                                 "--set", f"launch.rdzv_port={port}", "--", venv_python, str(PROGRAM),
                                 *_tricky(marker))
    for port, launcher in ((29720, "deepspeed"), (29721, "torchrun")):
        names[f"exit3-{launcher}"] = submit(cwd, "--launcher", launcher, "--name", f"exit3-{launcher}",
                                            "--set", f"launch.rdzv_port={port}", "--",
                                            "python", str(PROGRAM), "--exit-code", "3")
    # gen for the same inputs, right after the submit (the templates may be edited meanwhile)
    gen = cli(cwd, "gen", "--profile", "local", "--launcher", "torchrun", "--name", "ar-torchrun",
              "--set", "launch.rdzv_port=29710", "--", venv_python, str(PROGRAM), *_tricky(marker)).stdout
    names["cancel"] = submit(cwd, "--name", "to-cancel", "--set", "launch.rdzv_port=29722", "--", "sleep", "600")
    cancelled = []

    def cancel_when_running(got):
        # Once its script has started (not only RUNNING in Slurm's eyes): a cancel that came
        # before the script's stop handling was up left no decision to check (seen in a CI
        # run on a loaded machine, 44 s after the submission).
        st = got[names["cancel"]]
        if not cancelled and st["state"] == "RUNNING" and "started" in [e["event"] for e in st.get("events") or []]:
            proc = cli(cwd, "cancel", names["cancel"])
            assert proc.returncode == 0, proc.stdout + proc.stderr
            cancelled.append(proc.stdout)

    started = time.monotonic()
    final = wait_final(cwd, list(names.values()), on_poll=cancel_when_running)
    print(f"e2e batch: {len(names)} jobs final after {time.monotonic() - started:.0f} s")
    return {"cwd": cwd, "marker": marker, "venv": str(venv), "names": names, "final": final, "cancel_output": cancelled,
            "gen_torchrun": gen}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_nodes_one_process_group(batch, launcher):
    name = batch["names"][launcher]
    st = batch["final"][name]
    logs = cli(batch["cwd"], "logs", name).stdout
    assert (st["state"], st["exit_code"]) == ("COMPLETED", 0), logs[-4000:]
    got = ranks(batch["cwd"], name)
    assert sorted(r["rank"] for r in got) == [0, 1, 2, 3], got
    assert {r["world_size"] for r in got} == {4}
    assert {r["sum"] for r in got} == {10.0}  # 1 + 2 + 3 + 4: one all-reduce over every rank
    # node names as Slurm assigned them, two processes on each
    assert sorted(r["node"] for r in got) == ["stnode1", "stnode1", "stnode2", "stnode2"]
    assert sorted((r["node"], r["local_rank"]) for r in got) == [
        ("stnode1", 0), ("stnode1", 1), ("stnode2", 0), ("stnode2", 1)]
    assert st["nodes"] == 2 and st["nodelist"] == "stnode[1-2]" and st["source"] == "scontrol"
    assert [e["event"] for e in st["events"]][:2] == ["submitted", "started"]
    assert st["events"][-1]["event"] == "finished"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_arguments_arrive_literally(batch, launcher):
    got = ranks(batch["cwd"], batch["names"][launcher])
    assert got and all(r["args"] == _tricky(batch["marker"]) for r in got)
    assert not batch["marker"].exists()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_venv_python_not_on_path_runs_every_rank(batch, launcher):
    got = ranks(batch["cwd"], batch["names"][launcher])
    assert len(got) == 4 and {r["prefix"] for r in got} == {batch["venv"]}, got


def test_srun_launcher_runs_one_task_per_process_without_an_agent(batch):
    """The srun launcher: every process is a Slurm task (no agent), as submitit and Lightning expect."""
    script = (batch["cwd"] / "runs" / batch["names"]["srun"] / "job.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "torch.distributed.run" not in script


def test_batch_log_says_where_everything_is(batch):
    run = batch["cwd"] / "runs" / batch["names"]["torchrun"]
    (log,) = (run / "logs").glob("job-*.out")
    text = log.read_text()
    assert f"run directory {run}" in text and "each node's output in logs/" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("slurmtrain: job ") and "finished, exit status 0" in last, last


@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun"])
def test_exit_3_fails_and_says_3(batch, launcher):
    """Every rank exits 3. Slurm's exit code is the launcher's, not the program's:
    torchrun exits 1 whenever a worker fails; DeepSpeed's launcher exits with its worker's
    3. srun's own 143 (--kill-on-bad-exit ended the other node's launcher first) is not
    the job's: the supervisor takes the failed task's. status digs the program's own 3 out
    of the launcher's failure report."""
    name = batch["names"][f"exit3-{launcher}"]
    st = batch["final"][name]
    assert st["state"] == "FAILED"
    assert st["program_exit_code"] == 3
    assert st["exit_code"] == (1 if launcher == "torchrun" else 3)
    assert st["events"][-1]["event"] == "failed" and st["events"][-1]["exit_code"] == st["exit_code"]
    # failed before any checkpoint: the program's own error, not launched again in the job
    assert "relaunched" not in [e["event"] for e in st["events"]], st["events"]
    logs = cli(batch["cwd"], "logs", name)
    assert logs.returncode == 0 and "exiting with status 3 as asked" in logs.stdout
    text = cli(batch["cwd"], "status", name).stdout
    assert "FAILED" in text and "last lines of" in text
    # the program's 3 is shown: as the exit code, or beside the launcher's
    assert "exit code  3" in text or "program    exited 3" in text


def test_cancel_ends_cancelled_and_stays(batch):
    name = batch["names"]["cancel"]
    assert batch["cancel_output"], "the job never reached RUNNING"
    assert batch["final"][name]["state"] == "CANCELLED"
    # The script's stop handling decided not to requeue (its decision, not a pause, proves it).
    decided = wait_for_file(batch["cwd"], name, "the script's decision", lambda: script_decided(batch["cwd"], name))
    assert decided == "no requeue", batch_log(batch["cwd"], name)
    st = statuses(batch["cwd"], [name])[name]
    assert (st["state"], st["restarts"]) == ("CANCELLED", 0)
    assert "cancel_requested" in [e["event"] for e in st["events"]]
    assert st["outcome"] == "cancelled", st


def test_runs_table_lists_every_run(batch):
    proc = cli(batch["cwd"], "runs")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["RUN", "JOB", "ID", "STATE", "OUTCOME", "NODES", "ELAPSED", "GOODPUT", "SUBMITTED"]
    for name, st in batch["final"].items():
        row = next(line for line in lines if line.startswith(name + " "))
        assert st["state"] in row and st["job_id"] in row
        assert st["outcome"] in row or st["outcome"] == "running", (st, row)


def test_run_directory_contents(batch):
    name = batch["names"]["torchrun"]
    run = batch["cwd"] / "runs" / name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["state"] == "submitted" and manifest["job_ids"] == [batch["final"][name]["job_id"]]
    job_id = manifest["job_ids"][0]
    assert (run / "logs" / f"job-{job_id}.out").exists()
    assert list((run / "logs").glob(f"{job_id}-*.out")), "no per-node log"
    # The submitted script is gen's, with the run directory filled in.
    gen = batch["gen_torchrun"].splitlines()
    submitted = (run / "job.sbatch").read_text().splitlines()
    differing = [(a, b) for a, b in zip(gen, submitted) if a != b]
    assert len(gen) == len(submitted)
    assert all(str(run) in b for _, b in differing) and len(differing) == 2, differing


def test_same_states_with_accounting(batch, sandbox_accounting):
    """With slurmdbd, status answers from sacct; the states match the ones scontrol gave
    without accounting for the same kinds of jobs, and scontrol's for the same jobs.

    Exit codes are compared where they are deterministic: a failing two-node job's code
    is the launcher's and depends on which node srun kills first (1 or 143), and sacct
    prints a batch exit status of 143 as 15. The program's own 3 is compared instead."""
    cwd = batch["cwd"]
    names = {
        "ok": submit(cwd, "--name", "acct-ok", "--set", "launch.rdzv_port=29730", "--", "python", str(PROGRAM)),
        "fail": submit(cwd, "--launcher", "torchrun", "--name", "acct-fail", "--set", "launch.rdzv_port=29731",
                       "--", "python", str(PROGRAM), "--exit-code", "3"),
        "cancel": submit(cwd, "--name", "acct-cancel", "--set", "launch.rdzv_port=29732", "--", "sleep", "600"),
    }
    done = []

    def cancel_when_running(got):
        if not done and got[names["cancel"]]["state"] == "RUNNING":
            assert cli(cwd, "cancel", names["cancel"]).returncode == 0
            done.append(True)

    wait_final(cwd, list(names.values()), on_poll=cancel_when_running)
    # slurmdbd records the end a moment after the controller: wait until sacct has it.
    final = wait_until(cwd, list(names.values()), "sacct to record the ends",
                       lambda got: all(s["source"] == "sacct" and s["state"] in FINAL for s in got.values()))
    without = {"ok": batch["final"][batch["names"]["torchrun"]],
               "fail": batch["final"][batch["names"]["exit3-torchrun"]],
               "cancel": batch["final"][batch["names"]["cancel"]]}
    for kind, name in names.items():
        st = final[name]
        assert st["source"] == "sacct", st
        assert st["state"] == without[kind]["state"], kind
    assert final[names["ok"]]["exit_code"] == without["ok"]["exit_code"] == 0
    assert final[names["fail"]]["program_exit_code"] == without["fail"]["program_exit_code"] == 3

    from slurmtrain.runs import slurmquery

    job_ids = [final[n]["job_id"] for n in names.values()]
    by_sacct = slurmquery.sacct_jobs(job_ids)
    by_scontrol = slurmquery.scontrol_jobs()
    for j in job_ids:
        assert by_sacct[j].state == by_scontrol[j].state
