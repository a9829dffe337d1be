"""The DeepSpeed engine end to end on CPU (gloo, two ranks with torchrun's environment: trainer_util.command): ZeRO-2/3
(and ZeRO-1 under the pipeline engine) train the same losses as FSDP2 from the same seed and batches, resume exactly, and their
checkpoints export to Hugging Face. One run per fixture, shared by the assertions."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from trainer_util import REPO, env, events, fsdp2_reference, losses, rank_exit_codes, records, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

# ZeRO-1 is DeepSpeed's ZeRO-2 optimizer without partitioned gradients, and the pipeline
# engine's runs below (configs/deepspeed/pipeline.json: stage 1) match FSDP2's pipeline.
STAGES = (2, 3)


def _recipe(work, stage: int | None, steps: int = 20, save_steps: int = 0):
    recipe = setup_run(work, steps=steps, save_steps=save_steps)
    if stage is not None:
        text = recipe.read_text().replace("save_steps", 'engine = "deepspeed"\nsave_steps')
        recipe.write_text(text + f'\n[deepspeed]\nconfig = "zero{stage}"\n')
    return recipe


def _straight(factory, stage: int):
    work = factory.mktemp(f"zero{stage}")
    recipe = _recipe(work, stage)
    proc = train(["--recipe", str(recipe), "--run-dir", "run"], work, nproc=2)
    assert proc.returncode == 0, show(proc)
    return work / "run"


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory):
    return fsdp2_reference(tmp_path_factory)[0]  # _recipe(work, None): the same recipe


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    """20 straight steps with each ZeRO stage: compared with FSDP2, with the resumed runs,
    and exported."""
    return {s: _straight(tmp_path_factory, s) for s in STAGES}


@pytest.mark.parametrize("stage", STAGES)
def test_loss_at_every_step_matches_fsdp2(stage, zero_runs, fsdp2):
    """Same weights (same seed), same batches, same AdamW and schedule: the two engines
    differ only in the order fp32 gradients are summed and reduced."""
    run_dir = zero_runs[stage]
    ref, got = losses(fsdp2), losses(run_dir)
    assert sorted(got) == list(range(1, 21)), got
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in ref)
    assert worst <= 1e-4, (stage, worst, got, ref)
    assert got[20] < got[1] - 2.0  # and it learns
    evals = {r["step"]: r["eval_loss"] for r in records(run_dir) if "eval_loss" in r}
    ref_evals = {r["step"]: r["eval_loss"] for r in records(fsdp2) if "eval_loss" in r}
    assert set(evals) == {10, 20} and evals[20] == pytest.approx(ref_evals[20], rel=1e-4)
    first = next(r for r in records(run_dir) if "loss" in r)
    same = next(r for r in records(fsdp2) if "loss" in r)
    assert set(first) == set(same)  # the same metrics.jsonl fields
    assert first["grad_norm"] == pytest.approx(same["grad_norm"], rel=1e-4)
    assert events(run_dir)[-2:] == [("checkpoint_saved", 20), ("finished", 20)]


def test_zero3_export_loads_in_transformers(zero_runs, tmp_path):
    """``slurmtrain export --hf`` gathers ZeRO-3's shards; transformers' logits equal ours
    from the same weights, and the weights equal ZeRO-2's (gathered from other files)."""
    transformers = pytest.importorskip("transformers")
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.model import Transformer
    out = tmp_path / "hf"
    proc = subprocess.run([sys.executable, "-m", "slurmtrain", "export", str(zero_runs[3]),
                           "--hf", str(out)], capture_output=True, text=True, env=env(),
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"from \S+ \(its checkpoint of step \d+\) to ", proc.stdout), proc.stdout  # which step
    args, state = load_consolidated(zero_runs[3])
    _, state2 = load_consolidated(zero_runs[2])
    assert sorted(state) == sorted(state2)
    for name in state:
        torch.testing.assert_close(state[name], state2[name], rtol=1e-4, atol=1e-5)
    model = Transformer(args)
    model.load_state_dict(state, strict=True)
    hf = transformers.LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, args.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (model(tokens) - hf(tokens).logits).abs().max().item()
    assert diff <= 1e-4, diff


def test_killed_during_save_resumes_from_the_checkpoint_before_bitwise(zero_runs, tmp_path):
    """ZeRO-3: rank 0 killed after the shards of step 8, before the marker; the restart
    skips step_8, resumes from step_4 and saves step_8 again, whole; keep_last = 2. From
    step_4 to the end it trains the same losses as 20 straight steps, bit for bit: exact
    resume of the stage that shards the most (one run serves both, each start of the trainer
    costs ~10 CPU-s here; the stop contract with DeepSpeed: tests/survival's preemption)."""
    recipe = _recipe(tmp_path, 3, steps=20, save_steps=4)
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    killed = train(args + ["--set", "debug.kill_in_save_at_step=8"], tmp_path, nproc=2)
    assert killed.returncode != 0, show(killed)
    step8 = tmp_path / "run" / "checkpoints" / "step_8"
    assert step8.is_dir() and not (step8 / "COMPLETE").exists()
    assert any(p.name.endswith("optim_states.pt") for p in step8.iterdir())
    again = train(args, tmp_path, nproc=2)
    assert again.returncode == 0, show(again)
    assert f"skipping checkpoint {step8}: incomplete" in again.stdout
    evs = events(tmp_path / "run")
    assert [e for e in evs if e[0] in ("resumed", "finished")] == [("resumed", 4), ("finished", 20)]
    assert evs.index(("checkpoint_saved", 8)) > evs.index(("resumed", 4))  # saved again, whole
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*"))
    assert kept == ["step_16", "step_20"]
    # every logged loss, the steps 5..8 trained twice included, equals the straight run's
    ref = losses(zero_runs[3])
    logged = [(r["step"], r["loss"]) for r in records(tmp_path / "run") if "loss" in r]
    assert sorted({s for s, _ in logged}) == list(range(1, 21))
    assert all(loss == ref[step] for step, loss in logged), (logged, ref)


@pytest.fixture(scope="module")
def pipe_runs(tmp_path_factory):
    """Two pipeline stages x 2 data-parallel ranks (four processes: every kind of shard, the
    data-parallel reduction too; two processes would repeat a subset at ~60 CPU-s):
    DeepSpeed's pipeline engine, and the FSDP2 engine's (torch-native) pipeline on the same
    recipe."""
    out, nproc = {}, 4
    for engine in ("deepspeed", "fsdp2"):
        work = tmp_path_factory.mktemp(f"pipe-{engine}-{nproc}")
        recipe = _recipe(work, 1)
        recipe.write_text(recipe.read_text().replace('config = "zero1"', 'config = "pipeline"')
                          + "\n[pipeline]\nstages = 2\n")
        proc = train(["--recipe", str(recipe), "--run-dir", "run", "--set",
                      f"train.engine={engine}"], work, nproc=nproc)
        assert proc.returncode == 0, show(proc)
        out[engine] = work / "run"
    out["nproc"], out["recipe"] = nproc, recipe
    return out


def test_pipeline_loss_matches_fsdp2_pipeline_and_exports(pipe_runs, tmp_path):
    ref, got = losses(pipe_runs["fsdp2"]), losses(pipe_runs["deepspeed"])
    assert sorted(got) == list(range(1, 21)), got
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in ref)
    assert worst <= 1e-4, (worst, got, ref)
    from slurmtrain.train.engines import load_consolidated
    args, state = load_consolidated(pipe_runs["deepspeed"])
    _, ref_state = load_consolidated(pipe_runs["fsdp2"])
    assert sorted(state) == sorted(ref_state)
    for name in state:
        torch.testing.assert_close(state[name], ref_state[name], rtol=1e-3, atol=1e-4)
    # The layer files' weights, exported, load in transformers with the same logits.
    transformers = pytest.importorskip("transformers")
    from slurmtrain.train.hf import export_hf
    from slurmtrain.train.model import Transformer
    export_hf(state, args, tmp_path / "hf")
    model = Transformer(args)
    model.load_state_dict(state, strict=True)
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf", torch_dtype=torch.float32)
    tokens = torch.randint(0, args.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (model(tokens) - hf.eval()(tokens).logits).abs().max().item() <= 1e-4


def test_pipeline_stop_and_resume_is_bitwise_equal(pipe_runs, tmp_path):
    """DeepSpeed's pipeline stopped at step 10 and started again: the same losses as 20
    straight steps, bit for bit (2 stages x 2 data-parallel ranks: every kind of shard in
    its checkpoint)."""
    args = ["--recipe", str(pipe_runs["recipe"]), "--run-dir", str(tmp_path / "run"),
            "--set", "train.engine=deepspeed"]
    nproc = pipe_runs["nproc"]
    work = pipe_runs["recipe"].parent  # where the recipe's corpus.jsonl is
    first = train(args + ["--set", "debug.stop_at_step=10"], work, nproc=nproc)
    assert 75 in rank_exit_codes(first) <= {75, -15}, show(first)
    second = train(args, work, nproc=nproc)
    assert second.returncode == 0, show(second)
    assert ("resumed", 10) in events(tmp_path / "run")
    assert losses(tmp_path / "run") == losses(pipe_runs["deepspeed"])


@pytest.mark.parametrize("conf, sets", [
    ("mistral-z2-small-conf.json", ["train.lr=6e-4", "train.weight_decay=0.1",
                                    "train.warmup_steps=10000"]),
    ("hf-auto.json", []),
])
def test_configs_users_have_train(conf, sets, tmp_path):
    """The Mistral guide's ZeRO-2 config (numbers the recipe must agree with, a legacy
    ``cpu_offload`` key) and a Hugging Face all-"auto" one train on two ranks."""
    from pathlib import Path
    recipe = _recipe(tmp_path, 2, steps=3)
    path = Path(__file__).parent / "ds_configs" / conf
    recipe.write_text(recipe.read_text().replace('config = "zero2"', f'config = "{path}"'))
    args = ["--recipe", str(recipe), "--run-dir", "run"]
    for s in sets:
        args += ["--set", s]
    proc = train(args, tmp_path, nproc=2)
    assert proc.returncode == 0, show(proc)
    assert sorted(losses(tmp_path / "run")) == [1, 2, 3]
    assert f"config {path}" in proc.stdout


def test_a_value_deepspeed_itself_refuses_is_one_line_naming_the_file(tmp_path):
    """A key slurmtrain does not check is passed to DeepSpeed; its refusal (a pydantic
    error here) comes out as one line with the file, on one rank, without a traceback."""
    import json
    bad = tmp_path / "bad_ds.json"
    bad.write_text(json.dumps({"zero_optimization": {"stage": 2, "overlap_comm": "sometimes"}}))
    recipe = _recipe(tmp_path, 2, steps=2)
    recipe.write_text(recipe.read_text().replace('config = "zero2"', f'config = "{bad}"'))
    proc = train(["--recipe", str(recipe), "--run-dir", "run"], tmp_path, nproc=1)
    assert proc.returncode == 2, show(proc)
    lines = [l for l in proc.stderr.splitlines() if "DeepSpeed refused the config" in l]
    assert len(lines) == 1 and str(bad) in lines[0] and "overlap_comm" in lines[0], show(proc)
    assert "Traceback" not in proc.stderr, show(proc)


def test_init_from_a_hugging_face_checkpoint(zero_runs, tmp_path):
    """ZeRO-3 started with ``--init-ckpt`` from the Hugging Face export of the trained
    ZeRO-2 run starts where that run ended, not from a fresh model."""
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.hf import export_hf
    args, state = load_consolidated(zero_runs[2])
    export_hf(state, args, tmp_path / "hf")
    recipe = _recipe(tmp_path, 3, steps=2)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--init-ckpt",
                  str(tmp_path / "hf")], tmp_path, nproc=2)
    assert proc.returncode == 0, show(proc)
    assert "initial weights from" in proc.stdout
    trained, fresh = losses(zero_runs[2]), losses(tmp_path / "run")
    assert fresh[1] < trained[1] - 2.0 and abs(fresh[1] - trained[20]) < 0.5, (fresh, trained)
