"""The same recipe and seed start from the same weights on any layout: a parameter's initial
numbers depend on the seed, its name and its full shape only (``model.init_parameters``).

Step-0 weights (``debug.stop_at_step = 0`` saves them as ``step_0``) are compared bitwise
across 1, 2 and 4 processes under FSDP2, 2 pipeline stages x 2, and DeepSpeed ZeRO-3 on 2;
then tiny-demo's first 10 losses on 1 stage x 4 and on 2 stages x 2 agree to 1e-5.
"""

from __future__ import annotations

import pytest

from trainer_util import env, losses, rank_exit_codes, setup_run, show, train

pytestmark = [pytest.mark.torch, pytest.mark.slow]
torch = pytest.importorskip("torch")

LAYOUTS = {  # name -> (processes, --set values)
    "1 process": (1, []),
    "2 processes": (2, []),
    "4 processes": (4, []),
    "2 stages x 2": (4, ["pipeline.stages=2"]),
    "ZeRO-3 on 2": (2, ["train.engine=deepspeed", "deepspeed.config=zero3"]),
}


def step0_weights(tmp_path, name: str) -> dict:
    from slurmtrain.train.engines import load_consolidated

    nproc, sets = LAYOUTS[name]
    work = tmp_path / name.replace(" ", "_")
    recipe = setup_run(work, steps=5)
    args = ["--recipe", str(recipe), "--run-dir", "run", "--set", "debug.stop_at_step=0"]
    for value in sets:
        args += ["--set", value]
    proc = train(args, work, nproc=nproc)
    assert rank_exit_codes(proc) == {75}, show(proc)
    assert (work / "run" / "checkpoints" / "step_0" / "COMPLETE").is_file(), show(proc)
    return load_consolidated(work / "run")[1]


def test_step0_weights_are_bitwise_equal_on_every_layout(tmp_path):
    pytest.importorskip("deepspeed")
    reference = step0_weights(tmp_path, "1 process")
    assert reference and all(v.abs().sum() > 0 for k, v in reference.items() if "norm" not in k)
    for name in list(LAYOUTS)[1:]:
        got = step0_weights(tmp_path, name)
        assert sorted(got) == sorted(reference), name
        differ = [k for k in reference if not torch.equal(got[k].float(), reference[k].float())]
        assert not differ, f"{name}: {differ} differ from one process's"


def test_tiny_demo_losses_agree_between_one_stage_by_4_and_two_stages_by_2(tmp_path):
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir()
    made = subprocess.run([sys.executable, "-m", "slurmtrain", "demo-corpus", "--max-mb", "0.3"],
                          cwd=work, capture_output=True, text=True, env=env())
    assert made.returncode == 0, made.stderr
    runs = {}
    for name, sets in (("1x4", []), ("2x2", ["pipeline.stages=2"])):
        args = ["--recipe", "tiny-demo", "--run-dir", name, "--set", "train.steps=10",
                "--set", "train.log_steps=1", "--set", "train.save_steps=0"]
        for value in sets:
            args += ["--set", value]
        proc = train(args, work, nproc=4)
        assert proc.returncode == 0, show(proc)
        runs[name] = losses(work / name)
    assert sorted(runs["1x4"]) == list(range(1, 11))
    for step, loss in runs["1x4"].items():
        other = runs["2x2"][step]
        assert abs(other - loss) <= 1e-5 * abs(loss), (step, loss, other, runs)
