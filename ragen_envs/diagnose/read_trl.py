"""The completions TRL's ``GRPOTrainer`` logs, as ``Record``s for ``ragen diagnose``.

With ``GRPOConfig(log_completions=True)`` the trainer writes, at each logging step,
``<output_dir>/completions/completions_<step>.parquet`` (read at TRL 1.16): one row per sampled completion of
the generation batches of that logging window (at most one generation batch: TRL keeps that many rows),
with the columns ``step`` (the optimizer step), ``prompt`` (a string, or the conversation as a list of
``{"role", "content"}`` messages), ``completion`` (a string, or the assistant's messages), one number per
reward function (named after it), any extra columns reward functions logged, and ``advantage``.

- PATH is the run's output folder, its ``completions/`` folder or one such file.
- The step is the ``step`` column. The prompt is the text the model read: a conversational prompt goes
  through ``tokenizer``'s chat template with the generation prompt, as TRL renders it (a tokenizer is then
  required; pass the trained model's); a string prompt is used as it is. The reasoning is read from the
  completion (its assistant messages' content) with ``read_reasoning``: ``<think>...</think>``, or
  ``pattern``; ``prefilled`` when the prompt opened the block.
- The reward is the sum of the reward columns: by default every numeric column but ``step`` and
  ``advantage`` (TRL's default weights are 1; NaN, a function's "not applicable", counts 0); name them
  with ``reward`` (comma-separated) when extra columns are numbers too or the weights differ.
- TRL keeps no group id: the group of a row is its prompt within its step (GRPOTrainer samples
  ``num_generations`` completions of each prompt).

Reading parquet needs pandas and pyarrow (TRL's dependencies). Every problem is a ValueError in one line
naming the file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ragen_envs.diagnose.readers import Record
from ragen_envs.diagnose.texts import read_reasoning

FORMAT = "TRL completions"
TEMPLATED = True  # its prompts are conversations: rendered with the scoring tokenizer's chat template
NAME = re.compile(r"completions_\d+\.parquet$")
NOT_REWARDS = ("step", "advantage")


def files(path: str | Path) -> list[Path]:
    """The completions files of a TRL output folder, its ``completions/`` folder or one file, by step."""
    path = Path(path)
    if path.is_file():
        return [path] if NAME.search(path.name) else []
    folder = path / "completions" if (path / "completions").is_dir() else path
    return sorted(p for p in folder.glob("completions_*.parquet") if NAME.search(p.name)) if folder.is_dir() else []


def matches(path: str | Path) -> bool:
    """True for a folder holding TRL's completions files, or one such file."""
    return bool(files(path))


def read(path: str | Path, pattern: str | None = None, tokenizer=None, reward: str | None = None,
         prefilled: bool = False) -> list[Record]:
    """The records of every completions file under ``path`` (see the module docstring)."""
    try:
        import pandas as pd
    except ImportError:
        raise ValueError("reading TRL's completions (parquet) needs pandas and pyarrow: pip install pandas "
                         "pyarrow") from None
    records = []
    for file in files(path):
        try:
            table = pd.read_parquet(file)
        except Exception as error:  # a broken or foreign parquet file: say which
            raise ValueError(f"{file}: not readable as TRL's completions table ({str(error).splitlines()[0]})") \
                from None
        columns = [c.strip() for c in reward.split(",")] if reward else None
        records += _records(file, table, pattern, tokenizer, columns, prefilled)
    return records


def _records(file: Path, table, pattern, tokenizer, reward_columns, prefilled) -> list[Record]:
    missing = [c for c in ("step", "prompt", "completion") if c not in table.columns]
    if missing:
        raise ValueError(f"{file}: not TRL's completions table: no {', '.join(missing)} column")
    numeric = [c for c in table.columns if c not in NOT_REWARDS and table[c].dtype.kind in "fiub"]
    columns = reward_columns or numeric
    unknown = [c for c in columns if c not in table.columns]
    if unknown or not columns:
        raise ValueError(f"{file}: no reward column {', '.join(unknown) or '(none is numeric)'}; its columns: "
                         f"{', '.join(map(str, table.columns))}")
    out = []
    for row in table.to_dict("records"):
        prompt = _prompt(row["prompt"], tokenizer, file)
        reward = sum(0.0 if _nan(row[c]) else float(row[c]) for c in columns)
        reasoning = read_reasoning(_completion(row["completion"]), pattern, prefilled)
        step = int(row["step"])
        out.append(Record(step, 0, prompt, reasoning, reward, f"{step}:{prompt}"))
    return out


def _messages(value) -> list[dict] | None:
    """A conversation as a list of dicts (parquet gives lists back as arrays), None for a string."""
    if isinstance(value, str):
        return None
    return [dict(m) for m in list(value)]


def _prompt(value, tokenizer, file: Path) -> str:
    messages = _messages(value)
    if messages is None:
        return value
    if tokenizer is None:
        raise ValueError(f"{file}: conversational prompts: the chat template is needed to rebuild what the model "
                         "read; give the trained model's tokenizer (ragen diagnose --model or --tokenizer)")
    messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _completion(value) -> str:
    messages = _messages(value)
    if messages is None:
        return value
    return "".join(str(m.get("content") or "") for m in messages if m.get("role") == "assistant")


def _nan(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
