"""Data-parallel helpers: process-group start-up under torchrun and small all-gathers.

Each rank rolls out its own prompt groups (seeds offset by ``RANK_SEED_STRIDE``); the filter ranks the
groups of all ranks together (``all_gather_rows``), and loss normalisers are summed (``all_reduce``).
"""

from __future__ import annotations

import os

import numpy as np
import torch

RANK_SEED_STRIDE = 1_000_003  # rank r's env seeds start at seed + r * stride


def init_distributed() -> tuple[int, int]:
    """(rank, world size). Under torchrun (WORLD_SIZE > 1) the process group is started here:
    NCCL on GPUs, gloo on CPUs."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_gather_rows(array: np.ndarray, world: int) -> np.ndarray:
    """Rows of every rank's equally shaped array, rank order."""
    if world == 1:
        return array
    import torch.distributed as dist

    parts = [None] * world
    dist.all_gather_object(parts, array)
    return np.concatenate(parts)


def all_reduce(values: list[int], world: int) -> list[int]:
    """Sums of the first values and the max of the last across ranks."""
    if world == 1:
        return values
    import torch.distributed as dist

    parts = [None] * world
    dist.all_gather_object(parts, values)
    return [sum(p[i] for p in parts) for i in range(len(values) - 1)] + [max(p[-1] for p in parts)]


def broadcast(value, world: int):
    """Rank 0's ``value`` on every rank (a picklable object)."""
    if world == 1:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
