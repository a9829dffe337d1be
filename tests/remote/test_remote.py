"""From a laptop: every command over ssh to the login node (slurmtrain.remote), run as a
second ordinary user whose commands have no Slurm and no torch, against the container lane's
sandbox and its sshd (scripts/login_node.sh)."""

from __future__ import annotations

import json
import re
import shutil
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HOME, LOGIN_PORT, LOGIN_USER, SETS, handshakes, laptop, on_login, status, submitted, wait_state

pytestmark = pytest.mark.remote
# As the survival tests' trainer (tests/survival/survival_util.TRAIN): a quarter of the tokens a
# step, paced to at least 0.3 s, so that the run lasts as long at a quarter of the CPU.
TRAIN = ["python3", "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--eval-steps", "0", "--log-steps", "5",
         "--train-steps", "100", "--save-steps", "10", "--set", "data.max_seq_len=64",
         "--set", "train.global_batch_size=8", "--set", "debug.step_seconds=0.3"]
SRUN_1 = ["--profile", "local", "--launcher", "srun", "-N", "1", *SETS]
# Each reaches the program as one argument, or the test fails.
HOSTILE = ["a b", "$(touch /tmp/remote-pwned)", "x; touch /tmp/remote-pwned2", "it's", '"q"', "`id`", "*",
           "--flag=$HOME", "tab\there", "\\n", "{lr}"]


@pytest.fixture(scope="module")
def project(tmp_path_factory, laptop_env) -> Path:
    """The user's project on the laptop (a space in its name): the demo corpus, a program of
    theirs, and build outputs that .gitignore keeps from travelling."""
    d = tmp_path_factory.mktemp("my project")
    made = subprocess.run(["slurmtrain", "demo-corpus", "--max-mb", "0.3"], cwd=d, env=laptop_env,
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    (d / ".gitignore").write_text("outputs/\n")
    (d / "outputs").mkdir()
    (d / "outputs" / "big.bin").write_bytes(b"\0" * 3_000_000)
    (d / "show_args.py").write_text("import json, sys\nprint('ARGS ' + json.dumps(sys.argv[1:]), flush=True)\n")
    return d


def step_of(env, cwd, name: str) -> int:
    out = laptop(env, cwd, "watch", "--once", name).stdout
    m = re.search(r"step (\d+)", out)
    return int(m[1]) if m else -1


def wait_step(env, cwd, name: str, step: int, timeout: float = 300) -> int:
    end = time.monotonic() + timeout
    while (now := step_of(env, cwd, name)) < step:
        assert time.monotonic() < end, f"{name}: step {now} after {timeout} s, waiting for {step}"
        time.sleep(3)
    return now


def test_the_laptop_has_no_slurm_and_no_torch(laptop_env):
    for command in ("sbatch", "squeue", "scontrol", "srun", "python3"):
        assert shutil.which(command, path=laptop_env["PATH"]) is None, command
    probe = subprocess.run([shutil.which("slurmtrain", path=laptop_env["PATH"]), "models"], env=laptop_env,
                           capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr  # the CLI itself runs here
    wrapper = Path(shutil.which("slurmtrain", path=laptop_env["PATH"])).read_text()
    blocker = str(Path(__file__).parent / "laptop")
    assert f'PYTHONPATH="{blocker}:' in wrapper, wrapper
    torch = subprocess.run([sys.executable, "-c", "import torch"], env={**laptop_env, "PYTHONPATH": blocker},
                           capture_output=True, text=True)
    assert torch.returncode == 1 and "torch is not on the laptop" in torch.stderr, torch.stderr


def test_a_run_from_the_laptop_is_followed_plotted_preempted_and_resumed(laptop_env, project, tmp_path):
    env = laptop_env
    sub = laptop(env, project, "submit", "--profile", "local", "-N", "2", "--partition", "low", *SETS,
                 "--name", "lap", "--", *TRAIN)
    name = submitted(sub)
    # The hint is written for the laptop: through the remote, without the login node's runs directory.
    assert f"follow it: slurmtrain --remote lane status {name}; slurmtrain --remote lane logs -f {name}" \
        in sub.stdout, sub.stdout
    code = "slurmtrain/code/" + re.sub(r"[^A-Za-z0-9._-]", "_", project.name)
    assert re.search(rf"slurmtrain: code: {re.escape(str(project))} \(\d+ files, [\d.]+ [kM]B\)", sub.stderr), sub.stderr
    assert f"-> {LOGIN_USER}@127.0.0.1:{LOGIN_PORT}:{code}/" in sub.stderr, sub.stderr
    snapshot = on_login(f"ls -A {code}/latest/")
    assert sorted(snapshot.stdout.split()) == [".gitignore", "demo", "show_args.py"], snapshot

    assert wait_step(env, project, name, 12) >= 12  # a checkpoint at step 10
    running = laptop(env, project, "status", name)
    assert running.returncode == 0 and re.search(r"RUNNING", running.stdout), running.stdout + running.stderr
    png = tmp_path / "lap.png"
    plotted = laptop(env, tmp_path, "plot", name, "-o", str(png))
    assert plotted.returncode == 0 and plotted.stdout.strip() == f"wrote {png}", plotted.stdout + plotted.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not on_login("ls slurmtrain/.slurmtrain-plot-* 2>/dev/null").stdout  # nothing left there

    follow = subprocess.Popen(["slurmtrain", "--remote", "lane", "logs", "-f", name], cwd=project, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        for line in follow.stdout:
            seen.append(line)
            if re.match(r"\[stnode\d\] .*step \d+/100", line):
                break
    finally:
        follow.terminate()
        follow.wait(30)
    assert re.match(r"\[stnode\d\] .*step \d+/100", seen[-1]), seen  # the node logs, as they grow

    # Another user's job on the high partition takes both nodes: the run is preempted.
    subprocess.run(["sbatch", "-p", "high", "-N", "2", "--ntasks-per-node=4", "-J", "preemptor", "-o", "/dev/null",
                    "--wrap", "sleep 5"], check=True, capture_output=True)
    before = handshakes()
    watched = laptop(env, project, "watch", "--interval", "3", name, timeout=900)
    assert watched.returncode == 0, watched.stdout[-2000:] + watched.stderr
    assert handshakes() - before <= 1, "watch made more than one ssh handshake"
    assert "step 100/100" in watched.stdout, watched.stdout[-2000:]

    st = status(env, project, name)
    assert st["state"] == "COMPLETED", st
    kinds = [e["event"] for e in st["events"]]
    assert kinds.count("started") >= 2 and "stopped" in kinds, kinds
    text = laptop(env, project, "status", name).stdout
    assert "preempt" in text.lower(), text
    logs = laptop(env, project, "logs", name).stdout
    assert re.search(r"resumed from .*step 1\d|resumed from .*step [2-9]\d", logs), logs[-3000:]


def test_hostile_values_reach_the_program_as_its_arguments(laptop_env, project):
    env = laptop_env
    name = submitted(laptop(env, project, "submit", *SRUN_1, "--name", "args", "--", "python3", "show_args.py",
                            *HOSTILE))
    st = wait_state(env, project, name, lambda s: s["state"] in ("COMPLETED", "FAILED"), "end")
    assert st["state"] == "COMPLETED", st
    logs = laptop(env, project, "logs", name).stdout
    assert "ARGS " + json.dumps(HOSTILE) in logs, logs
    assert not Path("/tmp/remote-pwned").exists() and not Path("/tmp/remote-pwned2").exists()
    odd = laptop(env, project, "submit", *SRUN_1, "--name", "x;$(touch /tmp/remote-pwned3)", "--", "true")
    if odd.returncode:  # refused in one line (after the code's), or taken literally
        errors = [line for line in odd.stderr.splitlines() if line.startswith("slurmtrain: error: ")]
        assert odd.returncode == 2 and len(errors) == 1 and "job name" in errors[0], odd.stderr
    assert not Path("/tmp/remote-pwned3").exists()


def test_cancel_from_the_laptop(laptop_env, project):
    env = laptop_env
    name = submitted(laptop(env, project, "submit", *SRUN_1, "--name", "long", "--", "sleep", "600"))
    wait_state(env, project, name, lambda s: s["state"] == "RUNNING", "RUNNING")
    cancelled = laptop(env, project, "cancel", name)
    assert cancelled.returncode == 0, cancelled.stderr
    wait_state(env, project, name, lambda s: s["state"] == "CANCELLED", "CANCELLED", 120)


def test_a_sweep_from_the_laptop_resubmits_only_its_failed_point(laptop_env, project):
    env = laptop_env
    code = ("import os, sys\n"
            "once = os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'failed-once')\n"
            "if sys.argv[1] == '2' and not os.path.exists(once):\n"
            "    open(once, 'w').close(); sys.exit(3)\n"
            "print('point', sys.argv[1], 'done')")
    name = submitted(laptop(env, project, "submit", *SRUN_1, "--name", "sw", "--sweep", "lr=1,2,3",
                            "--", "python3", "-c", code, "{lr}"))
    st = wait_state(env, project, name, lambda s: s["state"] in ("COMPLETED", "FAILED"), "end")
    assert st["state"] == "FAILED", st
    refused = laptop(env, project, "resubmit", name)
    assert refused.returncode == 2 and "lr=2: user error" in refused.stderr, refused.stderr
    again = laptop(env, project, "resubmit", "--force", name)
    assert again.returncode == 0 and again.stdout.strip().endswith(": point lr=2 (task 1)"), again.stdout
    st = wait_state(env, project, name, lambda s: s["state"] in ("COMPLETED", "FAILED")
                    and len(s["tasks"]) == 3 and all(t["state"] == "COMPLETED" for t in s["tasks"]), "all points done")
    assert [t["state"] for t in st["tasks"]] == ["COMPLETED"] * 3, st["tasks"]


def _remotes(tmp_path: Path, **override) -> Path:
    table = {"host": "127.0.0.1", "port": int(LOGIN_PORT), "user": LOGIN_USER,
             "identity": str(HOME / ".ssh/id_ed25519"), **override}
    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items())
    path = tmp_path / "remotes.toml"
    path.write_text(f"[cluster]\n{body}")
    return path


def _other_key(tmp_path: Path) -> Path:
    key = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def _case(name: str, tmp_path: Path) -> tuple[dict, str | None]:
    """A remotes table that fails one way, and the laptop's PATH if not the usual one."""
    if name == "unreachable":
        return {"port": 1}, None
    if name == "auth":
        return {"identity": str(_other_key(tmp_path))}, None
    if name == "unknown host key":
        (tmp_path / "known").write_text("")
        return {"known_hosts": str(tmp_path / "known")}, None
    if name == "changed host key":
        key = _other_key(tmp_path)
        pub = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        (tmp_path / "known").write_text(f"[127.0.0.1]:{LOGIN_PORT} {pub}\n")
        return {"known_hosts": str(tmp_path / "known")}, None
    if name == "slurmtrain missing":
        return {"command": "/nonexistent/slurmtrain"}, None
    if name == "other version":
        made = on_login("printf '#!/bin/sh\\necho slurmtrain, version 0.0.1\\n' > old-slurmtrain"
                        " && chmod +x old-slurmtrain")
        assert made.returncode == 0, made.stderr
        return {"command": "~/old-slurmtrain"}, None
    if name == "rsync missing there":
        return {"rsync_path": "/nonexistent/rsync"}, None
    if name == "rsync missing here":
        bare = tmp_path / "bin"
        bare.mkdir()
        for tool in ("slurmtrain", "ssh"):
            (bare / tool).symlink_to(shutil.which(tool, path=laptop_env_path()))
        return {}, str(bare)
    if name == "too large":
        return {"max_upload_mb": 0.001}, None
    raise AssertionError(name)


def laptop_env_path() -> str:
    return os.environ["SLURMTRAIN_LAPTOP_BIN"]


FAILURES = {"unreachable": "cannot reach", "auth": "refused the login", "unknown host key": "is not known here",
            "changed host key": "has changed", "slurmtrain missing": "slurmtrain is not installed on",
            "other version": "is 0.0.1, here", "rsync missing there": "rsync is missing on",
            "rsync missing here": "rsync is not installed here", "too large": "over the remote's max_upload_mb"}


@pytest.mark.parametrize("case", list(FAILURES))
def test_each_failure_is_one_line_exit_2_and_nothing_is_submitted(laptop_env, project, tmp_path, case):
    override, path = _case(case, tmp_path)
    env = dict(laptop_env, SLURMTRAIN_REMOTES=str(_remotes(tmp_path, **override)))
    queued = subprocess.run(["squeue", "-h", "-u", LOGIN_USER, "-o", "%i"], capture_output=True, text=True).stdout
    runs = on_login("ls slurmtrain/runs 2>/dev/null").stdout
    proc = laptop(env, project, "submit", *SRUN_1, "--name", "never", "--", "true", remote="cluster", path=path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmtrain: error: ") and FAILURES[case] in lines[0], lines
    assert subprocess.run(["squeue", "-h", "-u", LOGIN_USER, "-o", "%i"], capture_output=True,
                          text=True).stdout == queued
    assert on_login("ls slurmtrain/runs 2>/dev/null").stdout == runs
