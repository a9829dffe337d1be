"""The process group: from torchrun's environment, or a one-process group without it.

Under torchrun (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set) the group comes from the
environment. Started plainly (``python -m slurmtrain.train``) the trainer still runs the
same FSDP2/DCP code on a group of one, made from an in-memory store (no port needed).
GPUs use NCCL for tensors and gloo for CPU-side collectives (barriers, object broadcast,
background checkpoint saves); CPU-only machines use gloo for everything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    device: torch.device
    mesh: DeviceMesh


def env_rank() -> int:
    """This process's rank before any group exists (for messages printed early)."""
    return int(os.environ.get("RANK", "0"))


def env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_world() -> World:
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "cpu:gloo,cuda:nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    size = dist.get_world_size()
    mesh = init_device_mesh(device.type, (size,))
    return World(rank=dist.get_rank(), size=size, device=device, mesh=mesh)


def close_world(together: bool = True) -> None:
    """Tear the group down. A peer that already left can make this raise; at the end of a
    run that is noise, not news (the run's outcome is decided), so it is not reported.
    ``together=False`` (leaving on an error) skips the barrier, which peers still inside
    another collective would never reach."""
    if dist.is_initialized():
        try:
            # Leave together: a rank that tears gloo down while a peer still finishes
            # its last write (rank 0's checkpoint marker) can abort that peer.
            if together:
                dist.barrier()
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
