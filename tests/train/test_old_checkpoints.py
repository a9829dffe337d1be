"""Checkpoints written before the trainer became one loop over engines still load.

``fixtures/checkpoints-0.x/<engine>/`` holds the step-3 checkpoint of a 6-step run of
:func:`trainer_util.setup_run`'s recipe on two ranks (FSDP2, DeepSpeed ZeRO-1, torch
pipeline of two stages), made by the code before that change (commit 69dc1c7), and the
losses that run logged at steps 4-6. Resuming from it now must log those same losses:
weights, optimizer state, schedule, data position and RNG all came back.

ATen picks its CPU kernels by the processor's instructions (AVX2, AVX-512), and they round
differently (the pipeline's loss at step 4 came out 5.05758810043335 on AVX2,
5.057587623596191 on the default kernels, from the same code and checkpoint). So the losses
are recorded (``record.py`` beside the fixtures, run on the old checkout) and checked with
``ATEN_CPU_CAPABILITY=default``, the kernels every x86 processor runs alike: bit for bit on
the processor they were recorded on, within a millionth on another (the test says why). The
ranks start afresh for it (``fork=False``): the rank server's ATen has chosen its kernels
already.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainer_util import PORTABLE_KERNELS, events, losses, show, train, write_corpus

pytestmark = [pytest.mark.torch, pytest.mark.slow]

FIXTURES = Path(__file__).with_name("fixtures") / "checkpoints-0.x"


@pytest.mark.parametrize("engine", ["fsdp2", "deepspeed", "pipeline"])
def test_a_checkpoint_of_the_earlier_code_resumes_to_the_same_losses(tmp_path, engine):
    if engine == "deepspeed":
        pytest.importorskip("deepspeed")
    fixture = FIXTURES / engine
    write_corpus(tmp_path / "corpus.jsonl")
    shutil.copy(fixture / "recipe.toml", tmp_path / "recipe.toml")
    shutil.copytree(fixture / "checkpoints", tmp_path / "run" / "checkpoints")
    proc = train(["--recipe", "recipe.toml", "--run-dir", "run"], tmp_path, nproc=2, fork=False,
                 ATEN_CPU_CAPABILITY=PORTABLE_KERNELS)
    assert proc.returncode == 0, show(proc)
    assert ("resumed", 3) in events(tmp_path / "run")
    expected = {int(k): v for k, v in json.loads((fixture / "losses_after_resume.json").read_text()).items()}
    # Bit for bit on the processor the losses were recorded on (AMD EPYC, AVX2); within a
    # millionth elsewhere: an Intel Xeon with AVX-512 gave 4.61728048324585 at step 6 for the
    # recorded 4.617280960083008 with the portable ATen kernels, MKL_CBWR=COMPATIBLE and
    # oneDNN held to AVX2 alike. A resume that lost any part of the state (moments, schedule,
    # data position, RNG) is off by far more than that at step 4 already.
    assert losses(tmp_path / "run") == pytest.approx(expected, rel=1e-6, abs=0)
