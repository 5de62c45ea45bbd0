"""Data-parallel helpers: process-group start-up under torchrun, small all-gathers, and FSDP2.

Each rank rolls out its own prompt groups (seeds offset by ``RANK_SEED_STRIDE``); the filter ranks the
groups of all ranks together (``all_gather_rows``), and loss normalisers are summed (``all_reduce``).
With ``data_parallel="fsdp"`` the model is sharded (``shard``), gathered whole for the phases that run
a different number of forwards per rank (``gathered``), and saved and resumed as full tensors.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
import torch

from trainers import lora

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
    """Rows of every rank's array (the same columns; any number of rows), rank order."""
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


def shard(root, model, cpu_offload: bool = False, bf16: bool = False) -> None:
    """FSDP2: each decoder layer of ``model``, then ``root`` (the module the update calls: the trainer's
    scorer, holding the model), sharded over the ranks with ``fully_shard``; the optimizer built
    afterwards holds only this rank's shard of every parameter and its state. The rest of the model
    (embeddings, final norm, a tied output layer) is the root's unit, so the update's forward, which
    calls the model's trunk and output layer apart, still gathers and reduces it.
    ``cpu_offload``: the shards, their gradients and optimizer state live in CPU memory (CPUOffloadPolicy).
    ``bf16``: the gathered weights are bf16 (half the memory and all-gather traffic of fp32 ones) and
    gradients are reduced in fp32 into the fp32 shards (MixedPrecisionPolicy)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"data_parallel='fsdp' shards decoder layers (model.model.layers); "
                         f"{type(model).__name__} has none: use data_parallel='ddp'")
    # pinned host memory speeds the copies to a GPU; without one there is nothing to pin
    policies = {"offload_policy": CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload
                else OffloadPolicy(),
                "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                if bf16 else MixedPrecisionPolicy()}
    for layer in layers:
        fully_shard(layer, **policies)
    fully_shard(root, **policies)


@contextmanager
def gathered(model, sharded: bool):
    """With an FSDP2 model, its full weights on every rank for the block: rollouts, MI scoring and
    no-grad passes run a different number of forwards on each rank, which must not each all-gather.
    A no-op for an unsharded model."""
    if not sharded:
        yield
        return
    modules = [m for m in model.modules() if hasattr(m, "unshard") and hasattr(m, "set_reshard_after_forward")]
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in modules:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)


def _full(value):
    """A DTensor's whole tensor (a collective: every rank calls it in the same order), on the CPU."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        return value
    if value.device.type == "cpu" and torch.cuda.is_available():  # CPU-offloaded shards: NCCL gathers GPU tensors
        value = value.to(torch.cuda.current_device())
    return value.full_tensor().cpu()


def full_weights(model, sharded: bool, merge: bool = True) -> dict:
    """The model's whole weights (for a checkpoint or another engine); with FSDP2 every rank must call it.
    A LoRA model's are merged (base names, W + scale BA) unless ``merge`` is False."""
    state = model.state_dict() if not sharded else {name: _full(value) for name, value in model.state_dict().items()}
    return lora.merged(model, state) if merge and lora.adapted(model) else state


def full_state(model, optimizer, sharded: bool) -> tuple[dict | None, dict]:
    """The full model weights (None: the model's own ``state_dict`` will do) and optimizer state, for a
    checkpoint, in the unsharded optimizer's format. With FSDP2 every rank must call it: shards are
    gathered. A LoRA model's weights stay unmerged: the checkpoint writes its adapter and merges them."""
    if not sharded:
        return None, optimizer.state_dict()
    weights = full_weights(model, sharded, merge=False)
    state = optimizer.state_dict()
    state["state"] = {i: {k: _full(v) for k, v in entry.items()} for i, entry in sorted(state["state"].items())}
    return weights, state


def load_optimizer(optimizer, state: dict, sharded: bool) -> None:
    """Optimizer state saved by ``full_state`` into this rank's optimizer (its shards, with FSDP2)."""
    if sharded:
        from torch.distributed.tensor import DTensor, distribute_tensor

        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = {**state, "state": {
            # on the mesh's device (NCCL's are GPUs), then where the shard lives (the CPU under cpu_offload)
            i: {k: distribute_tensor(v.to(params[i].device_mesh.device_type), params[i].device_mesh,
                                     params[i].placements).to(params[i].device)
                if isinstance(params[i], DTensor) and torch.is_tensor(v) and v.shape == params[i].shape else v
                for k, v in entry.items()}
            for i, entry in state["state"].items()}}
    optimizer.load_state_dict(state)


def distribute(scorer, model, world: int, sharded: bool, device, warm_up, some_unused: bool = False,
               cpu_offload: bool = False, bf16: bool = False):
    """The module the update calls: ``scorer`` itself (one process), DDP-wrapped, or sharded with FSDP2
    (``shard``, with its ``cpu_offload`` and ``bf16``; ``warm_up()`` runs its first forward, which FSDP2
    sets itself up on)."""
    if sharded:
        shard(scorer, model, cpu_offload, bf16)
        with torch.no_grad():
            warm_up()
        scorer.reshard()  # the root stays gathered after a forward; the optimizer must get its shards
        return scorer
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        # some_unused: a vision-language model's vision tower gets no gradient from a micro-batch of text rows
        return DistributedDataParallel(scorer, device_ids=[device.index] if device.type == "cuda" else None,
                                       find_unused_parameters=some_unused)
    return scorer
