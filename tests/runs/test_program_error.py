"""`status` of a failed run shows the program's own last error line (a `slurmtrain: error:`
line, or the last line of a Python traceback) above the launcher's report."""

from __future__ import annotations

from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.runs import logs, rundir

from runs_fakes import RECORDED

LAUNCHER_REPORT = (RECORDED / "torchrun_failure.txt").read_text().splitlines()


def test_python_exception_before_torchruns_report():
    lines = (RECORDED / "torchrun_program_error.txt").read_text().splitlines()
    assert logs.program_error(lines) == "ValueError: learning rate must be positive, got -1"


def test_launcher_report_alone_is_not_the_programs_error():
    """torchrun's own traceback ends in ChildFailedError: that only says a worker failed."""
    assert logs.program_error(LAUNCHER_REPORT) is None
    assert logs.program_error(["step 10 | loss 2.3", "all fine"]) is None


def test_pythons_own_refusal_to_start_the_program():
    line = "/usr/bin/python3: can't open file '/home/u/proj/nosuch.py': [Errno 2] No such file or directory"
    assert logs.program_error([line, *LAUNCHER_REPORT]) == line
    line = "/opt/venv/bin/python3.11: No module named nosuch"
    assert logs.program_error([line, *LAUNCHER_REPORT]) == line


def _killed_report(signal: str, number: int) -> list[str]:
    """torchrun's summary (a node's report, then another's) with its root cause (rank 2)
    killed by ``signal`` in the second."""
    root = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-27_11:58:02",
            "  host      : stnode2", "  rank      : 2 (local_rank: 0)", f"  exitcode  : -{number} (pid: 20620)",
            "  error_file: <N/A>", f"  traceback : Signal {number} ({signal}) received by PID 20620", "=" * 60]
    return [*LAUNCHER_REPORT, *root]


def test_a_worker_killed_by_a_signal_is_the_root_cause_not_what_its_peers_raised_after_it():
    peers = ["[rank3]: Traceback (most recent call last):", '[rank3]:   File "t.py", line 9',
             "[rank3]: RuntimeError: [gloo] Connection closed by peer [10.0.0.2]:4740"]
    assert logs.program_error([*peers, *_killed_report("SIGKILL", 9)]) == (
        "rank 2 was killed by SIGKILL (torchrun's first observed failure: out of memory, or a kill)")
    assert "SIGSEGV (torchrun's first observed failure: a crash in native code)" in \
        logs.program_error(_killed_report("SIGSEGV", 11))
    # SIGTERM is the launch's own end (a stop, srun's teardown): what the program said stands.
    assert logs.program_error([*peers, *_killed_report("SIGTERM", 15)]) == peers[-1].removeprefix("[rank3]: ")
    agent = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 19783 got signal: 15"
    assert logs.program_error(["Traceback (most recent call last):", '  File "x", line 1', agent]) is None


def test_slurmtrain_error_line():
    line = "slurmtrain: error: corpus.jsonl: data.path: no such file or folder: /x/corpus.jsonl"
    assert logs.program_error(["12:00:01 [rank0] INFO model: ...", line, *LAUNCHER_REPORT]) == line


def test_rank_prefixes_and_chained_exceptions():
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "t.py", line 9, in step',
             "[rank1]:     x = batch['tokens']",
             "[rank1]: KeyError: 'tokens'",
             "[rank1]: ",
             "[rank1]: During handling of the above exception, another exception occurred:",
             "[rank1]: ",
             "[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "t.py", line 11, in step',
             "[rank1]: RuntimeError: batch without tokens",
             "[rank1]: more words of the message",
             *LAUNCHER_REPORT]
    assert logs.program_error(lines) == "RuntimeError: batch without tokens"
    assert logs.program_error(["Traceback (most recent call last):", '  File "t.py", line 1',
                               "KeyboardInterrupt"]) == "KeyboardInterrupt"


def test_status_shows_the_error_above_the_log(tmp_path, fake_slurm):
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = rundir.create(tmp_path, "fail")
    run.update_manifest(name=run.name, job_ids=["12"], state="submitted", nodes=2)
    events.append(run.path, "failed", job_id="12", restart=0, exit_code=1)
    (run.logs / "job-12.out").write_text("srun: error: stnode1: task 0: Exited with exit code 1\n")
    (run.logs / "12-stnode1.out").write_text((RECORDED / "torchrun_program_error.txt").read_text())
    result = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    error = out.index("program error on stnode1: ValueError: learning rate must be positive, got -1")
    report = next(i for i, line in enumerate(out) if line.startswith("last lines of stnode1's log"))
    assert error == report - 1
    assert logs.program_errors(run, "12") == {"stnode1": "ValueError: learning rate must be positive, got -1"}
