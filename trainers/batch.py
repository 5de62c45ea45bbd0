"""Turn trajectories into training sequences and pad them into tensors.

A trajectory's turns chain into token sequences (``Trajectory.segments``: one, unless the context cap
dropped old turns). The episode return goes on the last generated token of the trajectory's last
segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Sample:
    ids: list[int]
    generated: list[int]  # 1 where the model generated the token
    group: int  # prompt group in the batch
    trajectory: int  # index of the trajectory in the batch
    episode_return: float
    last: bool  # the trajectory's last segment (carries the reward)


def trajectory_samples(traj, index: int) -> list[Sample]:
    segments = traj.segments()
    return [Sample(seg.ids, seg.generated, traj.group, index, traj.episode_return, last=(n == len(segments) - 1))
            for n, seg in enumerate(segments)]


@dataclass
class Batch:
    ids: torch.Tensor  # (B, T) right-padded
    attention: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T-1): ids[:, 1:]
    mask: torch.Tensor  # (B, T-1): 1 where the target token was generated
    rewards: torch.Tensor  # (B, T-1): the episode return on the last generated token of last segments


def collate(samples: list[Sample], pad_id: int) -> Batch:
    T = max(len(s.ids) for s in samples)
    B = len(samples)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention = torch.zeros((B, T), dtype=torch.long)
    generated = torch.zeros((B, T), dtype=torch.float32)
    for b, s in enumerate(samples):
        ids[b, :len(s.ids)] = torch.tensor(s.ids)
        attention[b, :len(s.ids)] = 1
        generated[b, :len(s.ids)] = torch.tensor(s.generated, dtype=torch.float32)
    mask = generated[:, 1:]
    rewards = torch.zeros_like(mask)
    for b, s in enumerate(samples):
        positions = mask[b].nonzero()
        if s.last and len(positions):
            rewards[b, positions[-1, 0]] = s.episode_return
    return Batch(ids, attention, ids[:, 1:], mask, rewards)
