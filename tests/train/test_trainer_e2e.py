"""The trainer end to end on CPU: two ranks with torchrun's environment (gloo), the same FSDP2 and DCP
code as on GPUs. Each run takes a few seconds, most of it starting Python and torch."""

from __future__ import annotations

import json

import pytest

from trainer_util import events, fsdp2_reference, losses, rank_exit_codes, records, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """20 steps on two ranks without interruption: the reference run (one per session,
    shared with the DeepSpeed and shard tests)."""
    return fsdp2_reference(tmp_path_factory)


def test_loss_falls_on_a_learnable_corpus(straight):
    run_dir, stdout = straight
    loss = losses(run_dir)
    assert sorted(loss) == list(range(1, 21))
    assert loss[20] < loss[1] - 2.0, loss
    evals = {r["step"]: r["eval_loss"] for r in records(run_dir) if "eval_loss" in r}
    assert set(evals) == {10, 20} and evals[20] < evals[10]
    first = next(r for r in records(run_dir) if "loss" in r)
    assert {"lr", "grad_norm", "tokens_per_s", "samples_per_s", "step_time", "mfu",
            "peak_mem"} <= set(first) and first["mfu"] is None  # CPU: no MFU
    # The first log line says how big the model is; only rank 0 logs.
    assert "parameters" in stdout.splitlines()[0]
    assert "[rank1]" not in stdout
    assert events(run_dir)[-2:] == [("checkpoint_saved", 20), ("finished", 20)]


def test_resume_is_exact(straight, tmp_path):
    """Stopped at step 10, while the background save of step 8 is still being written, and
    started again: the stop waited for that save, the same loss at every step and bitwise
    the same final weights as the uninterrupted run."""
    from slurmtrain.train.engines import load_consolidated
    ref_dir, _ = straight
    recipe = setup_run(tmp_path, steps=20, save_steps=8)
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    first = train(args + ["--set", "debug.stop_at_step=10", "--set", "debug.slow_save_at_step=8"], tmp_path,
                  nproc=2)
    # Each rank exits 75 ("stopped after checkpoint"); the launcher (torchrun or spawn_ranks.py) terminates
    # those still tearing down when the first one leaves, so some may show SIGTERM instead.
    assert 75 in rank_exit_codes(first) <= {75, -15}, show(first)
    assert events(tmp_path / "run")[-3:] == [("checkpoint_saved", 8), ("checkpoint_saved", 10), ("stopped", 10)]
    saved = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
             if '"checkpoint_saved"' in x]
    assert saved[0]["seconds"] >= 15 > saved[0]["stall"], saved  # written in the background, 15 s late
    assert all((tmp_path / "run" / "checkpoints" / f"step_{s}" / "COMPLETE").is_file() for s in (8, 10))
    second = train(args, tmp_path, nproc=2)
    assert second.returncode == 0, show(second)
    assert ("resumed", 10) in events(tmp_path / "run")
    assert losses(tmp_path / "run") == losses(ref_dir)
    ref_args, ref = load_consolidated(ref_dir)
    args2, got = load_consolidated(tmp_path / "run")
    assert args2 == ref_args and sorted(got) == sorted(ref)
    for name in ref:
        assert torch.equal(got[name], ref[name]), name


def test_killed_during_save_resumes_from_the_checkpoint_before(tmp_path):
    recipe = setup_run(tmp_path, steps=12, save_steps=4)
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    killed = train(args + ["--set", "debug.kill_in_save_at_step=8"], tmp_path, nproc=2)
    assert killed.returncode != 0, show(killed)
    step8 = tmp_path / "run" / "checkpoints" / "step_8"
    assert step8.is_dir() and not (step8 / "COMPLETE").exists()
    assert any(p.suffix == ".distcp" for p in step8.iterdir())  # shards were written
    again = train(args, tmp_path, nproc=2)
    assert again.returncode == 0, show(again)
    assert f"skipping checkpoint {step8}: incomplete" in again.stdout
    assert [e for e in events(tmp_path / "run") if e[0] in ("resumed", "finished")] == [
        ("resumed", 4), ("finished", 12)]
    assert (step8 / "COMPLETE").exists()  # saved again, whole this time


def test_stop_file_saves_and_exits_75(tmp_path):
    recipe = setup_run(tmp_path, steps=50)
    stop = tmp_path / "stop-requested"
    stop.touch()
    proc = train(["--recipe", str(recipe), "--run-dir", "run"], tmp_path,
                 SLURMTRAIN_STOP_FILE=str(stop))
    assert proc.returncode == 75, show(proc)
    assert (tmp_path / "run" / "checkpoints" / "step_1" / "COMPLETE").exists()
    assert events(tmp_path / "run") == [("checkpoint_saved", 1), ("stopped", 1)]


@pytest.mark.parametrize("how", ["stop_at_step", "stop_file"])
def test_stop_after_the_last_step_finishes(tmp_path, how):
    """A stop agreed after the last step finishes the run (exit 0, `finished`) instead of
    stopping it (exit 75), which would cost a requeue that only finds the run done."""
    recipe = setup_run(tmp_path, steps=3)
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    if how == "stop_at_step":
        proc = train(args + ["--set", "debug.stop_at_step=3"], tmp_path)
    else:  # the file exists from the start: every step boundary sees it, the last one too
        stop = tmp_path / "stop-requested"
        stop.touch()
        proc = train(args + ["--train-steps", "1"], tmp_path, SLURMTRAIN_STOP_FILE=str(stop))
    last = 3 if how == "stop_at_step" else 1
    assert proc.returncode == 0, show(proc)
    assert events(tmp_path / "run") == [("checkpoint_saved", last), ("finished", last)]
    assert (tmp_path / "run" / "checkpoints" / f"step_{last}" / "COMPLETE").exists()
    assert "after the last step: finishing" in proc.stdout + proc.stderr


def test_paced_steps_last_at_least_step_seconds(tmp_path):
    """debug.step_seconds: a test's faults get wall time between the steps, not CPU."""
    recipe = setup_run(tmp_path, steps=2)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--log-steps", "1", "--set", "debug.step_seconds=0.5"],
                 tmp_path)
    assert proc.returncode == 0, show(proc)
    assert [r["step"] for r in records(tmp_path / "run")] == [1, 2]
    assert all(r["step_time"] >= 0.5 for r in records(tmp_path / "run")), records(tmp_path / "run")


def test_stop_signal_saves_and_exits_75(tmp_path):
    import signal
    import subprocess

    from trainer_util import command, env
    recipe = setup_run(tmp_path, steps=100000)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(command(["--recipe", str(recipe), "--run-dir", "run"]),
                            cwd=tmp_path, env=env(SLURMTRAIN_STOP_SIGNAL="USR1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        import waiting
        waiting.wait_for("the first metrics record", lambda: records(run_dir) or proc.poll() is not None,
                         lambda: waiting.files_fingerprint(tmp_path), poll=0.2)
        proc.send_signal(signal.SIGUSR1)  # the signal named in $SLURMTRAIN_STOP_SIGNAL
        out, _ = waiting.communicate(proc, "the trainer after SIGUSR1", [tmp_path])
    finally:
        proc.kill()
    assert proc.returncode == 75, out
    name, step = events(run_dir)[-1]
    assert name == "stopped" and (run_dir / "checkpoints" / f"step_{step}" / "COMPLETE").exists()


def test_failure_is_an_event_and_not_75(tmp_path):
    recipe = setup_run(tmp_path, steps=10)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--set", "debug.fail_at_step=3"],
                 tmp_path)
    assert proc.returncode == 1, show(proc)
    assert "RuntimeError: debug.fail_at_step = 3" in proc.stderr
    from slurmtrain import events as ev
    last = ev.read(tmp_path / "run")[-1]
    assert last["event"] == "train_error" and last["step"] == 3 and "fail_at_step" in last["error"]


def test_init_from_a_hugging_face_checkpoint(straight, tmp_path):
    """Export the reference run as HF, start a new run from it: its first loss is the
    trained model's, far below a fresh start's."""
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.hf import export_hf
    ref_dir, _ = straight
    args, state = load_consolidated(ref_dir)
    export_hf(state, args, tmp_path / "hf")
    recipe = setup_run(tmp_path, steps=1)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--init-ckpt", "hf"], tmp_path)
    assert proc.returncode == 0, show(proc)
    assert "initial weights from hf" in proc.stdout
    ref = losses(ref_dir)
    assert losses(tmp_path / "run")[1] < (ref[1] + ref[20]) / 2


def test_a_run_made_longer_at_its_resume_follows_the_new_schedule_and_says_so(tmp_path):
    """train.steps raised (and lr lowered) between two starts: the checkpoint brings back the
    old schedule, the recipe's new one is followed from the step reached, said in the log and
    the history (the learning rate once kept to the old length, unsaid)."""
    from slurmtrain.runs import classify
    from slurmtrain.train.optim import WarmupCosine
    recipe = setup_run(tmp_path, steps=6, save_steps=3)
    args = ["--recipe", str(recipe), "--run-dir", "run", "--log-steps", "1"]
    first = train(args + ["--set", "debug.stop_at_step=3"], tmp_path)
    assert 75 in rank_exit_codes(first), show(first)
    second = train(args + ["--set", "train.steps=12", "--set", "train.lr=0.002"], tmp_path)
    assert second.returncode == 0, show(second)
    out = second.stdout + second.stderr
    assert "resuming with the recipe's optimizer settings, changed since step_3 was saved (train.steps 6 -> 12, " \
           "train.lr 0.003 -> 0.002)" in out, out
    lr = {r["step"]: r["lr"] for r in records(tmp_path / "run") if "lr" in r}
    warmup, min_lr = 3, 3e-4
    new = WarmupCosine(warmup, 12, min_lr / 0.002)
    assert sorted(lr) == list(range(1, 13))
    for step in range(4, 13):  # the lr logged at a step is the one its update used
        assert lr[step] == pytest.approx(0.002 * new(step - 1), rel=1e-6), (step, lr)
    said = [line for line in classify.history(tmp_path / "run") if "resumed" in line]
    assert said and said[-1].endswith("; the learning rate follows the recipe's new settings from here "
                                      "(train.steps 6 -> 12, train.lr 0.003 -> 0.002)"), said
