"""Checkpoint folders: which ones can be resumed from, and async saves, in one process."""

from __future__ import annotations

import contextlib
import json

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from slurmtrain.train import checkpoint as ck  # noqa: E402


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_incomplete_and_corrupt_checkpoints_are_skipped(tmp_path, caplog):
    root = tmp_path / "checkpoints"
    good = root / "step_5"
    good.mkdir(parents=True)
    torch.distributed.checkpoint.save({"x": torch.ones(3)}, checkpoint_id=str(good), no_dist=True)
    (good / ck.META).write_text(json.dumps({"step": 5}))
    (good / ck.MARKER).write_text("{}")
    broken = root / "step_10"
    broken.mkdir()
    for name in (".metadata", ck.META, ck.MARKER):
        (broken / name).write_text((good / name).read_text() if name != ".metadata" else "")
    (root / "step_15").mkdir()  # killed before anything was marked
    (root / "step_x").mkdir()  # not ours
    with caplog.at_level("WARNING"):
        assert ck.newest_complete(tmp_path) == (5, good)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings[0] == f"skipping checkpoint {root / 'step_15'}: incomplete (no COMPLETE marker: the save was interrupted)"
    assert warnings[1].startswith(f"skipping checkpoint {broken}: corrupt")
    (good / "__0_0.distcp").write_bytes(b"short")
    assert "truncated" in ck.problem_with(good)


def test_async_save_then_load_consolidated(tmp_path, monkeypatch):
    """One process, gloo: the background save's marker is written when it has finished."""
    import torch.distributed as dist

    from dataclasses import asdict

    from slurmtrain.train.distributed import close_world, init_world
    from slurmtrain.train.engines import load_consolidated
    from slurmtrain.train.engines.dcp import DcpState
    from slurmtrain.train.model import Transformer
    from slurmtrain.train.parallelize import parallelize
    from slurmtrain.recipes.presets import get_preset

    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    world = init_world()
    try:
        args = get_preset("tiny")
        with torch.device("meta"):
            model = Transformer(args)
        sharded = parallelize(model, world.mesh, param_dtype=None,
                              activation_checkpointing=True, compile=False)
        assert not sharded  # one rank: FSDP2 would only add copies
        model.to_empty(device="cpu")
        model.init_weights(seed=0)
        optim = torch.optim.AdamW(model.parameters())
        sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: 1.0)

        class Data:
            def state_dict(self):
                return {"consumed": 7}

        state = DcpState(model, optim, sched, async_save=True)
        saver = ck.Checkpointer(tmp_path, state, Data(), {"model_args": asdict(args)},
                                keep_last=1)
        saver.save(1)
        saver.save(2)  # finishes and marks step 1 first, then prunes it (keep_last=1)
        saver.wait()
        assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_2"]
        expected = {k: v.detach().clone() for k, v in model.state_dict().items()}
    finally:
        close_world()
    assert not dist.is_initialized()
    got_args, state = load_consolidated(tmp_path)
    assert got_args == args
    # Activation checkpointing wraps blocks; the saved names are the plain ones.
    assert set(state) == {k.replace("_checkpoint_wrapped_module.", "") for k in expected}
    assert all(torch.equal(state[k.replace("_checkpoint_wrapped_module.", "")], v)
               for k, v in expected.items())


def test_a_resume_with_another_data_recipe_is_said(tmp_path):
    """A run resumed with --set train.global_batch_size=16 or data.max_seq_len=128 went on
    silently, no longer as it would have uninterrupted. A new model is refused; this is said."""
    import json

    from slurmtrain.train.checkpoint import META, data_changes
    saved = {"recipe": {"train": {"global_batch_size": 8, "seed": 0, "lr": 3e-3},
                        "data": {"path": "c.jsonl", "max_seq_len": 64, "seed": 0}}}
    (tmp_path / META).write_text(json.dumps(saved))
    now = json.loads(json.dumps(saved))
    assert data_changes(tmp_path, now) == []
    now["recipe"]["train"].update(global_batch_size=16, lr=1e-3)  # the lr is no data key
    now["recipe"]["data"]["max_seq_len"] = 128
    assert data_changes(tmp_path, now) == ["train.global_batch_size 8 -> 16", "data.max_seq_len 64 -> 128"]
    from slurmtrain.runs.classify import _resumed
    assert _resumed({"step": 120, "seconds": 0.2, "data_changed": "train.global_batch_size 8 -> 16"}).endswith(
        ", with another data recipe than it was saved with (train.global_batch_size 8 -> 16)")


def test_background_saves_reuse_their_host_buffers_and_each_holds_its_own_step(tmp_path, monkeypatch):
    """The state is staged into the same host buffers at every background save (pinned on a
    GPU): each checkpoint still holds the weights and the data position of its own step."""
    from dataclasses import asdict

    from slurmtrain.train.engines import dcp as dcp_mod

    with one_rank_tiny(monkeypatch, lr=0.1) as (args, model, optim, sched):
        consumed = {"n": 0}

        class Data:
            def state_dict(self):
                return {"consumed": consumed["n"]}

        state = dcp_mod.DcpState(model, optim, sched, async_save=True)
        assert isinstance(state._stager, dcp_mod.ReusedStaging) and not state._stager.pin  # no GPU
        saver = ck.Checkpointer(tmp_path, state, Data(), {"model_args": asdict(args)}, keep_last=3)
        expected, buffers = {}, []
        for step in (1, 2, 3):
            if step > 1:  # a step of training between the saves: new weights, AdamW's moments
                model(torch.randint(0, args.vocab_size, (1, 8))).float().mean().backward()
                optim.step()
                optim.zero_grad()
            consumed["n"] = step * 10
            saver.save(step)
            expected[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            buffers.append(state._stager.state_dict_cache)
        saver.wait()
    assert buffers[0] is buffers[1] is buffers[2]  # the same layout: the same buffers
    assert not torch.equal(expected[1]["output.weight"], expected[3]["output.weight"])
    for step, weights in expected.items():
        path = tmp_path / "checkpoints" / f"step_{step}"
        saved = dcp_mod.consolidated(path)
        assert set(saved) == set(weights)
        assert all(torch.equal(saved[k], v) for k, v in weights.items()), step
        train = {"train": {"step": -1, "data": {"consumed": -1}}}
        dcp_mod.dcp.load(train, checkpoint_id=str(path), no_dist=True)
        assert train["train"] == {"step": step, "data": {"consumed": step * 10}}


def test_the_staging_buffers_are_made_again_for_another_layout():
    from slurmtrain.train.engines.dcp import ReusedStaging

    stager = ReusedStaging(pin=False)
    a, b = torch.arange(4.0), torch.ones(3)
    first = stager.stage({"a": a, "n": 1})
    assert torch.equal(first["a"], a) and first["a"].data_ptr() != a.data_ptr() and first["n"] == 1
    a += 1
    again = stager.stage({"a": a, "n": 2})
    assert again["a"].data_ptr() == first["a"].data_ptr() and torch.equal(again["a"], a) and again["n"] == 2
    more = stager.stage({"a": a, "b": b, "n": 3})  # a key more (the moments after a first step)
    assert torch.equal(more["b"], b) and more["a"].data_ptr() != first["a"].data_ptr()
    grown = stager.stage({"a": torch.zeros(6), "b": b, "n": 4})  # a tensor of another shape
    assert grown["a"].shape == (6,) and not grown["a"].any()


def test_staging_goes_on_in_pageable_memory_where_none_can_be_pinned(monkeypatch, caplog):
    from slurmtrain.train.engines import dcp as dcp_mod

    real = dcp_mod._create_cpu_state_dict

    def no_pinned(state, pin_memory=False, share_memory=False):
        if pin_memory:
            raise RuntimeError("CUDA error: out of memory\nmore")
        return real(state, pin_memory=False)

    monkeypatch.setattr(dcp_mod, "_create_cpu_state_dict", no_pinned)
    stager = dcp_mod.ReusedStaging(pin=True)
    a = torch.ones(256, 1024)  # 1 MiB
    staged = stager.stage({"a": a, "n": 1})
    assert torch.equal(staged["a"], a) and stager.pin is False
    assert "could not pin 1 MiB of host memory for the checkpoints' copies (CUDA error: out of memory): using " \
           "pageable memory" in caplog.text


def test_a_run_with_saves_in_its_history_and_none_left_says_it_trains_from_step_0(tmp_path, monkeypatch, caplog):
    from dataclasses import asdict

    from slurmtrain import events
    from slurmtrain.train.engines.dcp import DcpState

    with one_rank_tiny(monkeypatch) as (args, model, optim, sched):
        class Data:
            def state_dict(self):
                return {}

        saver = ck.Checkpointer(tmp_path, DcpState(model, optim, sched, async_save=False), Data(),
                                {"model_args": asdict(args)}, keep_last=1)
        assert saver.resume() == 0 and "no complete checkpoint" not in caplog.text  # a new run: nothing to say
        events.append(tmp_path, "checkpoint_saved", step=150)
        events.append(tmp_path, "checkpoint_saved", step=200)
        assert saver.resume() == 0
    assert (f"no complete checkpoint in {tmp_path / 'checkpoints'}, though this run saved checkpoints up to step 200 "
            "(removed, or purged?): it trains again from step 0") in caplog.text


@contextlib.contextmanager
def one_rank_tiny(monkeypatch, lr: float = 1e-3):
    """The tiny model, AdamW and a constant schedule on a one-process group (gloo)."""
    from slurmtrain.train.distributed import close_world, init_world
    from slurmtrain.train.model import Transformer
    from slurmtrain.recipes.presets import get_preset

    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    init_world()
    try:
        args = get_preset("tiny")
        model = Transformer(args)
        model.init_weights(seed=0)
        optim = torch.optim.AdamW(model.parameters(), lr=lr)
        yield args, model, optim, torch.optim.lr_scheduler.LambdaLR(optim, lambda s: 1.0)
    finally:
        close_world()
