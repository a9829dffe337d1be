"""Chains on the sandbox: `submit --after RUN` (and `--after-ok`, `--after-any`, `tokenize
--after`) queue a job that Slurm holds until the runs it waits for have ended, with no
person between the steps; a job whose run waited for failed is cancelled by Slurm
(`--kill-on-invalid-dep`), and `status` says why, instead of it sitting PENDING for ever.

Rendezvous ports: this file's range, 29860-29879."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from e2e_util import cli, statuses, submit, wait_final, wait_until

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
ONE = ("--profile", "local", "--launcher", "srun", "-N", "1", "--set", "launch.procs_per_node=1")


def py(code: str) -> tuple[str, ...]:
    return ("--", sys.executable, "-c", code)


def events(cwd: Path, name: str) -> list[dict]:
    path = cwd / "runs" / name / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def first(evs: list[dict], name: str) -> float:
    return next(e["time"] for e in evs if e["event"] == name)


def test_a_chain_runs_in_order_and_a_failed_link_cancels_what_waits_for_it(tmp_path):
    marker, go = tmp_path / "made-by-a", tmp_path / "go-a"
    # `a` ends once `b` waits for it (CI's busy machine once took longer to submit `b` than a
    # fixed sleep of `a`, and `a` had completed: nothing to wait for).
    a = submit(tmp_path, *ONE, "--name", "a", *py(
        f"import time, pathlib; t = time.time()\nwhile not pathlib.Path({str(go)!r}).exists() and time.time() - t < 120:"
        f" time.sleep(0.2)\npathlib.Path({str(marker)!r}).touch()"))
    b_out = cli(tmp_path, "submit", *ONE, "--name", "b", "--after", a,
                *py(f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(marker)!r}).exists() else 5)"))
    go.touch()
    assert b_out.returncode == 0, b_out.stdout + b_out.stderr
    assert f"waits until {a} (job " in b_out.stdout and ") completes" in b_out.stdout
    b = Path(next(line.split(": ", 1)[1] for line in b_out.stdout.splitlines() if line.startswith("run directory: "))).name
    go_bad = tmp_path / "go-bad"  # `bad` fails once both runs after it wait for it, as `a` above
    bad = submit(tmp_path, *ONE, "--name", "bad", *py(
        f"import time, sys, pathlib; t = time.time()\nwhile not pathlib.Path({str(go_bad)!r}).exists() and "
        "time.time() - t < 120: time.sleep(0.2)\nsys.exit(1)"))
    never = submit(tmp_path, *ONE, "--name", "never", "--after", bad, *py("print('must not run')"))
    anyway = submit(tmp_path, *ONE, "--name", "anyway", "--after-any", bad, *py("print('ran anyway')"))

    # While `bad` runs, what waits for it says so.
    waiting = statuses(tmp_path, [never])[never]
    if waiting["state"] == "PENDING":
        assert waiting["note"].startswith(f"waits until {bad} (job "), waiting
    go_bad.touch()

    final = wait_final(tmp_path, [a, b, bad, anyway], timeout=240)
    # Written by bad's own supervisor as it ended, before anyone asked about `never`.
    told = [e for e in events(tmp_path, never) if e["event"] == "dependency_never_satisfied"]
    assert [e["detail"] for e in told] == [f"{bad} (job {final[bad]['job_id']}) ended: failed"], told
    final.update(wait_final(tmp_path, [never], timeout=60))
    assert {n: final[n]["state"] for n in (a, b, bad, anyway)} == {
        a: "COMPLETED", b: "COMPLETED", bad: "FAILED", anyway: "COMPLETED"}, final
    assert first(events(tmp_path, a), "finished") <= first(events(tmp_path, b), "started")
    assert first(events(tmp_path, bad), "failed") <= first(events(tmp_path, anyway), "started")

    gone = final[never]
    assert gone["state"] == "CANCELLED" and gone["outcome"] == "cancelled", gone
    assert gone["outcome_detail"].startswith(f"Slurm cancelled it without running: {bad} (job "), gone
    assert "ended: user error" in gone["outcome_detail"]  # status's words for it
    assert not (tmp_path / "runs" / never / "logs" / f"job-{gone['job_id']}.out").exists()
    recorded = [e for e in events(tmp_path, never) if e["event"] == "dependency_never_satisfied"]
    assert [e["after"] for e in recorded] == [[bad]]
    text = cli(tmp_path, "status", never).stdout
    assert "cancelled by Slurm without running" in text, text

    manifest = json.loads((tmp_path / "runs" / b / "manifest.json").read_text())
    assert [(x["run"], x["kind"]) for x in manifest["after"]] == [(a, "afterok")]
    dependents = [json.loads(x) for x in (tmp_path / "runs" / a / "dependents.jsonl").read_text().splitlines()]
    assert [d["run"] for d in dependents] == [b]


def test_what_cannot_be_waited_for_is_refused_and_nothing_is_queued(tmp_path):
    failed = submit(tmp_path, *ONE, "--name", "failed", *py("import sys; sys.exit(2)"))
    wait_final(tmp_path, [failed], timeout=60)
    done = submit(tmp_path, *ONE, "--name", "done", *py("pass"))
    wait_final(tmp_path, [done], timeout=60)
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())

    for option, ref, words in (("--after", "no-such-run", "--after no-such-run: run 'no-such-run': no such run"),
                               ("--after-ok", failed, f"--after-ok {failed}: run {failed} ended user error")):
        proc = cli(tmp_path, "submit", *ONE, option, ref, *py("pass"))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before

    # A run that already completed is nothing to wait for: the job is queued at once.
    proc = cli(tmp_path, "submit", *ONE, "--name", "next", "--after", done, *py("pass"))
    assert proc.returncode == 0 and "already ended (completed): nothing to wait for" in proc.stderr, proc.stderr
    name = Path(next(line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("run directory: "))).name
    assert wait_final(tmp_path, [name], timeout=60)[name]["state"] == "COMPLETED"


@pytest.mark.torch
@pytest.mark.slow
def test_tokenize_then_train_then_export_with_no_one_between(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "train"))
    from trainer_util import RECIPE, write_corpus

    (tmp_path / "corpus").mkdir()
    for i in range(2):
        write_corpus(tmp_path / "corpus" / f"{i}.jsonl", 60)
    ports = ("--set", "launch.rdzv_port=29860", "--set", "launch.rdzv_port_spread=20")
    tok = cli(tmp_path, "tokenize", "corpus", "--tokenizer", "bytes", "--out", "tok", "--shard-mb", "0.005",
              "-j", "1", "--profile", "local", "--nodes", "2", "--name", "tok", *ports)
    assert tok.returncode == 0, tok.stdout + tok.stderr
    tok_run = Path(next(line.split(": ", 1)[1] for line in tok.stdout.splitlines()
                        if line.startswith("run directory: "))).name
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.format(steps=4, save_steps=0).replace('path = "corpus.jsonl"', 'path = "tok"'))
    assert not (tmp_path / "tok" / "index.json").exists()  # the trainer's data does not exist yet
    train = submit(tmp_path, "--profile", "local", "-N", "1", "--set", "launch.procs_per_node=2", *ports,
                   "--name", "train", "--after", tok_run, "--recipe", str(recipe))
    export = submit(tmp_path, *ONE, "--name", "export", "--after", train, "--", sys.executable, "-m", "slurmtrain",
                    "export", str(tmp_path / "runs" / train), "--hf", str(tmp_path / "hf"))
    got = wait_until(tmp_path, [tok_run, train, export], "the chain to end",
                     lambda s: all(x["state"] in ("COMPLETED", "FAILED", "CANCELLED") for x in s.values()),
                     timeout=400)
    assert {n: s["state"] for n, s in got.items()} == {tok_run: "COMPLETED", train: "COMPLETED",
                                                        export: "COMPLETED"}, got
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()
    tok_ended = max(e["time"] for e in events(tmp_path, tok_run) if e["event"] == "finished")
    assert tok_ended <= first(events(tmp_path, train), "started")
    assert first(events(tmp_path, train), "finished") <= first(events(tmp_path, export), "started")


def test_a_resubmitted_link_waits_again_for_the_link_before_it(tmp_path):
    """A chain whose first link failed: fixed and resubmitted, the link after it, resubmitted
    too, waits for that new job (it ran at once, on the first link's half-made output)."""
    flag, made, go = tmp_path / "fixed", tmp_path / "made-by-up", tmp_path / "go"
    # `up` ends only once `down` waits for it (a run that already failed cannot be waited for)
    up = submit(tmp_path, *ONE, "--name", "up", *py(
        f"import pathlib, sys, time\nfor _ in range(3000):\n    if pathlib.Path({str(go)!r}).exists(): break\n"
        f"    time.sleep(0.1)\npathlib.Path({str(flag)!r}).exists() or sys.exit(3)\n"
        f"pathlib.Path({str(made)!r}).touch()"))
    down = submit(tmp_path, *ONE, "--name", "down", "--after", up, *py(
        f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(made)!r}).exists() else 5)"))
    go.touch()
    wait_final(tmp_path, [up, down], timeout=120)
    early = cli(tmp_path, "resubmit", down)
    assert early.returncode == 2 and f"submitted to start after {up}, and run {up} ended" in early.stderr, early.stderr
    flag.touch()
    go.unlink()  # the resubmitted `up` too ends only once `down` waits for it (else: nothing to wait for)
    assert cli(tmp_path, "resubmit", "--force", up).returncode == 0
    again = cli(tmp_path, "resubmit", down)
    go.touch()
    assert again.returncode == 0, again.stderr
    assert f"waits until {up} (job " in again.stderr, again.stderr
    final = wait_final(tmp_path, [up, down], timeout=180)
    assert (final[up]["state"], final[down]["state"]) == ("COMPLETED", "COMPLETED"), final
    ended = [e["time"] for e in events(tmp_path, up) if e["event"] == "finished"][-1]
    assert ended <= [e["time"] for e in events(tmp_path, down) if e["event"] == "started"][-1]
