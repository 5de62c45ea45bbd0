"""Rollout records: one ``Trajectory`` per episode, one ``Turn`` per model reply; JSONL in and out.

Images (a visual env's observations) are arrays in memory; in JSON a trajectory keeps each image once,
as a PNG data URI under its digest (``"images"``), and its messages and turns name them by digest."""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections import defaultdict
from dataclasses import MISSING, asdict, dataclass, field, fields
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
    grounded: float | None = None  # the env's facts its reasoning states right net of wrong (None: no facts)

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
        """A trajectory from its JSON (``to_dict``'s inverse). Every field is type-checked first: a
        ValueError names the first that is missing, unknown or of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"a saved trajectory is a JSON object, got {_shown(data)}")
        check_fields(data, TRAJECTORY_FIELDS, cls, "")
        for k, turn in enumerate(data.get("turns", []), start=1):
            check_fields(turn, TURN_FIELDS, Turn, f"turn {k} (field 'turns'): ")
        data = dict(data)
        images = _images(data.pop("images", {}))
        data["messages"] = vision.from_json(data["messages"], _known(images, "messages"))
        turns = [_turn(t, _known(images, f"turn {k}")) for k, t in enumerate(data.pop("turns", []), start=1)]
        return cls(**data, turns=turns)


def _turn(data: dict, images: dict) -> Turn:
    """A saved turn, its image keys replaced by the images."""
    return Turn(**{**data, "images": [images[key] for key in data.get("images", [])]})


# -- what a saved trajectory's fields must be ------------------------------------------------------------
# Checked on load: a hand-written or damaged file fails naming its line and field, before its values reach
# code that assumes their types (the report prints them into HTML).

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str(value) -> bool:
    return isinstance(value, str)


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _list_of(check):
    return lambda value: isinstance(value, list) and all(check(x) for x in value)


def _or_none(check):
    return lambda value: value is None or check(value)


def _is_part(part) -> bool:
    """A message part as saved: text, or an image named by its key in the trajectory's ``images``."""
    return isinstance(part, dict) and set(part) <= {"type", "text", "image"} and (
        (part.get("type") == "text" and _is_str(part.get("text")) and "image" not in part)
        or (part.get("type") == "image" and _is_str(part.get("image")) and "text" not in part))


def _is_message(message) -> bool:
    return isinstance(message, dict) and _is_str(message.get("role")) and \
        (_is_str(message.get("content")) or _list_of(_is_part)(message.get("content")))


INTS, NUMBERS, STRINGS = (_list_of(_is_int), "a list of integers"), (_list_of(_is_number), "a list of numbers"), \
    (_list_of(_is_str), "a list of strings")
INT, NUMBER, STRING, BOOL = (_is_int, "an integer"), (_is_number, "a number"), (_is_str, "a string"), \
    (_is_bool, "true or false")

#: field -> (check, what it must be, in words)
TURN_FIELDS = {
    "prompt_ids": INTS, "response_ids": INTS, "logprobs": NUMBERS, "response": STRING,
    "reasoning": (_or_none(_is_str), "a string or null"), "actions": STRINGS, "reward": NUMBER, "format_ok": BOOL,
    "finish_reason": STRING, "think_start": (_or_none(_is_int), "an integer or null"),
    "think_end": (_or_none(_is_int), "an integer or null"), "messages_dropped": INT,
    "entropies": (_or_none(_list_of(_is_number)), "a list of numbers or null"),
    "images": (_list_of(_is_str), "a list of image keys"), "grounded": (_or_none(_is_number), "a number or null"),
}
TRAJECTORY_FIELDS = {
    "env_id": STRING, "group": INT, "seed": INT,
    "messages": (_list_of(_is_message), 'a list of messages ({"role": text, "content": text or a list of '
                                        '{"type": "text", "text": ...} and {"type": "image", "image": key}})'),
    "turns": (_list_of(lambda t: isinstance(t, dict)), "a list of turn objects"), "episode_return": NUMBER,
    "success": BOOL, "context_overflow": BOOL, "transition_seed": (_or_none(_is_int), "an integer or null"),
    "env_kwargs": (lambda v: isinstance(v, dict), "an object"),
    "images": (lambda v: isinstance(v, dict) and all(_is_str(x) for x in v.values()), "an object of data URIs"),
}
MAX_IMAGE_PIXELS = 4096 * 4096  # a saved board is far smaller; a bigger "image" is a decompression bomb
# all the images of one file together (192 MB decoded; a visual run's 128 episodes of 10 boards hold about
# 12M): a small PNG repeated under many keys or episodes must not decode into gigabytes
MAX_FILE_PIXELS = 64 * 1024 * 1024


def _shown(value) -> str:
    """``value`` for an error message, cut short (a hostile file's values can be huge)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_fields(data: dict, schema: dict, cls: type, where: str) -> None:
    """A ValueError (starting with ``where``) naming the first field of ``data`` that is missing (a field of
    dataclass ``cls`` without a default), unknown or not of its type in ``schema`` (``TURN_FIELDS``,
    ``TRAJECTORY_FIELDS``)."""
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
               and f.name not in data]
    if missing:
        raise ValueError(f"{where}missing field {missing[0]!r}")
    unknown = sorted(set(data) - set(schema))
    if unknown:
        raise ValueError(f"{where}unknown field {_shown(unknown[0])}")
    for name, value in data.items():
        check, wanted = schema[name]
        if not check(value):
            raise ValueError(f"{where}field {name!r} must be {wanted}, got {_shown(value)}")


def _images(uris: dict) -> dict:
    """The images of an episode's ``images`` field (key -> data URI), their sizes checked before any is
    decoded: each, and all together (``MAX_FILE_PIXELS``)."""
    total = image_pixels(uris)
    if total > MAX_FILE_PIXELS:
        raise ValueError(f"field 'images': {total} pixels in all, over {MAX_FILE_PIXELS}")
    return {key: _image(key, uri) for key, uri in uris.items()}


def image_pixels(uris) -> int:
    """The pixels of all the PNGs of an ``images`` field (key -> data URI), from their headers; 0 for a
    field that is no such object (its type check says so)."""
    if not isinstance(uris, dict) or not all(isinstance(u, str) for u in uris.values()):
        return 0
    return sum(_png_pixels(key, uri) for key, uri in uris.items())


def _png_pixels(key: str, uri: str) -> int:
    """The pixels of the PNG a data URI holds, read from its header: a ValueError unless it is one of at most
    ``MAX_IMAGE_PIXELS``."""
    data = b""
    if uri.startswith(vision.DATA_URI):
        try:
            data = base64.b64decode(uri[len(vision.DATA_URI):], validate=True)
        except binascii.Error:
            pass
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        raise ValueError(f"field 'images': {_shown(key)} is not a PNG data URI")
    width, height = struct.unpack(">II", data[16:24])
    if width * height > MAX_IMAGE_PIXELS:
        raise ValueError(f"field 'images': {_shown(key)} is {width}x{height}, over {MAX_IMAGE_PIXELS} pixels")
    return width * height


def _image(key: str, uri: str):
    """The image a saved data URI holds (``_png_pixels`` checked it first)."""
    try:
        return vision.from_data_uri(uri)
    except (OSError, ValueError, SyntaxError) as error:  # PIL's errors for a damaged PNG
        raise ValueError(f"field 'images': {_shown(key)} is not a readable PNG ({error})") from None


class _known(dict):
    """The images by key, where a key that the file's ``images`` lacks is a clear error."""

    def __init__(self, images: dict, where: str):
        super().__init__(images)
        self.where = where

    def __missing__(self, key):
        raise ValueError(f"{self.where}: image {_shown(key)} is not in field 'images'")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that k samples drawn without replacement from n, c of which succeeded, hold a success:
    1 - C(n-c, k) / C(n, k), the unbiased pass@k estimator from n >= k samples (Chen et al., 2021). At k = n
    it is 1 when any of the n succeeded: RAGEN's pass@k, k its group size (es_manager.py)."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at(trajectories: list[Trajectory], ks: Iterable[int] | None = None) -> dict[str, float]:
    """``{"pass@k": ...}`` for each k of ``ks``: ``pass_at_k`` of each group of samples from one initial
    state (the same env, group and seed), averaged over the groups. ``ks`` None: the smallest group's size
    alone, RAGEN's pass@k (the share of groups with a success); {} where that is 1 (pass@1 is the success
    rate). A k larger than a group is a ValueError naming the group size."""
    groups = defaultdict(list)
    for t in trajectories:
        groups[(t.env_id, t.group, t.seed)].append(bool(t.success))
    if not groups:
        return {}
    size = min(len(won) for won in groups.values())
    if ks is None:
        ks = [size] if size > 1 else []
    out = {}
    for k in ks:
        if not 0 < k <= size:
            raise ValueError(f"pass@{k} needs groups of at least {k} samples; these have {size} (--group-size)")
        out[f"pass@{k}"] = sum(pass_at_k(len(won), sum(won), k) for won in groups.values()) / len(groups)
    return out


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Episodes, success rate, return mean and std, format validity, turns, actions played per turn and
    response tokens per turn; grounding (the state facts the turns' reasonings state right, net of those
    they state wrong: ``chat_env.grounding``) where the envs have facts; RAGEN's pass@k, k the group size,
    where groups hold more than one sample (``pass_at``)."""
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
    return {**out, **pass_at(trajectories)}


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
    if not folder.is_dir():
        return []
    # only N of digits: another file matching the pattern (iteration-x.jsonl) is not the trainer's
    return sorted((p for p in folder.glob("iteration-*.jsonl") if p.stem[len("iteration-"):].isdigit()),
                  key=iteration_of)


MAX_FILE_BYTES = 4 << 30  # a rollouts file larger than this is not one a run writes


class TrajectoryFileError(ValueError):
    """A file that does not hold saved trajectories; the message names the file, the line and the field."""


def load_jsonl(path: str | Path) -> list[Trajectory]:
    """The trajectories of a JSONL file (``save_jsonl``'s), each line's fields type-checked: a
    ``TrajectoryFileError`` names the file, the line and the field of the first that is wrong."""
    out, number = [], 0
    if not Path(path).is_file():  # a link to /dev/zero or a pipe would be read without end
        raise TrajectoryFileError(f"{path} is not a regular file")
    if Path(path).stat().st_size > MAX_FILE_BYTES:
        raise TrajectoryFileError(f"{path} is over {MAX_FILE_BYTES >> 30} GiB: not a rollouts file this viewer reads")
    try:
        with Path(path).open(encoding="utf-8") as f:
            pixels = 0
            for number, line in enumerate(f, start=1):
                if line.strip():
                    record = json.loads(line)
                    pixels += image_pixels(record.get("images")) if isinstance(record, dict) else 0
                    if pixels > MAX_FILE_PIXELS:
                        raise ValueError(f"field 'images': over {MAX_FILE_PIXELS} pixels in the file so far")
                    out.append(Trajectory.from_dict(record))
    except (ValueError, RecursionError) as error:  # JSON, a field, or text that is not UTF-8 (a ValueError too)
        raise TrajectoryFileError(f"{path} does not hold saved trajectories: line {number}: {error}") from None
    return out


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
