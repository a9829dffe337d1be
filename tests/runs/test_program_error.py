"""`status` of a failed run shows the program's own last error line (a `slurmtrain: error:`
line, or the last line of a Python traceback) above the launcher's report."""

from __future__ import annotations

import pytest

from click.testing import CliRunner

from slurmtrain import events, programlog
from slurmtrain.cli import main
from slurmtrain.runs import logs, rundir

from runs_fakes import RECORDED

LAUNCHER_REPORT = (RECORDED / "torchrun_failure.txt").read_text().splitlines()


def said(lines: list[str]) -> str | None:
    found = programlog.program_error(lines)
    return found.line if found else None


def test_python_exception_before_torchruns_report():
    lines = (RECORDED / "torchrun_program_error.txt").read_text().splitlines()
    assert said(lines) == "ValueError: learning rate must be positive, got -1"


def test_an_argparse_refusal_of_the_command_line_is_the_programs_error():
    """The most common mistake: a misspelt option. Every rank prints its usage and refuses."""
    refusal = "train2.py: error: unrecognized arguments: --deepspeed_confg ds.json"
    lines = ["[rank0]: usage: train2.py [-h] [--local_rank LOCAL_RANK] [--deepspeed]",
             "[rank1]: usage: train2.py [-h] [--local_rank LOCAL_RANK] [--deepspeed]",
             "[rank0]:                  [--deepspeed_config DEEPSPEED_CONFIG]", f"[rank0]: {refusal}",
             f"[rank1]: {refusal}", *LAUNCHER_REPORT]
    assert said(lines) == refusal
    assert said(["data: error: none here, and no usage before it"]) is None


def test_a_deepspeed_worker_killed_by_a_signal_is_named():
    lines = ["step 12 loss 2.1",
             "[2026-11-27 21:22:01,123] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', "
             "'train.py', '--local_rank=1', '--deepspeed'] exits with return code = -9"]
    assert said(lines) == ("local rank 1 was killed by SIGKILL (DeepSpeed's launcher: out of memory, or a kill)")
    assert said(["[launch.py:325:sigkill_handler] ['python3', 'train.py'] exits with return code = 1"]) is None


def test_launcher_report_alone_is_not_the_programs_error():
    """torchrun's own traceback ends in ChildFailedError: that only says a worker failed."""
    assert said(LAUNCHER_REPORT) is None
    assert said(["step 10 | loss 2.3", "all fine"]) is None


def test_pythons_own_refusal_to_start_the_program():
    line = "/usr/bin/python3: can't open file '/home/u/proj/nosuch.py': [Errno 2] No such file or directory"
    assert said([line, *LAUNCHER_REPORT]) == line
    line = "/opt/venv/bin/python3.11: No module named nosuch"
    assert said([line, *LAUNCHER_REPORT]) == line


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
    assert said([*peers, *_killed_report("SIGKILL", 9)]) == (
        "rank 2 was killed by SIGKILL (torchrun's first observed failure: out of memory, or a kill)")
    assert "SIGSEGV (torchrun's first observed failure: a crash in native code)" in \
        said(_killed_report("SIGSEGV", 11))
    # SIGTERM is the launch's own end (a stop, srun's teardown): what the program said stands.
    assert said([*peers, *_killed_report("SIGTERM", 15)]) == peers[-1].removeprefix("[rank3]: ")
    agent = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 19783 got signal: 15"
    assert said(["Traceback (most recent call last):", '  File "x", line 1', agent]) is None


def test_slurmtrain_error_line():
    line = "slurmtrain: error: corpus.jsonl: data.path: no such file or folder: /x/corpus.jsonl"
    assert said(["12:00:01 [rank0] INFO model: ...", line, *LAUNCHER_REPORT]) == line


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
    assert said(lines) == "RuntimeError: batch without tokens"
    assert said(["Traceback (most recent call last):", '  File "t.py", line 1',
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


# DeepSpeed's launcher on a node of two ranks: rank 1 raised, rank 0's next collective
# failed after it and printed last (a helper's run, trimmed).
CRASH_NODE = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 61, in <module>',
              "[rank1]: RuntimeError: deliberate crash at step 3 on rank 1",
              "[rank0]: Traceback (most recent call last):", '[rank0]:   File "train.py", line 58, in <module>',
              "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
              "by peer [127.0.0.1]:22184. This is typically caused by a remote worker crashing.",
              "[2026-11-27 15:16:38,176] [ERROR] [launch.py:259:sigkill_handler] [...] exits with return code = 1"]
PEER_NODE = ["[rank2]: Traceback (most recent call last):", '[rank2]:   File "train.py", line 58, in <module>',
             "[rank2]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection reset by peer [127.0.0.1]:5"]


def test_the_root_cause_wins_over_a_peers_failure_printed_after_it():
    assert programlog.program_error(CRASH_NODE) == ("RuntimeError: deliberate crash at step 3 on rank 1", True)
    assert programlog.program_error(PEER_NODE) == (PEER_NODE[-1].removeprefix("[rank2]: "), False)


def failed_on_two_nodes(tmp_path, name: str, code: int, srun_said: list[str], node_logs: dict[str, list[str]]):
    """A run of job 12 that failed with ``code``: srun's task lines in the batch log, each node's log."""
    run = rundir.create(tmp_path, name)
    run.update_manifest(name=run.name, job_ids=["12"], state="submitted", nodes=2)
    events.append(run.path, "failed", job_id="12", restart=0, exit_code=code)
    (run.logs / "job-12.out").write_text("".join(f"srun: error: {line}\n" for line in srun_said))
    for node, lines in node_logs.items():
        (run.logs / f"12-{node}.out").write_text("\n".join(lines) + "\n")
    return run


def test_status_names_the_node_of_the_root_cause_first_and_the_others_as_followers(tmp_path, fake_slurm):
    """srun saw stnode2's launcher exit first (its ranks' connections closed), stnode1's
    terminated: the crash is stnode1's."""
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = failed_on_two_nodes(tmp_path, "crash", 1, ["stnode2: task 1: Exited with exit code 1", "stnode1: task 0: "
                                                     "Terminated"], {"stnode1": CRASH_NODE, "stnode2": PEER_NODE})
    assert list(logs.program_errors(run, "12").items()) == [
        ("stnode1", "RuntimeError: deliberate crash at step 3 on rank 1"),
        ("stnode2", PEER_NODE[-1].removeprefix("[rank2]: ") + " (after the failure on stnode1)")]
    def lines_of(node):
        return programlog.tail_lines(run.logs / f"12-{node}.out")
    assert programlog.root_node(["stnode2", "stnode1"], lines_of) == "stnode1"
    assert programlog.root_node(["stnode2"], lines_of) == "stnode2"  # none better
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert out.index("program error on stnode1: RuntimeError: deliberate crash") < out.index("program error on stnode2")


def test_status_reads_the_last_launchs_part_of_a_node_log(tmp_path, fake_slurm):
    """An in-job restart appends to the same node log: the first launch's crash was said
    and restarted from; the last launch failed with its own error."""
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = rundir.create(tmp_path, "again")
    run.update_manifest(name=run.name, job_ids=["12"], state="submitted", nodes=1)
    events.append(run.path, "failed", job_id="12", restart=0, exit_code=1)
    (run.logs / "job-12.out").write_text("srun: error: stnode1: task 0: Exited with exit code 1\n")
    (run.logs / "12-stnode1.out").write_text(
        programlog.launch_line("job 12, launch 1 on stnode1, 2026-11-27 10:00:00")
        + "\n".join(CRASH_NODE) + "\n"
        + programlog.launch_line("job 12, launch 2 (in-job restart 1) on stnode1, 2026-11-27 10:01:00")
        + "Traceback (most recent call last):\nOSError: [Errno 28] No space left on device\n")
    assert logs.program_errors(run, "12") == {"stnode1": "OSError: [Errno 28] No space left on device"}
    assert programlog.last_launch(["a", programlog.launch_line("x").rstrip(), "b"]) == ["b"]
    assert programlog.last_launch(["a", "b"]) == ["a", "b"]


# A Hugging Face Trainer's node log (a helper's run, trimmed): tqdm redraws its bar with
# carriage returns and leaves the last frame with no newline, so rank 1's traceback begins
# in the middle of a line, and rank 0's follow-on error after the next frame.
TQDM_NODE = (" 13%|█▎        | 4/30 [00:01<00:11,  2.20it/s][rank1]: Traceback (most recent call last):\n"
             '[rank1]:   File "train.py", line 55, in on_step_end\n'
             "[rank1]: RuntimeError: boom on rank 1 at step 5\n"
             " 17%|█▋        | 5/30 [00:02<00:11,  2.21it/s][rank0]: Traceback (most recent call last):\n"
             '[rank0]:   File "torch/distributed/distributed_c10d.py", line 4287, in all_gather\n'
             "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:20395\n")


def test_a_traceback_after_a_progress_bar_is_the_programs_error():
    assert programlog.program_error(TQDM_NODE.splitlines()) == ("RuntimeError: boom on rank 1 at step 5", True)


def test_ranks_printing_their_tracebacks_at_once_are_read_apart():
    lines = ["[rank1]: Traceback (most recent call last):", "[rank0]: Traceback (most recent call last):",
             '[rank1]:   File "train.py", line 5, in <module>', "[rank1]: ValueError: bad batch at step 7",
             '[rank0]:   File "train.py", line 9, in <module>',
             "[rank0]: RuntimeError: Connection reset by peer"]
    assert programlog.program_error(lines) == ("ValueError: bad batch at step 7", True)


@pytest.mark.parametrize("line, nodes", [
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", True),
    ("RuntimeError: NCCL error: unhandled system error (Xid 79: GPU has fallen off the bus)", True),
    ("OSError: [Errno 5] Input/output error", True),
    ("OSError: [Errno 28] No space left on device", False),  # the shared file system: no node would mend it
    ("ValueError: bad batch at step 7", False)])
def test_an_error_that_tells_of_its_node_is_the_nodes_however_often_it_comes(line, nodes):
    assert programlog.node_fault(line) is nodes


def test_a_quiet_exit_is_told_by_the_last_line_the_program_printed_before_the_launchers_word():
    """`sys.exit("...")` prints its message and no traceback (recorded: torchrun, two ranks);
    status says the exit and that line, as what it is."""
    lines = (RECORDED / "torchrun_quiet_exit.txt").read_text().splitlines()
    assert said(lines) == "exited with code 1; its last line before: no data under /data/x: give --data"
    srun = ["step 3 | loss 2.1", "config file /p/c.yaml has no [model] table", "",
            "srun: error: stnode1: task 0: Exited with exit code 2", "srun: Terminating StepId=12.0"]
    assert said(srun) == "exited with code 2; its last line before: config file /p/c.yaml has no [model] table"
    # nothing the program printed, or a clean exit: nothing to say
    assert said(["srun: error: stnode1: task 0: Exited with exit code 2"]) is None
    assert said(["step 3 | loss 2.1", "srun: Terminating StepId=12.0"]) is None
    assert said(["checkpoint saved: step_53", "srun: error: stnode1: task 0: Exited with exit code 75"]) is None


def test_the_container_runtimes_refusal_is_the_programs_error():
    """apptainer could not start the program (an unreadable image, a missing bind source):
    its FATAL line, not "exit status 255"."""
    fatal = "FATAL:   container creation failed: mount hook function failure: mount /home/u/nodata->/data error"
    assert said(["INFO:    underlay of /etc/localtime required", fatal,
                 "srun: error: stnode1: task 0: Exited with exit code 255"]) == fatal


def test_a_script_that_did_not_compile_is_named_with_its_file_and_line(tmp_path):
    """Python prints no "Traceback" line for the script itself: under the srun launcher the
    node's log holds only the file, the line and the error."""
    import subprocess
    import sys
    from slurmtrain import programlog
    (tmp_path / "bad.py").write_text("def f(\n    x = 1\n")
    out = subprocess.run([sys.executable, str(tmp_path / "bad.py")], capture_output=True, text=True).stderr
    found = programlog.program_error(["----- slurmtrain: job 5, launch 1 on a -----", *out.splitlines()])
    assert found == programlog.Error(f"SyntaxError: '(' was never closed ({tmp_path / 'bad.py'}, line 1)", True)


def test_a_killed_task_is_the_root_cause_and_its_peers_error_follows_from_it(tmp_path, fake_slurm):
    """srun launcher: rank 1 SIGKILLed (out of memory) says nothing; srun says "Killed" first;
    rank 0's gloo error is the consequence, not the program's error."""
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = failed_on_two_nodes(tmp_path, "oom", 137, ["stnode2: task 1: Killed", "stnode1: task 0: Exited with exit "
                                                     "code 1"], {"stnode1": PEER_NODE, "stnode2": ["step 3"]})
    assert list(logs.program_errors(run, "12").items()) == [
        ("stnode2", "a task on stnode2 was killed by SIGKILL (out of memory, or a kill)"),
        ("stnode1", PEER_NODE[-1].removeprefix("[rank2]: ") + " (after the failure on stnode2)")]
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert out.index("program error on stnode2: a task on stnode2 was killed by SIGKILL") < \
        out.index("program error on stnode1: RuntimeError"), out
    # A first failure that exited (srun then kills the rest): not a kill's
    (run.logs / "job-12.out").write_text("srun: error: stnode1: task 0: Exited with exit code 1\n"
                                         "srun: error: stnode2: task 1: Killed\n")
    assert "stnode2" not in logs.program_errors(run, "12")


def test_only_a_first_failure_that_was_a_kill_is_the_root_and_only_in_the_last_launch(tmp_path, fake_slurm):
    """srun's other words for a task's end (a segfault) count as a first failure that was no
    kill; a kill in an earlier launch (the supervisor ended a hung one) is that launch's."""
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = failed_on_two_nodes(tmp_path, "segv", 139, ["stnode2: task 1: Segmentation fault (core dumped)",
                                                      "stnode1: task 0: Killed"], {"stnode1": PEER_NODE})
    assert "killed by SIGKILL" not in " ".join(logs.program_errors(run, "12").values())
    (run.logs / "job-12.out").write_text(
        "srun: error: stnode2: task 1: Killed\n"
        "slurmtrain: the launch hung on stnode2 and was ended (exit status 137); starting it again in this "
        "allocation on stnode1 stnode2 (1 of 3)\n"
        "srun: error: stnode1: task 0: Exited with exit code 1\n")
    assert "killed by SIGKILL" not in " ".join(logs.program_errors(run, "12").values())


def test_a_traceback_after_a_progress_bar_padded_with_spaces_is_read():
    """tqdm pads its last frame with spaces: rank 3's traceback began after them, unread, and
    a peer's collective error was taken for the failure (the wrong node blamed)."""
    lines = ["61it [00:01, 43.86it/s]               61it [00:01, 59.00it/s]               [rank3]: Traceback "
             "(most recent call last):", '[rank3]:   File "train.py", line 9, in <module>',
             "[rank3]: FileNotFoundError: [Errno 2] No such file or directory: 'x'",
             "[rank2]: Traceback (most recent call last):", '[rank2]:   File "train.py", line 9, in <module>',
             PEER_NODE[-1].replace("[rank2]: ", "[rank2]: ")]
    assert programlog.program_error(lines) == ("FileNotFoundError: [Errno 2] No such file or directory: 'x'", True)


def test_a_traceback_is_cut_out_of_a_line_only_after_a_progress_bar():
    """torchrun's @record summary ("traceback : Traceback ...") and a message quoting one are
    not cut: their next unindented line ("=====", a progress frame) is no error; a prefixed
    line's tqdm frame padded with spaces is, the rank kept."""
    summary = ["Traceback (most recent call last):", '  File "t.py", line 3, in <module>', "ValueError: boom",
               "[ERROR] failed (exitcode: 1) local_rank: 0", "Root Cause (first observed failure):",
               "[0]:", "  traceback : Traceback (most recent call last):", '    File "t.py", line 3', "=" * 40]
    assert programlog.program_error(summary) == ("ValueError: boom", True)
    quoted = ["Traceback (most recent call last):", "ValueError: real",
              "WARNING step failed: Traceback (most recent call last):", " 50%|#####     | 5/10"]
    assert programlog.program_error(quoted) == ("ValueError: real", True)
    prefixed = ["[rank0]:100%|##########| 10/10 [00:01<00:00]    Traceback (most recent call last):",
                '[rank0]:   File "t.py", line 1, in <module>', "[rank0]: KeyError: 'k'"]
    assert programlog.program_error(prefixed) == ("KeyError: 'k'", True)


@pytest.mark.parametrize("line, sound", [
    ("FileNotFoundError: [Errno 2] No such file or directory: 'x'", True),
    ("slurmtrain: error: train.data: no such folder", True),
    ("RuntimeError: CUDA error: unspecified launch failure", False),      # a GPU about to fail
    ("OSError: [Errno 5] Input/output error", False),                     # the node's device
    ("torch.distributed.DistBackendError: NCCL error in: ...", False),     # the network
    ("RuntimeError: Socket Timeout", False),
    ("rank 1 was killed by SIGABRT (torchrun's first observed failure: an abort in native code)", False),
    ("exited with code 1; its last line before: step 100 loss 2.3", False),  # a launcher's report
])
def test_only_a_program_error_a_sound_node_raises_proves_the_node_alive(line, sound):
    assert programlog.proves_node_sound(line) is sound
    assert not programlog.proves_node_sound("ValueError: x", ["[E] Watchdog caught collective operation timeout"])
