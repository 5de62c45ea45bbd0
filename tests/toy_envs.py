"""A small open-text task for tests: the contract suite runs on it beside the catalogue, so the
``TextEnv`` path (open-text actions, any-Unicode observations, random transitions) is covered before
a real text task relies on it."""

from __future__ import annotations

import gymnasium as gym

from ragen_envs import TextEnv, data

GUESS_ID = "RagenTest/Guess-v0"


class GuessEnv(TextEnv):
    """Guess the secret integer 1 ≤ n ≤ ``high``; each wrong guess gets a hint that lies with
    probability ``lie``. Reward 1 for the right number (terminated)."""

    def __init__(self, high: int = 20, lie: float = 0.3, max_steps: int = 8, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.high, self.lie = high, lie
        self.instructions = f"Guess the secret integer n with 1 ≤ n ≤ {high}. Answer with one integer."

    def _new_episode(self, options):
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.history: list[str] = []
        return {}

    def parse_action(self, action):
        text = action.strip()
        return int(text) if text.isdigit() and 1 <= int(text) <= self.high else None

    def _apply(self, guess):
        if guess == self.secret:
            self.history.append(f"{guess} → ✓ correct")
            return 1.0, True, True
        higher = guess < self.secret
        if self.np_random.random() < self.lie:
            higher = not higher
        self.history.append(f"{guess} → {'higher ↑' if higher else 'lower ↓'}")
        return 0.0, False, True

    def _text(self):
        return "Guesses so far: " + ("; ".join(self.history) or "none") + " 🙂"

    def _is_success(self):
        return bool(self.history) and self.history[-1].endswith("correct")

    def oracle_action(self):
        return None if self._is_success() else str(self.secret)


if GUESS_ID not in gym.registry:
    gym.register(GUESS_ID, entry_point=GuessEnv)


PICK_ID = "RagenTest/Pick-v0"
WORDS = ("cat", "dog", "owl", "bee", "elk")


class PickEnv(TextEnv):
    """Repeat the word of the episode: a dataset-backed toy (``ragen_envs.data.Source``), so the data
    sources are tested on an env of the tests' own. Records: ``{"word": ...}``; built in: generated;
    ``"hub"``: the dataset ``ragen/pick-words``."""

    instructions = "Repeat the word you are shown."

    def __init__(self, dataset="builtin", split: str = "train", render_mode: str | None = None):
        super().__init__(max_steps=2, render_mode=render_mode)
        self.source = data.Source(dataset, split, ("word",), "ragen/pick-words", _word,
                                  generate=lambda rng: rng.choice(WORDS))
        self.word, self.said = "", None

    def _new_episode(self, options):
        self.word, self.said = self.source.sample(self.np_random), None
        return {}

    def parse_action(self, action):
        return action.strip() or None

    def _apply(self, word):
        self.said = word
        return float(word == self.word), True, True

    def _text(self):
        return f"Word: {self.word}"

    def _is_success(self):
        return self.said == self.word

    def oracle_action(self):
        return self.word


def _word(record, where):
    if not isinstance(record["word"], str) or not record["word"]:
        raise ValueError(f"{where}: word must be a non-empty string")
    return record["word"]


if PICK_ID not in gym.registry:
    gym.register(PICK_ID, entry_point=PickEnv)
