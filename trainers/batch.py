"""Turn trajectories into training sequences and pad them into tensors.

A trajectory's turns chain into one token sequence: each turn's prompt extends the previous prompt
and reply (the rollout runner keeps prompts in token space), so the sequence is the last prompt
plus the last reply, with the generated tokens marked. Where the context cap dropped old turns the
chain breaks and a new sequence (segment) starts. The episode return goes on the last generated
token of the trajectory's last segment.
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
    segments: list[tuple[list[int], list[int]]] = []
    for turn in traj.turns:
        ids, gen = segments[-1] if segments else (None, None)
        if ids is not None and turn.prompt_ids[:len(ids)] == ids:
            env = turn.prompt_ids[len(ids):]
            ids.extend(env + turn.response_ids)
            gen.extend([0] * len(env) + [1] * len(turn.response_ids))
        else:
            segments.append((list(turn.prompt_ids) + list(turn.response_ids),
                             [0] * len(turn.prompt_ids) + [1] * len(turn.response_ids)))
    return [Sample(ids, gen, traj.group, index, traj.episode_return, last=(n == len(segments) - 1))
            for n, (ids, gen) in enumerate(segments)]


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
