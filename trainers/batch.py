"""Turn trajectories into training sequences, pad them into tensors, cut them into micro-batches and
minibatches.

A trajectory's turns chain into token sequences (``Trajectory.segments``: one, unless the context cap
or window dropped old turns), each with the images its placeholder tokens stand for (a visual env's).
The episode return goes on the last generated token of the trajectory's last segment; with turn scores
(RAGEN's use_turn_scores) each turn's reward goes on its reply's last token instead. ``Layout`` names
where each sample sits among the micro-batches; ``minibatches`` is RAGEN's fixed-size minibatch rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Sample:
    ids: list[int]
    generated: list[int]  # 1 where the model generated the token
    group: int  # prompt group in the batch
    trajectory: int  # index of the trajectory in the batch
    episode_return: float
    last: bool  # the trajectory's last segment (carries the reward)
    images: list = field(default_factory=list)  # the images its placeholders stand for, in order
    # (index in ids, reward) of each reward it carries; None: the episode return on its last generated
    # token if it is the last segment
    rewards: list[tuple[int, float]] | None = None


def trajectory_samples(traj, index: int, episode_return: float | None = None,
                       turn_scores: bool = False) -> list[Sample]:
    """``traj``'s samples, one per segment. ``episode_return``: the return to train on (default: the
    trajectory's; normalised rewards differ); ``turn_scores``: each turn's reward at its own reply."""
    segments = traj.segments()
    ret = traj.episode_return if episode_return is None else episode_return
    return [Sample(seg.ids, seg.generated, traj.group, index, ret, last=(n == len(segments) - 1), images=seg.images,
                   rewards=[(end, traj.turns[k].reward) for k, end in zip(seg.turns, seg.ends)] if turn_scores
                   else None) for n, seg in enumerate(segments)]


@dataclass
class Batch:
    ids: torch.Tensor  # (B, T) right-padded
    attention: torch.Tensor  # (B, T)
    targets: torch.Tensor  # (B, T-1): ids[:, 1:]
    mask: torch.Tensor  # (B, T-1): 1 where the target token was generated
    rewards: torch.Tensor  # (B, T-1): the episode return on the last generated token of last segments
    images: list = field(default_factory=list)  # every row's images, the rows in order


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
        positions = mask[b].nonzero()[:, 0]
        if not len(positions):
            continue
        if s.rewards is None:
            if s.last:
                rewards[b, positions[-1]] = s.episode_return
            continue
        for end, reward in s.rewards:  # ids index end is target index end - 1
            before = positions[positions <= end - 1]  # a reply of no token: the last generated token before it
            rewards[b, before[-1] if len(before) else positions[0]] += reward
    return Batch(ids, attention, ids[:, 1:], mask, rewards, [image for s in samples for image in s.images])


@dataclass
class OldPass:
    """One micro-batch's no-grad pass before the update: per-token tensors of shape (rows, T-1), on the CPU."""
    logp: torch.Tensor  # the policy's log-probabilities of the tokens taken
    entropy: torch.Tensor  # the policy's token entropy
    values: torch.Tensor | None  # the critic's values (None without a critic)
    ref_logp: torch.Tensor | None = None  # the reference model's log-probabilities (None without one)


@dataclass
class Layout:
    """A batch's samples cut into micro-batches of ``size``: sample i is row ``i % size`` of
    micro-batch ``i // size``. The trainer reads every per-sample tensor through it."""
    samples: list[Sample]
    batches: list[Batch]
    size: int

    @classmethod
    def of(cls, samples: list[Sample], size: int, pad_id: int) -> "Layout":
        return cls(samples, [collate(samples[i:i + size], pad_id) for i in range(0, len(samples), size)], size)

    def locate(self, i: int) -> tuple[int, int]:
        """(micro-batch, row) of sample ``i``."""
        return divmod(i, self.size)

    def mask(self, i: int) -> torch.Tensor:
        b, r = self.locate(i)
        return self.batches[b].mask[r]

    def rewards(self, i: int) -> torch.Tensor:
        b, r = self.locate(i)
        return self.batches[b].rewards[r]

    def stat(self, stats: list[OldPass | None], key: str, i: int) -> torch.Tensor:
        """Sample ``i``'s row of a field of its micro-batch's no-grad pass (``stats[b].<key>``)."""
        b, r = self.locate(i)
        return getattr(stats[b], key)[r]

    def batches_holding(self, indices) -> list[int]:
        return sorted({self.locate(i)[0] for i in indices})


def minibatches(order: list[int], mini_batch_size: int | None, num_minibatches: int, batch_adjust: str,
                generator: torch.Generator) -> list[np.ndarray]:
    """An epoch's minibatches of sample indices. With ``mini_batch_size`` (RAGEN's rule) the kept
    samples are padded with random copies of themselves (or trimmed, ``batch_adjust="delete"``) to a
    multiple of it, so the number of steps follows what the filter kept. Else ``num_minibatches``
    splits of whatever was kept."""
    order = np.array(order, dtype=int)
    if mini_batch_size is None:
        return np.array_split(order, num_minibatches)
    size, remainder = mini_batch_size, len(order) % mini_batch_size
    if remainder and batch_adjust == "delete":
        order = order[:len(order) - remainder]
    elif remainder and len(order):
        missing = size - remainder
        picks = torch.randint(len(order), (missing,), generator=generator) if missing > len(order) \
            else torch.randperm(len(order), generator=generator)[:missing]
        order = np.concatenate([order, order[picks.numpy()]])
    return [order[i:i + size] for i in range(0, len(order), size)]


def update_steps(kept_samples: int, mini_batch_size: int | None, num_minibatches: int, batch_adjust: str) -> int:
    """How many optimizer steps ``minibatches`` makes of ``kept_samples`` per epoch."""
    if mini_batch_size is None:
        return num_minibatches
    if batch_adjust == "copy":
        return -(-kept_samples // mini_batch_size)
    return kept_samples // mini_batch_size
