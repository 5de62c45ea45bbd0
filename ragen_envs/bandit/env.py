"""Bandit: pull one of two arms, once (RAGEN's two-armed bandit, ``Bandit`` / ``BanditTest``).

Each arm has a name that hints at how it pays: a steady trade against a risky venture. The task is to
read that off the names: the risky arm pays more on average, though less often.

Observation: the rules and the two arms' names, in a random order; after the pull, the arm pulled and
what it paid.

Action: the name of an arm (case-insensitive), or its position, ``1`` or ``2``. Anything else is
invalid: nothing changes.

Reward: the steady arm always pays ``steady_reward`` (0.1); the risky arm pays ``jackpot`` (1.0) with
probability ``jackpot_prob`` (0.25), else 0, so its expected reward (0.25) is the higher one (RAGEN's
numbers). Success: pulling the risky arm, whatever it paid.

Termination: terminated by the first valid pull; truncated after ``max_steps`` (2) steps of any kind.

Arguments:
- ``split``: ``"train"`` (12 pairs of names) or ``"test"`` (12 other pairs), as RAGEN splits them;
  in both no surface feature of a name (its length, letters or place) tells the risky arm.
- ``steady_reward=0.1``, ``jackpot=1.0``, ``jackpot_prob=0.25``, ``max_steps=2``, ``render_mode``; their
  bounds: ``argument_bounds`` (docs/envs.md's table).

``reset(seed=s)`` draws the pair of names and their order from ``s``; the risky arm's payout is drawn
at the pull (``options["transition_seed"]`` reseeds it, so a group's samples share the arms but not
their luck). ``oracle_action()`` names the risky arm.
"""

from __future__ import annotations

from typing import Any

from ragen_envs.base import MAX_STEPS, Bounds, TextEnv, check_positive_int

# (steady, risky): names of our own, a safe living beside a gamble. Both splits are balanced on every
# surface feature a policy could use without reading the names' meaning: the risky name is the longer, the
# later in the alphabet, the hyphenated, the one ending in "er", the one with more vowels (and so on) in
# about half of the pairs (tests/envs/test_bandit.py), so only the meaning tells the arms apart.
PAIRS = {
    "train": [("Bookbinder", "Treasure-hunter"), ("Upholsterer", "Card-sharp"), ("Bus-driver", "Venture-capitalist"),
              ("Toll-collector", "Tipster"), ("Stenographer", "Day-trader"), ("School-clerk", "Prospector"),
              ("Night-watchman", "Stuntman"), ("Teller", "Speculator"), ("Tailor", "Fortune-seeker"),
              ("Census-taker", "Wildcatter"), ("Janitor", "Gold-digger"), ("Cashier", "Oil-prospector")],
    "test": [("Accountant", "Horse-bettor"), ("Saddler", "Raffle-buyer"), ("Court-reporter", "Adventurer"),
             ("Locksmith", "High-roller"), ("Tax-collector", "Jackpot-chaser"), ("Potter", "Roulette-fan"),
             ("Shelf-stocker", "Dice-thrower"), ("Cooper", "Smuggler"), ("Bank-examiner", "Punter"),
             ("Payroll-officer", "Bettor"), ("Dock-inspector", "Risk-taker"), ("Mail-carrier", "Card-counter")],
}


class BanditEnv(TextEnv):
    agent_info_keys = ("arms",)  # the names the prompt shows
    argument_bounds = {
        "steady_reward": Bounds(min=0, max=1000, why="and below jackpot * jackpot_prob"),
        "jackpot": Bounds(min=0, max=1000, why="the risky arm's payout"),
        "jackpot_prob": Bounds(min=0, max=1, why="a probability"),
        "max_steps": MAX_STEPS,
    }

    def __init__(self, split: str = "train", steady_reward: float = 0.1, jackpot: float = 1.0,
                 jackpot_prob: float = 0.25, max_steps: int = 2, render_mode: str | None = None):
        check_positive_int("max_steps", max_steps)
        if split not in PAIRS:
            raise ValueError(f"split must be one of {', '.join(PAIRS)}, got {split!r}")
        if not jackpot * jackpot_prob > steady_reward >= 0:
            raise ValueError("the risky arm must pay more on average: need jackpot * jackpot_prob > steady_reward "
                             f">= 0, got {jackpot} * {jackpot_prob} and {steady_reward}")
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.split, self.steady_reward, self.jackpot, self.jackpot_prob = split, steady_reward, jackpot, jackpot_prob
        self.reward_range = (0.0, jackpot)  # the checks above make the jackpot the larger payout
        self.arms: list[str] = []
        self.steady = self.risky = ""
        self.pulled: str | None = None
        self.paid = 0.0

    @property
    def instructions(self) -> str:
        names = " and ".join(self.arms) if self.arms else "two names"
        return (f"You are at a two-armed bandit. The arms are named {names}; each name hints at how that arm "
                "pays. You pull one arm, once. Choose the arm with the higher expected reward and answer with "
                "its name.")

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        pairs = PAIRS[self.split]
        self.steady, self.risky = pairs[int(self.np_random.integers(len(pairs)))]
        self.arms = [self.steady, self.risky] if self.np_random.random() < 0.5 else [self.risky, self.steady]
        self.pulled, self.paid = None, 0.0
        return {"arms": list(self.arms)}

    def parse_action(self, action: str) -> str | None:
        key = action.strip().lower()
        for position, name in enumerate(self.arms, start=1):
            if key in (name.lower(), str(position)):
                return name
        return None

    def _apply(self, arm: str) -> tuple[float, bool, bool]:
        self.pulled = arm
        if arm == self.risky:
            self.paid = self.jackpot if self.np_random.random() < self.jackpot_prob else 0.0
        else:
            self.paid = self.steady_reward
        return self.paid, True, True

    def _text(self) -> str:
        text = f"Arm 1: {self.arms[0]}\nArm 2: {self.arms[1]}"
        if self.pulled is not None:
            text += f"\nYou pulled {self.pulled}: it paid {self.paid:g}."
        return text

    def _is_success(self) -> bool:
        return self.pulled == self.risky

    def oracle_action(self) -> str | None:
        return None if self._terminated else self.risky

    def oracle_reasoning(self) -> str | None:
        if self._terminated:
            return None
        position = {name: n for n, name in enumerate(self.arms, start=1)}
        return (f"Arm {position[self.steady]}, {self.steady}, sounds like a steady living: a small, sure reward. "
                f"Arm {position[self.risky]}, {self.risky}, sounds like a gamble: usually nothing, sometimes a lot. "
                f"The gamble pays more on average, so I pull {self.risky}.")
