"""The copy into node memory runs beside the training loop (slurmtrain/train/memtier.py): the
loop waits only for the state to be taken; the next copy, a restore or the end waits for the
write; a write node memory has no room for turns the tier off, any other failure is raised
in the loop. One process, gloo."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


class State:
    """The engine's DcpState as the tier uses it: the local state and its load."""

    def __init__(self):
        self.weight = torch.arange(4.0)

    def local_state(self, client):
        return {"weight": self.weight.clone(), "client": dict(client)}  # a copy, as DcpState's is

    def load_local(self, saved, client):
        self.weight = saved["weight"]
        return saved["client"]


@pytest.fixture
def tier(tmp_path, monkeypatch):
    from slurmtrain.train.distributed import close_world, init_world
    from slurmtrain.train.memtier import MemoryTier

    for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURMTRAIN_MEMORY_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("SLURMD_NODENAME", "a")
    init_world()
    try:
        yield MemoryTier(State(), {"world": 1})
    finally:
        close_world()


def test_the_loop_goes_on_while_the_copy_is_written_and_the_restore_waits_for_it(tier, monkeypatch):
    release, writing = threading.Event(), threading.Event()
    write = tier._write

    def slow_write(*args):
        writing.set()
        assert release.wait(30)
        write(*args)
    monkeypatch.setattr(tier, "_write", slow_write)
    tier.keep(5, {"step": 5})
    assert writing.wait(30)               # the copy's thread is writing ...
    tier.state.weight.add_(100)           # ... while the loop trains on: the copy holds the state as taken
    assert tier._held() == []
    release.set()
    step, from_peer, client = tier.restore({"step": 0}, durable=-1)  # waits for the write
    assert (step, from_peer, client) == (5, [], {"step": 5})
    assert torch.equal(tier.state.weight, torch.arange(4.0))


def test_a_copy_that_cannot_be_written_turns_the_tier_off_and_the_loop_goes_on(tier):
    """Node memory full (a container's small /dev/shm; the trainer on a 64 KiB tmpfs:
    test_memtier_e2e.py): the copy's file cannot be written. No error reaches the loop; the
    tier is off (every rank agrees), nothing half-written stays for a restart to count on, and
    no later copy is tried. Here the write fails for real, and for this test only: a file
    stands where the step's folder goes."""
    tier.dir.mkdir(parents=True)
    (tier.dir / f"step_5-{tier.layout}").write_text("in the way")
    tier.keep(5, {"step": 5})
    tier.finish()  # raises nothing
    step, error = tier.off
    assert step == 5 and "File exists" in error and "MiB to write" in error and "a rank 0: " in error, error
    assert str(tier.dir) in error, error
    assert not list(tier.dir.rglob("*rank*")), list(tier.dir.rglob("*"))  # nothing half-written
    tier.keep(6, {"step": 6})
    tier.finish()
    assert tier._held() == [] and not (tier.dir / f"step_6-{tier.layout}").exists()  # off: no more copies
    assert tier.restore({"step": 0}, durable=-1) is None


def test_any_other_failure_of_a_copy_is_raised_in_the_loop_at_the_next_copy(tier, monkeypatch):
    def broken(*args):
        raise RuntimeError("serialization failed")
    monkeypatch.setattr(tier, "_write", broken)
    tier.keep(5, {"step": 5})  # returns: the copy fails in its thread
    with pytest.raises(RuntimeError, match="serialization failed"):
        tier.keep(6, {"step": 6})


def test_the_newest_two_whole_steps_are_kept(tier):
    for step in (1, 2, 3):
        tier.keep(step, {"step": step})
    tier.finish()
    assert sorted(s for s, _, _ in tier._held()) == [2, 3]
    tier.clear()
    assert not tier.dir.exists()
