"""Rollouts written by RAGEN (github.com/mll-lab-nu/RAGEN), as ``Record``s for ``ragen diagnose``.

What RAGEN writes (read at its commit 20daedc, April 2026, with verl 0.6.1 as its submodule):

- Its evaluation (``python -m ragen.llm_agent.agent_proxy --config-name eval``) saves the rollouts as a
  pickle of verl's ``DataProto``, by default ``results/eval/val_rollouts_<YYYYmmdd_HHMMSS>.pkl``. With
  ``output.format=jsonl`` (or ``output.save_jsonl_backup=true``) it writes JSONL instead (or as well),
  and RAGEN's ``scripts/convert_to_jsonl.py`` turns a pickle into the same JSONL. This JSONL is what is
  read here. One line per trajectory (episode)::

      {"custom_id": "traj_<i>",
       "messages": [{"role": "user", "content": <the env's first state>},
                    {"role": "assistant", "content": <the model's reply>},
                    {"role": "user", "content": <the next state> + " (reward: <r>)"}, ...,
                    {"role": "user", "content": <the last state>}],
       "metadata": {"env_id": int, "group_id": int, "num_turns": int, "total_reward": float,
                    "success": bool, "<env tag>/<metric>": number, ..., "entropy": float, "n_tokens": int}}

  where r, left out when 0, is the reward the reply to that state earned (the first reply's is never
  shown). ``group_id`` is RAGEN's env group: the trajectories of one group start from the same env seed (the
  same prompt). ``es_manager.val.group_size`` sets the group size: 16 in RAGEN's ``config/eval.yaml``,
  1 in ``config/base.yaml`` (the trainer's validation).
- A pickle is never opened (unpickling runs code): ``refuse_pickle`` raises a line that says how to run
  RAGEN's converter. A pickle is told by its suffix (``.pkl``, ``.pickle``) or its first bytes.
- RAGEN's trainer can also dump JSONL through verl (``trainer.validation_data_dir`` and
  ``trainer.rollout_data_dir``: ``<dir>/<step>.jsonl`` with ``input``, ``output``, ``score``, ``step``).
  In its validation dump ``input`` is always empty and ``output`` is the whole conversation decoded with
  the special tokens dropped, with no group id: neither the prompts nor the groups can be recovered, so
  such a file is recognised and refused with a line pointing to the eval's JSONL. (At commit 20daedc
  neither trainer dump can be written: the call lacks verl 0.6.1's ``gts`` argument and the training
  batch has no ``prompts``.)

How a line becomes records:

- One ``Record`` per reply (assistant message), ``turn`` 0, 1, ... in order; ``ragen diagnose`` scores
  the earliest turn of each step. The reasoning is read from the reply with ``read_reasoning``:
  ``<think>...</think>`` (RAGEN's own tags; it ends the prompt with ``<think>`` and puts it back in front
  of the reply), or ``pattern`` when given.
- The prompt is the conversation before that reply: with ``tokenizer`` (a Hugging Face tokenizer), its
  chat template with the generation prompt; without, each message as ``"<role>:\\n<content>\\n\\n"``
  followed by ``"assistant:\\n"``. The " (reward: r)" after the state the reply answers is dropped: it
  is the reward that very reply earned, which the model had not seen. The prompt is not exactly the text
  the model read: the dump keeps only the env's states, not RAGEN's system prompt, its per-turn
  instructions ("Turn 2: State: ... You have N actions left. Always output: ...") nor its "Reward:"
  messages; the replies are the raw ones (RAGEN fed back a cleaned copy); a chat template may add its own
  default system message; the replies were decoded with the special tokens dropped. Within a group the
  prompts are alike and between groups they differ by the env's state, which is what the MI proxies
  compare.
- The reward is the trajectory's ``metadata[reward]``, ``total_reward`` by default, for every turn.
  At commit 20daedc RAGEN writes 0.0 there whatever the return (its sum over a torch tensor fails and the
  error is swallowed) and ``success`` is always false (its metrics are named ``<env tag>/success``):
  ``read`` warns when every ``total_reward`` is 0.0; ``reward="<env tag>/success"`` (e.g.
  ``CoordSokoban/success``) reads the success instead.
- The group is ``metadata["group_id"]``. The step is 0 for a file; for a folder, each RAGEN JSONL in it
  is one step, in file-name order (RAGEN's timestamped names sort by time).
- A dump with one sample a group (RAGEN's validation setting) is read as any other: the MI proxies are
  computed, the reward statistics skipped ("every group has one sample").

Every problem with the input is a ValueError in one line that names the file (and the line) and what is
wrong; FileNotFoundError for a missing path.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from ragen_envs.diagnose.readers import Record, first_object, json_object
from ragen_envs.diagnose.texts import read_reasoning

FORMAT = "RAGEN rollout dump"
TEMPLATED = True  # its prompts are conversations: rendered with the scoring tokenizer's chat template
PICKLE_SUFFIXES = (".pkl", ".pickle")
CONVERTER = "scripts/convert_to_jsonl.py"  # in a RAGEN checkout; it needs verl to load the pickle
REWARD_NOTE = re.compile(r" \(reward: [^()]*\)\Z")  # what RAGEN appends to a state whose reply earned a reward


def matches(path: str | Path) -> bool:
    """True for RAGEN's eval JSONL (its first line has ``custom_id``, ``messages`` and ``metadata`` with a
    ``group_id``), RAGEN's trainer validation dump, a pickle (so that ``read`` can say how to convert it),
    or a folder holding any of these; False for anything else."""
    path = Path(path)
    if path.is_dir():
        return any(_kind(p) for p in _files(path))
    return path.is_file() and _kind(path) is not None


def refuse_pickle(path: str | Path) -> None:
    """Raise a one-line ValueError naming RAGEN's converter when ``path`` is a pickle; do nothing otherwise.
    The file is not unpickled: only its suffix and first bytes are looked at."""
    path = Path(path)
    if path.is_file() and _is_pickle(path):
        raise ValueError(f"{path}: a pickle (RAGEN's eval saves its rollouts as val_rollouts_<time>.pkl) is not "
                         f"read, since unpickling runs code; convert it to JSONL in a RAGEN checkout with verl "
                         f"installed: python {CONVERTER} --input {path} --output {path.with_suffix('.jsonl')} "
                         "(or run RAGEN's eval with output.format=jsonl), then diagnose the .jsonl")


def read(path: str | Path, pattern: str | None = None, tokenizer=None,
         reward: str = "total_reward") -> list[Record]:
    """The records of a RAGEN eval JSONL file, or of a folder of them (one step a file), as the module
    docstring says. ``pattern`` is ``read_reasoning``'s; ``tokenizer``, if given, renders each prompt with
    its chat template; ``reward`` names the metadata number used as the reward."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    files = _files(path) if path.is_dir() else [path]
    kinds = {f: _kind(f) for f in files}
    dumps = [f for f in files if kinds[f] == "eval"]
    if not dumps:
        for f in files:
            refuse_pickle(f)
            if kinds[f] == "trainer":
                raise ValueError(f"{f}: RAGEN's trainer validation dump (trainer.validation_data_dir) has an empty "
                                 "input, the whole conversation as output and no group id, so prompts and groups "
                                 "cannot be recovered; diagnose the JSONL of RAGEN's eval instead (python -m "
                                 "ragen.llm_agent.agent_proxy --config-name eval output.format=jsonl)")
        what = "a folder without" if path.is_dir() else "not"
        raise ValueError(f"{path}: {what} a RAGEN rollout dump (JSONL lines with custom_id, messages and metadata "
                         "with a group_id, as RAGEN's eval or scripts/convert_to_jsonl.py write)")
    records = []
    for step, f in enumerate(dumps):
        with f.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    records += _trajectory(line, step, pattern, tokenizer, reward, f"{f}: line {number}")
    if reward == "total_reward" and records and all(r.reward == 0.0 for r in records):
        warnings.warn(f"{path}: every trajectory's total_reward is 0.0, as RAGEN (at 20daedc) writes it whatever "
                      "the return; reward statistics would be meaningless: pass reward='<env tag>/success' "
                      "(ragen diagnose --reward)",
                      stacklevel=2)
    return records


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file())


def _is_pickle(path: Path) -> bool:
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    with path.open("rb") as f:
        head = f.read(2)
    # pickle protocols 2 to 5 open with PROTO (0x80) and the protocol number; JSON text never starts so
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _kind(path: Path) -> str | None:
    """"pickle", "eval" (RAGEN's eval JSONL), "trainer" (its trainer's validation dump) or None."""
    if _is_pickle(path):
        return "pickle"
    first = first_object(path)
    if first is None:
        return None
    if {"custom_id", "messages"} <= first.keys() and isinstance(first.get("metadata"), dict) \
            and "group_id" in first["metadata"]:
        return "eval"
    # verl's dump function writes these keys; only RAGEN's validation leaves the input empty
    if {"input", "output", "score", "step"} <= first.keys() and first["input"] == "":
        return "trainer"
    return None


def _trajectory(line: str, step: int, pattern: str | None, tokenizer, reward: str, where: str) -> list[Record]:
    data = json_object(line)
    if data is None:
        raise ValueError(f"{where} is not a JSON object")
    messages, meta = data.get("messages"), data.get("metadata")
    if not isinstance(messages, list) or not isinstance(meta, dict):
        raise ValueError(f"{where} lacks 'messages' (a list) or 'metadata' (an object), which RAGEN writes on "
                         "every line")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
               for m in messages):
        raise ValueError(f"{where}: every message must have a text 'role' and 'content'")
    group, value = meta.get("group_id"), meta.get(reward)
    if not isinstance(group, int) or isinstance(group, bool):
        raise ValueError(f"{where}: metadata 'group_id' must be an integer (RAGEN's env group)")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{where}: metadata '{reward}' must be a number (the reward); it is {value!r}")
    messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    replies = [n for n, m in enumerate(messages) if m["role"] == "assistant"]
    return [Record(step, turn, _prompt(messages[:n], tokenizer), read_reasoning(messages[n]["content"], pattern),
                   float(value), group)
            for turn, n in enumerate(replies)]


def _prompt(messages: list[dict], tokenizer) -> str:
    """The conversation before a reply, without the reward RAGEN wrote after the state it answers."""
    if messages and messages[-1]["role"] == "user":
        messages = messages[:-1] + [{"role": "user", "content": REWARD_NOTE.sub("", messages[-1]["content"])}]
    if tokenizer is not None:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "".join(f"{m['role']}:\n{m['content']}\n\n" for m in messages) + "assistant:\n"
