"""``RolloutLog``: write the generic JSONL that ``ragen diagnose`` reads, from inside any framework's rollout
code (a reward function, an env's last step, an agent's episode end).

    log = RolloutLog("rollouts.jsonl", samples_per_step=64 * 8)      # P prompts x G samples a step
    log.add(prompt=text_the_model_read, response=reply, reward=ret, group=prompt_id)

Each ``add`` checks the sample as the reader will and appends one line with one ``os.write`` on a file
opened for appending, so lines from several processes do not interleave. ``step`` is counted when not
given: the sample's index (in this log object) divided by ``samples_per_step``, right when one process
writes each step's samples in step order (a synchronous trainer's rollouts); with several processes
writing, or asynchronous rollouts, give each sample's ``step`` yourself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ragen_envs.diagnose.readers import generic_record


class RolloutLog:
    """Appends samples to ``path`` (created if missing) in the generic JSONL format (docs/diagnose.md)."""

    def __init__(self, path: str | Path, samples_per_step: int | None = None):
        if samples_per_step is not None and samples_per_step < 1:
            raise ValueError(f"samples_per_step must be at least 1, got {samples_per_step}")
        self.path, self.samples_per_step, self.count = Path(path), samples_per_step, 0

    def add(self, prompt: str, reward: float, group, response: str | None = None, reasoning: str | None = None,
            step: int | None = None, turn: int = 0) -> dict:
        """Append one sample; returns the line written. ``prompt``: the text the model read; ``response``
        (its reasoning is read at diagnosis time) or ``reasoning``; ``reward``: the sample's return;
        ``group``: shared by the samples of one prompt (a string or integer); ``step``: see the module
        docstring. A field of the wrong type is a ValueError before anything is written."""
        if (response is None) == (reasoning is None):
            raise ValueError("give the sample's response or its reasoning (one of the two)")
        if step is None:
            if self.samples_per_step is None:
                raise ValueError("no step: give step=, or samples_per_step to the RolloutLog to count steps")
            step = self.count // self.samples_per_step
        line = {"prompt": prompt, "reward": reward, "group": group, "step": step, "turn": turn,
                **({"response": response} if response is not None else {"reasoning": reasoning})}
        text = json.dumps(line, ensure_ascii=False)
        generic_record(text, None, f"{self.path}: sample {self.count}")  # the reader's own checks
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (text + "\n").encode("utf-8"))
        finally:
            os.close(fd)
        self.count += 1
        return line
