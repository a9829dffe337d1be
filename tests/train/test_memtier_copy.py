"""The copy into node memory runs beside the training loop (slurmtrain/train/memtier.py): the
loop waits only for the state to be taken; the next copy, a restore or the end waits for the
write; a failed write is raised in the loop. One process, gloo."""

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


def test_a_copy_that_fails_is_raised_in_the_loop_at_the_next_copy(tier, monkeypatch):
    def full(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tier, "_write", full)
    tier.keep(5, {"step": 5})  # returns: the write fails in the copy's thread
    with pytest.raises(OSError, match="No space left"):
        tier.keep(6, {"step": 6})


def test_the_newest_two_whole_steps_are_kept(tier):
    for step in (1, 2, 3):
        tier.keep(step, {"step": step})
    tier.finish()
    assert sorted(s for s, _, _ in tier._held()) == [2, 3]
    tier.clear()
    assert not tier.dir.exists()
