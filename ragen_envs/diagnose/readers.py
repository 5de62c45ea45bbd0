"""Runs on disk as one flat list of ``Record``s, whatever wrote them, for ``ragen diagnose``.

This project's two formats (``read_records`` tells them apart by the path and the first line; the dumps of
RAGEN, verl and TRL have readers of their own, ``read_ragen``, ``read_verl``, ``read_trl``):

- a run folder of this project's trainer: ``RUN/rollouts/iteration-N.jsonl`` (``save_rollouts_steps``),
  or one trajectory file (``ragen eval --save``, read as step 0). Each episode gives one record: its
  first turn's prompt ids as the model saw them, that turn's reasoning, the episode return as reward,
  ``Trajectory.group`` as group and the iteration as step;
- a generic JSONL file, one JSON object a line: ``prompt`` (text as the model read it), ``reasoning``
  (text) or ``response`` (a reply, its reasoning read with ``read_reasoning``: ``<think>...</think>``
  unless a ``pattern`` is given), ``reward`` (a number), ``group`` (the samples of one prompt share it),
  ``step`` (an integer) and optionally ``turn`` (an integer, 0 when left out).

Every problem with the input is a ValueError (FileNotFoundError for a missing path) with one line that
names the file and what is wrong; ``usable_steps`` says which steps can be diagnosed at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ragen_envs.diagnose.texts import read_reasoning

GENERIC_FIELDS = ("prompt", "reward", "group", "step")  # and "reasoning" or "response"; "turn" is optional
# readers of other frameworks' dumps (modules here), asked in this order: RAGEN's trainer validation dump
# has verl's fields, so RAGEN's reader (which refuses it, saying why) comes first
FOREIGN = ("read_ragen", "read_verl", "read_trl")


@dataclass
class Record:
    """One sampled episode (or turn) of a run: what the diagnosis scores."""

    step: int  # training step or iteration
    turn: int  # the turn within the episode (0: the first)
    prompt: str  # the prompt as the model read it ("" when prompt_ids hold it)
    reasoning: str  # the reasoning Z ("" = none: left out of the scoring)
    reward: float  # the episode's return
    group: object  # samples of one prompt share a group id
    prompt_ids: list[int] = field(default_factory=list)  # the prompt's token ids, when the run kept them


def read_records(path: str | Path, pattern: str | None = None, tokenizer=None, load_tokenizer=None,
                 reward: str | None = None) -> tuple[str, list[Record]]:
    """(the format's name, the records) of a run folder, a trajectory file, a generic JSONL file, or another
    framework's dump (``FOREIGN``: RAGEN's, verl's, TRL's; see each reader's module docstring). ``pattern``
    is ``read_reasoning``'s, for replies. ``tokenizer`` renders a dump's conversations with its chat template
    (RAGEN's, TRL's); ``load_tokenizer``, a function of no arguments, is called for one only when such a
    dump is read without it. ``reward`` names a dump's reward field where it has several (RAGEN: a metadata
    key; TRL: reward columns, comma-separated)."""
    import importlib
    import inspect

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    from ragen_envs.agent.trajectory import iteration_of, saved_iterations

    files = saved_iterations(path) if path.is_dir() else []
    if files:
        return "run folder", [r for f in files for r in _run_records(f, iteration_of(f))]
    for name in FOREIGN:
        reader = importlib.import_module(f"ragen_envs.diagnose.{name}")
        if reader.matches(path):
            if tokenizer is None and load_tokenizer is not None and getattr(reader, "TEMPLATED", False):
                tokenizer = load_tokenizer()
            if reward and "reward" not in inspect.signature(reader.read).parameters:
                raise ValueError(f"{path}: a {reader.FORMAT} has one reward per sample: no reward field to choose")
            return reader.FORMAT, reader.read(path, pattern, tokenizer, **({"reward": reward} if reward else {}))
    if path.is_dir():
        raise ValueError(f"{path}: unknown format: a folder with neither rollouts/iteration-N.jsonl (a run folder "
                         "needs the trainer's save_rollouts_steps) nor RAGEN's, verl's or TRL's dumps")
    first = _first_object(path)
    if "turns" in first and "messages" in first:
        return "trajectory file", _run_records(path, 0)
    if "prompt" in first:
        return "generic JSONL", _generic_records(path, pattern)
    raise ValueError(f"{path}: unknown format: neither a run folder, a trajectory file nor generic JSONL (lines "
                     f"with {', '.join(GENERIC_FIELDS)} and reasoning or response); its first line has "
                     f"{', '.join(sorted(first)) or 'no fields'}")


def usable_steps(records: list[Record]) -> list[int]:
    """The steps that can be diagnosed: at least two groups with a non-empty reasoning (MI compares
    prompts). A ValueError in one line when no step can."""
    steps = sorted({r.step for r in records})
    usable = [s for s in steps if len({r.group for r in records if r.step == s and r.reasoning}) >= 2]
    if not usable:
        raise ValueError(f"no step can be diagnosed: each of the {len(steps)} steps has fewer than two groups "
                         "(prompts) with a non-empty reasoning; MI compares a reasoning's own prompt with others")
    return usable


def first_object(path: Path) -> dict | None:
    """The first non-empty line of a text file as a JSON object, None when it is not one (the readers of
    each format recognise a file by it)."""
    try:
        with Path(path).open(encoding="utf-8") as f:
            line = next((line for line in f if line.strip()), "")
    except UnicodeDecodeError:
        return None
    return json_object(line)


def _first_object(path: Path) -> dict:
    """The first non-empty line of a file, as a JSON object."""
    data = first_object(path)
    if data is None:
        raise ValueError(f"{path}: unknown format: its first line is not a JSON object (a generic JSONL file "
                         f"has one a line, with {', '.join(GENERIC_FIELDS)} and reasoning or response)")
    return data


def json_object(line: str) -> dict | None:
    """A line's JSON object, None when it holds none."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _run_records(path: Path, step: int) -> list[Record]:
    """One record per episode of a trajectory file: its first turn."""
    from ragen_envs.agent.trajectory import load_jsonl

    return [Record(step, 0, "", t.turns[0].reasoning or "", float(t.episode_return), t.group,
                   list(t.turns[0].prompt_ids))
            for t in load_jsonl(path) if t.turns]


def _generic_records(path: Path, pattern: str | None) -> list[Record]:
    out = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                out.append(generic_record(line, pattern, f"{path}: line {number}"))
    return out


def generic_record(line: str, pattern: str | None, where: str) -> Record:
    """One generic JSONL line as a Record; a ValueError naming ``where`` for anything wrong with it."""
    data = json_object(line)
    if data is None:
        raise ValueError(f"{where} is not a JSON object")
    if "group" not in data:
        raise ValueError(f"{where} has no 'group': the samples of one prompt must share a group id (the MI and "
                         "the reward statistics compare groups)")
    missing = [name for name in GENERIC_FIELDS if name not in data]
    if missing or not ("reasoning" in data or "response" in data):
        missing += [] if ("reasoning" in data or "response" in data) else ["reasoning or response"]
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    reasoning = data["reasoning"] if "reasoning" in data else read_reasoning(str(data["response"]), pattern)
    checks = {"prompt": isinstance(data["prompt"], str), "reasoning": isinstance(reasoning, str),
              "reward": isinstance(data["reward"], (int, float)) and not isinstance(data["reward"], bool),
              "step": _is_int(data["step"]), "turn": _is_int(data.get("turn", 0)),
              "group": isinstance(data["group"], (str, int)) and not isinstance(data["group"], bool)}
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        raise ValueError(f"{where}: field '{wrong[0]}' has the wrong type (prompt and reasoning are text, reward a "
                         "number, step and turn integers, group a string or an integer)")
    return Record(data["step"], data.get("turn", 0), data["prompt"], reasoning or "", float(data["reward"]),
                  data["group"])


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
