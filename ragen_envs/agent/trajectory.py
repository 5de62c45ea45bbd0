"""Rollout records: one ``Trajectory`` per episode, one ``Turn`` per model reply; JSONL in and out.

Images (a visual env's observations) are arrays in memory; in JSON a trajectory keeps each image once,
as a PNG data URI under its digest (``"images"``), and its messages and turns name them by digest."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterable

from ragen_envs.agent import vision
from ragen_envs.agent.backends.base import TokenPrompt
from ragen_envs.agent.parsing import THINK_CLOSE, THINK_OPEN


@dataclass
class Turn:
    prompt_ids: list[int]  # exactly the tokens the model was given
    response_ids: list[int]  # the tokens it generated
    logprobs: list[float]  # sampling log-probability of each generated token
    response: str  # the reply text
    reasoning: str | None  # text inside <think>...</think>, None if absent
    actions: list[str]  # actions played
    reward: float  # env rewards of the turn plus any format penalty
    format_ok: bool
    finish_reason: str  # "stop" or "length"
    # response_ids[think_start:think_end] are the reasoning tokens Z (strictly inside the think
    # tags); prompt_ids + response_ids[:think_start] is the prompt X that conditions them.
    think_start: int | None = None
    think_end: int | None = None
    messages_dropped: int = 0  # oldest messages left out of this prompt to fit the context (0: none)
    entropies: list[float] | None = None  # sampling entropy per generated token (None: not reported)
    images: list = field(default_factory=list)  # the images prompt_ids' placeholders stand for, in order
    grounded: float | None = None  # share of the env's state facts its reasoning states (None: no facts)

    @property
    def reasoning_ids(self) -> list[int]:
        if self.think_start is None:
            return []
        return self.response_ids[self.think_start:self.think_end]

    @property
    def reasoning_prompt_ids(self) -> TokenPrompt:
        """X: the prompt up to and including ``<think>`` (with its images)."""
        start = 0 if self.think_start is None else self.think_start
        return TokenPrompt([*self.prompt_ids, *self.response_ids[:start]], self.images)


@dataclass
class Segment:
    """One token sequence of an episode (see ``Trajectory.segments``)."""

    ids: list[int]
    generated: list[int]  # 1 where the model generated the token, 0 on prompt and env tokens
    logprobs: list[float]  # the sampling log-probability of generated tokens, 0.0 elsewhere
    images: list = field(default_factory=list)  # the images its placeholders stand for, in order
    turns: list[int] = field(default_factory=list)  # the episode's turns it holds, in order
    ends: list[int] = field(default_factory=list)  # per turn: the index in ids of its reply's last token


@dataclass
class Trajectory:
    env_id: str
    group: int  # index of the prompt group within its batch; a group shares one initial state
    seed: int  # the env seed of the group
    messages: list[dict[str, str]]  # the whole conversation
    turns: list[Turn] = field(default_factory=list)
    episode_return: float = 0.0
    success: bool = False
    context_overflow: bool = False  # ended because even the latest turn alone exceeded the context
    # With env_id and seed, these replay the episode: reset(seed, options={"transition_seed": ...})
    # on gym.make(env_id, **env_kwargs), then each turn's actions.
    transition_seed: int | None = None
    env_kwargs: dict = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def segments(self) -> list[Segment]:
        """The episode as token sequences. Each turn's prompt extends the previous prompt and reply
        (the runner keeps prompts in token space), so the turns chain into one sequence: the last
        prompt plus the last reply, the generated tokens marked. Where the context cap dropped old
        turns the chain breaks and a new segment starts."""
        out: list[Segment] = []
        for k, turn in enumerate(self.turns):
            last = out[-1] if out else None
            if last is not None and turn.prompt_ids[:len(last.ids)] == last.ids:
                env = turn.prompt_ids[len(last.ids):]
            else:
                last, env = Segment([], [], []), list(turn.prompt_ids)
                out.append(last)
            last.ids.extend([*env, *turn.response_ids])
            last.images = list(turn.images)  # the latest prompt shows every image of the chain
            last.generated.extend([0] * len(env) + [1] * len(turn.response_ids))
            last.logprobs.extend([0.0] * len(env) + list(turn.logprobs))
            last.turns.append(k)
            last.ends.append(len(last.ids) - 1)
        return out

    @property
    def format_valid(self) -> float:
        """Share of turns whose reply had the required format."""
        return sum(t.format_ok for t in self.turns) / len(self.turns) if self.turns else 0.0

    @property
    def response_length(self) -> float:
        """Mean generated tokens per turn."""
        return sum(len(t.response_ids) for t in self.turns) / len(self.turns) if self.turns else 0.0

    def to_dict(self) -> dict:
        data, store = asdict(self), {}
        data["messages"] = vision.to_json(data["messages"], store)
        for turn in data["turns"]:
            turn["images"] = [vision.stored(image, store) for image in turn["images"]]
        if store:
            data["images"] = store
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Trajectory":
        data = dict(data)
        images = {key: vision.from_data_uri(uri) for key, uri in data.pop("images", {}).items()}
        data["messages"] = vision.from_json(data.get("messages", []), images)
        turns = [Turn(**{**t, "images": [images[key] for key in t.get("images", [])]})
                 for t in data.pop("turns", [])]
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown trajectory fields {sorted(unknown)}")
        return cls(**data, turns=turns)


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Episodes, success rate, return mean and std, format validity, turns, actions played per turn and
    response tokens per turn; grounding (the share of state facts the turns' reasonings state) where the
    envs have facts."""
    n = len(trajectories)
    returns = [t.episode_return for t in trajectories]
    mean = sum(returns) / n
    grounded = [turn.grounded for t in trajectories for turn in t.turns if turn.grounded is not None]
    turns = sum(t.num_turns for t in trajectories)
    out = {
        "episodes": n,
        "success": sum(t.success for t in trajectories) / n,
        "return_mean": mean,
        "return_std": (sum((r - mean) ** 2 for r in returns) / n) ** 0.5,
        "format_valid": sum(t.format_valid for t in trajectories) / n,
        "turns": turns / n,
        "actions_per_turn": sum(len(turn.actions) for t in trajectories for turn in t.turns) / max(turns, 1),
        "response_length": sum(t.response_length for t in trajectories) / n,
    }
    if grounded:
        out["grounding"] = sum(grounded) / len(grounded)
    return out


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    """Write ``trajectories`` a line each; a file interrupted mid-write never takes the name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)


def rollouts_path(run: str | Path, iteration: int) -> Path:
    """Where a run folder keeps an iteration's trajectories (the trainer's ``save_rollouts_steps``)."""
    return Path(run) / "rollouts" / f"iteration-{iteration}.jsonl"


def iteration_of(path: Path) -> int:
    """The iteration of a ``rollouts_path`` file."""
    return int(path.stem.split("-")[1])


def saved_iterations(run: str | Path) -> list[Path]:
    """A run folder's rollouts/iteration-N.jsonl files, by iteration."""
    folder = Path(run) / "rollouts"
    return sorted(folder.glob("iteration-*.jsonl"), key=iteration_of) if folder.is_dir() else []


def load_jsonl(path: str | Path) -> list[Trajectory]:
    with Path(path).open(encoding="utf-8") as f:
        return [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]


def think_span(tokenizer, response_ids: list[int], prefilled: bool = False) -> tuple[int, int] | tuple[None, None]:
    """Token indices [start, end) of the text strictly between the first ``<think>`` and the first
    ``</think>`` after it; tokens straddling a tag are left out of the span. ``prefilled``: the prompt
    ended with ``<think>``, so the reasoning starts with the reply."""
    pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in response_ids]
    text = "".join(pieces)
    open_at = text.find(THINK_OPEN)
    if prefilled:
        open_at = -len(THINK_OPEN)
    if open_at < 0 and not prefilled:
        return None, None
    close_at = text.find(THINK_CLOSE, open_at + len(THINK_OPEN))
    if close_at < 0:
        return None, None
    body_start = open_at + len(THINK_OPEN)
    start = end = None
    pos = 0
    for i, piece in enumerate(pieces):
        if start is None and pos >= body_start:
            start = i
        if pos + len(piece) <= close_at:
            end = i + 1
        pos += len(piece)
    if start is None or end is None or end < start:
        start = end = start if start is not None else len(pieces)
    return start, end
