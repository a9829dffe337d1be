"""The job script's ``event`` function writes valid JSON whatever a value holds, and
``events.read`` reports (never silently drops) a line it cannot parse.

The function is the one ``slurmtrain gen`` renders (templates/rundir.j2), run under bash.
"""

from __future__ import annotations

import json
import re
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from slurmtrain import events

from script_functions import run_bash

# Any text bash can hold in a variable: everything but NUL (surrogates cannot be encoded).
hostile_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
numberish = st.from_regex(r"\A-?[0-9]{1,4}\Z")  # integers, with and without leading zeros
values = st.one_of(hostile_text, numberish,
                   st.sampled_from(['"', "\\", "\n", "\r\n", "\t", "\x01\x1f\x7f", "007", "0", "-0", "1e5",
                                    "", " ", '\\"', "\\n", "é ✓ 日本", "$(touch /tmp/x)", "`id`", "%s %d"]))
keys = st.from_regex(r"\A[a-z][a-z_]{0,11}\Z").filter(lambda k: k not in ("time", "event", "job_id", "restart"))


def write_event(tmp_path, name, fields, job_id="7"):
    args: list[str] = [name]
    for k, v in fields.items():
        args += [k, v]
    proc = run_bash(["event"], 'event "$@"', tmp_path, args, env={"SLURM_JOB_ID": job_id})
    assert proc.returncode == 0, proc.stderr


def json_integer(value: str) -> bool:
    return re.fullmatch(r"0|-?[1-9][0-9]*", value) is not None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile_text.filter(bool), job_id=hostile_text, fields=st.dictionaries(keys, values, max_size=4))
def test_every_line_is_json_and_every_value_comes_back(tmp_path, name, job_id, fields):
    path = tmp_path / events.EVENTS_FILE
    path.unlink(missing_ok=True)
    write_event(tmp_path, name, fields, job_id)
    line, end = path.read_bytes().decode().split("\n")  # one line (str.splitlines would split at U+0085)
    assert end == ""
    record = json.loads(line)
    assert isinstance(record["time"], float) and record["restart"] == 0
    assert (record["event"], record["job_id"]) == (name, job_id)
    for key, value in fields.items():
        want = int(value) if json_integer(value) else value
        assert record[key] == want and type(record[key]) is type(want), (key, value, line)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert events.read(tmp_path) == [record]


@pytest.mark.parametrize("value, want", [
    ("7", 7), ("0", 0), ("-3", -3), ("123456789012345678901234567890", 123456789012345678901234567890),
    ("007", "007"), ("-0", "-0"), ("00", "00"), ("1e5", "1e5"), ("1.5", "1.5"), ("", ""), ("+1", "+1"),
    (" 1", " 1"), ("1\n", "1\n"),
])
def test_numbers_only_when_valid_json_numbers(tmp_path, value, want):
    write_event(tmp_path, "failed", {"exit_code": value})
    got = events.read(tmp_path)[-1]["exit_code"]
    assert got == want and type(got) is type(want)


def test_requeue_failed_message_with_backslash_and_newline(tmp_path):
    """What `scontrol requeue` may say, verbatim in the requeue_failed event."""
    why = 'slurm_requeue error: "C:\\path"\nsecond line\twith tab'
    write_event(tmp_path, "requeue_failed", {"message": why})
    (e,) = events.read(tmp_path)
    assert e["event"] == "requeue_failed" and e["message"] == why


def test_bytes_that_are_not_utf8_do_not_lose_the_line(tmp_path):
    proc = run_bash(["event"], 'event "$@"', tmp_path, ["requeue_failed", "message", b"bad \xff\xfe bytes"],
                    env={"SLURM_JOB_ID": "7"})
    assert proc.returncode == 0, proc.stderr
    (e,) = events.read(tmp_path)
    assert e["message"] == "bad \ufffd\ufffd bytes"


def test_unreadable_lines_are_reported_with_file_and_line(tmp_path):
    path = tmp_path / events.EVENTS_FILE
    path.write_text('{"time": 1, "event": "started", "job_id": "7", "restart": 0}\n'
                    '{"time": 2, "event": "requeue_failed", "message": "a"b"}\n'
                    '[1, 2]\n'
                    '\n'
                    '{"time": 3, "event": "failed", "job_id": "7", "restart": 0, "exit_code": 1}\n'
                    '{"time": 4, "event": "fini')
    with pytest.warns(events.EventLogWarning) as caught:
        got = events.read(tmp_path)
    assert [e["event"] for e in got] == ["started", "failed"]
    said = [(w.filename, w.lineno, str(w.message)) for w in caught]
    assert [(f, n) for f, n, _ in said] == [(str(path), 2), (str(path), 3), (str(path), 6)], said
    assert "not valid JSON" in said[0][2] and "not an event" in said[1][2] and "cut short" in said[2][2]


def test_the_cli_prints_the_file_line_and_text_of_a_bad_line(tmp_path):
    """As `slurmtrain watch`/`status` show it on stderr: path:line, why, then the line."""
    import subprocess
    import sys

    (tmp_path / events.EVENTS_FILE).write_text('{"time": 1, "event": "started", "job_id": "7", "restart": 0}\n'
                                               '{"time": 2, "event": "requeue_failed", "message": "a"b"}\n')
    proc = subprocess.run([sys.executable, "-m", "slurmtrain", "watch", str(tmp_path), "--once"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"{tmp_path / events.EVENTS_FILE}:2: EventLogWarning: not valid JSON" in proc.stderr, proc.stderr
    assert '"message": "a"b"' in proc.stderr


def test_the_time_comes_from_bash_not_from_date(tmp_path):
    """No command substitution on bash 5 (bash 5.2 breaks one that a trap interrupts, and
    event() runs beside the job script's traps): with no `date` on PATH the time is still
    there, a number; where EPOCHREALTIME is missing (bash < 5) date gives it."""
    before = time.time()
    proc = run_bash(["event"], 'event "$@"', tmp_path, ["no_date"], env={"PATH": "/nonexistent"})
    assert proc.returncode == 0 and b"date" not in proc.stderr, proc.stderr
    proc = run_bash(["event"], 'unset EPOCHREALTIME; event "$@"', tmp_path, ["old_bash"])
    assert proc.returncode == 0, proc.stderr
    got = events.read(tmp_path)
    assert [e["event"] for e in got] == ["no_date", "old_bash"]
    assert all(isinstance(e["time"], float) and before - 1 < e["time"] < time.time() + 1 for e in got), got


def test_a_ledger_line_needs_no_date_either(tmp_path):
    (tmp_path / "run").mkdir()
    proc = run_bash(["ledger_add"], 'SLURMTRAIN_LEDGER="$RUN_DIR/../bad-nodes.jsonl"; ledger_add stnode2 watchdog x',
                    tmp_path / "run", env={"PATH": "/nonexistent", "SLURM_JOB_ID": "9"})
    assert proc.returncode == 0, proc.stderr
    line = json.loads((tmp_path / "bad-nodes.jsonl").read_text())
    assert (line["node"], line["run"], line["job_id"], line["source"]) == ("stnode2", "run", "9", "watchdog")
    assert abs(line["time"] - time.time()) < 5
