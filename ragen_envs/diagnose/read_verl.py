"""verl's rollout dumps (``trainer.rollout_data_dir``, or ``validation_data_dir``) as diagnosis ``Record``s.

What verl writes (0.9.1: ``RayPPOTrainer._log_rollout_data``, written by ``_write_generations``): a folder
with one JSON Lines file per training step, ``{step}.jsonl``, one line per sample, with

- ``input``: the prompt's token ids (left padding included) decoded with ``skip_special_tokens=True``;
- ``output``: the response's ids decoded the same way. For a multi-turn agent loop (this project's
  ``ragen_agent`` among them) that is the rest of the episode: replies, env messages and the generation
  prompts between them, as one text;
- ``gts`` (the row's ``reward_model.ground_truth`` or null), ``score`` (the reward summed over tokens),
  ``step`` (the global step), and each reward extra-info column with one value per sample (verl's
  TransferQueue trainer, ``trainer/ppo/v1``, adds its own ``uid`` column; it is not read).

There is no ``uid`` in the classic trainer's dump: the samples of one step that share an input are a
group (ids 0, 1, ... in order of first appearance, per step), so two dataset rows with the same prompt
count as one group. Each line gives one record: turn 0, ``score`` as reward.

**The prompt.** Decoding dropped the chat template's special tokens (for ChatML, ``<|im_start|>`` before
each role and ``<|im_end|>`` after each message), so ``input`` is not the text the model read. With
``tokenizer`` (the model's, whose chat template the run used) the template is re-applied: the input is
parsed into messages by the template's own layout with the special tokens dropped (found by rendering
a probe conversation and decoding it as verl decodes), rendered again with ``apply_chat_template`` (the
generation prompt on), and what followed the generation prompt (an agent loop's prefill, ``<think>``) is
appended. The result is checked: decoded as verl decodes it, it must give back ``input`` exactly, else a
ValueError. Its special tokens are text that the scorer's tokenizer reads as the special ids, so the
diagnosis scores the ids the model read (tested on this project's verl agent loop), except where
(a) a message's own text holds the template's turn header as decoded (for ChatML a line ``user`` or
``assistant`` after a newline), where it is split as a new message, or (b) the prompt was tokenised in
pieces (template, then prefill) that tokenise differently joined. Layouts tried, most messages first: an
optional system message, then up to three user messages with assistant messages between them.

Without a tokenizer the prompt is ``input`` as decoded, so the diagnosis scores it without the template's
special tokens (the role names and the messages' text stay).

**The reasoning** is read from the first reply with ``read_reasoning``: the text up to ``</think>`` when
``input`` ends with ``<think>`` (the prompt's prefill opened the block), else between ``<think>`` and
``</think>``; or ``pattern``. With a tokenizer the first reply is ``output`` up to the template's turn
separator (decoded); without one it is the whole output, and a prefilled reasoning that runs into a later
turn's ``<think>`` counts as none (the first reply never closed its block), while without a prefill the
first ``<think>`` block of the output is read, which may be a later turn's.

Every problem with the input is a ValueError with one line naming the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from ragen_envs.agent.parsing import THINK_OPEN
from ragen_envs.diagnose.readers import Record, first_object, json_object
from ragen_envs.diagnose.texts import read_reasoning

FORMAT = "verl rollout dump"
TEMPLATED = True  # its prompts are rebuilt with the scoring tokenizer's chat template
KEYS = ("input", "output", "score", "step")  # verl also writes gts and any reward extra-info columns
STEP_FILE = re.compile(r"(\d+)\.jsonl")
# role sequences tried against an input, most messages first: an optional system message, then users
# with assistant replies between them
LAYOUTS = sorted(((("system",) if system else ()) + ("user", "assistant") * turns + ("user",)
                  for turns in range(3) for system in (True, False)), key=len, reverse=True)


def matches(path: Path) -> bool:
    """True for a folder holding ``N.jsonl`` files (verl's per-step dumps) whose first has verl's keys, or
    for one file whose first line has them."""
    path = Path(path)
    try:
        files = step_files(path) if path.is_dir() else [path]
        return bool(files) and all(key in (first_object(files[0]) or {}) for key in KEYS)
    except (OSError, UnicodeDecodeError):
        return False


def step_files(folder: Path) -> list[Path]:
    """A dump folder's ``N.jsonl`` files, by step."""
    found = [f for f in Path(folder).iterdir() if STEP_FILE.fullmatch(f.name) and f.is_file()]
    return sorted(found, key=lambda f: int(STEP_FILE.fullmatch(f.name).group(1)))


def read(path: Path, pattern: str | None = None, tokenizer=None) -> list[Record]:
    """The records of a verl dump folder (every ``N.jsonl``) or of one such file (see the module docstring).
    ``pattern``: ``read_reasoning``'s, instead of the ``<think>`` block. ``tokenizer``: the model's (its
    chat template is re-applied to each input); None keeps the inputs as decoded."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    files = step_files(path) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: no N.jsonl files (verl's trainer.rollout_data_dir holds one per step)")
    template = None if tokenizer is None else ChatTemplate(tokenizer)
    return [r for f in files for r in _file_records(f, pattern, template)]


class ChatTemplate:
    """A tokenizer's chat template as verl's dumps show it, special tokens dropped; ``prompt`` and
    ``first_reply`` undo that (see the module docstring)."""

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template to re-apply to verl's decoded inputs")
        self.tokenizer = tokenizer
        self.layouts = [layout for layout in (self._layout(roles) for roles in LAYOUTS) if layout]
        self.separator = self._separator()
        self.prompts: dict[str, str | None] = {}

    def decoded(self, text: str) -> str:
        """``text`` tokenised and decoded as verl decodes: special tokens dropped."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def prompt(self, decoded: str) -> str | None:
        """The template's text (special tokens included) that decodes to ``decoded``; None when none does."""
        if decoded not in self.prompts:
            self.prompts[decoded] = self._rebuild(decoded)
        return self.prompts[decoded]

    def first_reply(self, output: str) -> str:
        """The output up to the first turn separator (the end of the first reply)."""
        return output.split(self.separator, 1)[0] if self.separator else output

    def _rebuild(self, decoded: str) -> str | None:
        for roles, regex, pieces in self.layouts:
            match = regex.fullmatch(decoded)
            if match is None or any(p and p in match.group(len(roles) + 1) for p in pieces):
                continue  # a tail holding a header: the prompt has more messages than this layout
            messages = [{"role": role, "content": text} for role, text in zip(roles, match.groups())]
            text = self._render(messages) + match.group(len(roles) + 1)
            if self.decoded(text) == decoded:
                return text
        return None

    def _render(self, messages: list[dict]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _probe(self, roles: tuple[str, ...]) -> list[str] | None:
        """The decoded template around each message of a probe conversation: len(roles) + 1 pieces."""
        marks = [f"ragen{n}probe" for n in range(len(roles))]
        try:
            text = self.decoded(self._render([{"role": r, "content": m} for r, m in zip(roles, marks)]))
        except Exception:  # a template may refuse a role sequence (e.g. one without a system role)
            return None
        pieces = []
        for mark in marks:
            head, found, text = text.partition(mark)
            if not found or mark in text:
                return None
            pieces.append(head)
        return pieces + [text]

    def _layout(self, roles: tuple[str, ...]):
        pieces = self._probe(roles)
        if pieces is None:
            return None
        regex = "".join(re.escape(p) + "(.*?)" for p in pieces[:-1]) + re.escape(pieces[-1]) + "(.*)"
        return roles, re.compile(regex, re.S), pieces[1:]

    def _separator(self) -> str:
        """The decoded text between an assistant message and the next user message ("" if not found)."""
        pieces = self._probe(("user", "assistant", "user"))
        return pieces[2] if pieces else ""


def first_reasoning(reply: str, decoded_input: str, pattern: str | None = None) -> str:
    """The reasoning of a dump's first reply (see the module docstring)."""
    if pattern is not None:
        return read_reasoning(reply, pattern)
    prefilled = decoded_input.rstrip().endswith(THINK_OPEN)
    reasoning = read_reasoning(reply, prefilled=prefilled)
    body = reasoning.lstrip()
    body = body[len(THINK_OPEN):] if body.startswith(THINK_OPEN) else body  # the model opened it again
    # a prefilled block that holds a later turn's <think> was never closed in the first reply
    return "" if prefilled and THINK_OPEN in body else reasoning


def _file_records(path: Path, pattern: str | None, template: ChatTemplate | None) -> list[Record]:
    out: list[Record] = []
    groups: dict[int, dict[str, int]] = {}  # step -> input -> group id
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                where = f"{path}: line {number}"
                data = _line(line, where)
                prompt = data["input"]
                if template is not None:
                    prompt = template.prompt(data["input"])
                    if prompt is None:
                        raise ValueError(f"{where}: the input does not decode from the tokenizer's chat template "
                                         "(another model's template, or messages it cannot lay out); read it "
                                         "without a tokenizer to score the decoded text as it is")
                reply = data["output"] if template is None else template.first_reply(data["output"])
                seen = groups.setdefault(data["step"], {})
                group = seen.setdefault(data["input"], len(seen))
                out.append(Record(data["step"], 0, prompt, first_reasoning(reply, data["input"], pattern),
                                  float(data["score"]), group))
    if not out:
        raise ValueError(f"{path}: no samples")
    return out


def _line(line: str, where: str) -> dict:
    """A dump line's JSON object, its fields checked."""
    data = json_object(line)
    if data is None:
        raise ValueError(f"{where} is not a JSON object")
    missing = [key for key in KEYS if key not in data]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)} (a verl rollout dump line has {', '.join(KEYS)})")
    checks = {"input": isinstance(data["input"], str), "output": isinstance(data["output"], str),
              "score": isinstance(data["score"], (int, float)) and not isinstance(data["score"], bool),
              "step": isinstance(data["step"], int) and not isinstance(data["step"], bool)}
    wrong = [name for name, ok in checks.items() if not ok]
    if wrong:
        raise ValueError(f"{where}: field '{wrong[0]}' has the wrong type (input and output are text, score a "
                         "number, step an integer)")
    return data
