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
