"""An environment as a chat: prompts in, model replies out.

``ChatEnv`` wraps any env that keeps the contract of ``ragen_envs.base``, through any Gymnasium
wrappers or over the network: it reads ``instructions``, ``valid_actions`` and ``parse_action``
with ``get_wrapper_attr`` and seeds transitions through ``reset(options={"transition_seed": t})``.

``reset`` gives the opening messages (system: instructions, valid actions, answer format; user:
turn 1 and the observation). ``step(reply)`` parses the reply, plays up to ``max_actions_per_turn``
actions (one answer for open-text tasks), stopping at episode end, and appends the assistant reply
and the next user message (reward, observation, budget left) to ``messages``. A reply without a
valid action does not step the env: it costs ``format_penalty`` and the next message says why.
Every turn is recorded with its reasoning, actions and reward.

An observation with an image (an image array, or a dict with an "image" part) makes the user message a
list of parts, the image first, then the turn's text (``vision``); with ``max_images`` only the latest
images stay in the history, older ones replaced by a line saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.agent import prompts, vision
from ragen_envs.agent.parsing import ANSWER_OPEN, THINK_OPEN, parse_response
from ragen_envs.base import check_choices, check_positive_int, declared, observation_text
from ragen_envs.registry import ENVIRONMENTS


def grounding(facts: dict[str, str], reasoning: str | None) -> float | None:
    """How well ``reasoning`` states the env's ``facts`` (``LLMEnv.facts``), wrong statements counted
    against it; None without facts. Input dependence (the MI proxies) is not correctness: this checks
    what is said.

    A fact's phrase is words, then a value ("I am at (2, 3)"). Wherever the reasoning says those words
    (spaces and case aside) followed by a value, it states that fact: right when the value is the fact's
    (a list of cells in any order), else wrong. A fact counts as right when the reasoning states it and
    never otherwise, as wrong when any statement of it is wrong. The score is (right - wrong) / facts, from
    -1 to 1: one right statement of each fact scores 1, saying nothing 0, and a wrong one costs what a right
    one earns, so a guess pays only where it is right more often than not; stating every cell of the board
    (or a wrong cell beside a right one) scores -1 for that fact. A phrase without a number counts right
    when said, never wrong."""
    if not facts:
        return None
    said = _squash(reasoning or "")
    right = wrong = 0
    for phrase in facts.values():
        words, value = _words_and_value(phrase)
        if value is None:  # nothing to get wrong: said or not
            right += words in said
            continue
        stated = _statements(said, words)
        right += bool(stated) and all(v == value for v in stated)
        wrong += any(v != value for v in stated)
    return (right - wrong) / len(facts)


# A fact's value: parenthesised number groups ("(1,2),(3,4)", "and" between them too), or bare numbers.
_GROUPS = r"\(\d+(?:,\d+)*\)"
_VALUE = re.compile(rf"{_GROUPS}(?:,?(?:and)?{_GROUPS})*|\d+(?:,\d+)*")


def _squash(text: str) -> str:
    return "".join(text.split()).lower()


def _words_and_value(phrase: str) -> tuple[str, list[str] | None]:
    """A fact phrase split into its words (squashed) and its value (None without a number)."""
    said = _squash(phrase)
    match = _VALUE.search(said)
    if match is None or match.start() == 0:
        return said, None
    return said[:match.start()], _value(match.group())


def _value(text: str) -> list[str]:
    """The number groups of a value, sorted: a list of cells reads the same in any order."""
    return sorted(re.findall(r"\d+(?:,\d+)*", text))


def _statements(said: str, words: str) -> list[list[str]]:
    """The values that follow each place ``said`` says ``words`` (a mention with no value states nothing)."""
    out, at = [], said.find(words)
    while at >= 0:
        match = _VALUE.match(said, at + len(words))
        if match:
            out.append(_value(match.group()))
        at = said.find(words, at + 1)
    return out


@dataclass
class TurnRecord:
    response: str  # the model's reply, as generated
    reasoning: str | None  # the text inside <think>...</think>
    actions: list[str]  # actions played this turn (valid ones, in order)
    invalid_actions: list[str]  # parsed but rejected by the env
    format_ok: bool  # the required tags and at least one action the env took (the template's placeholder is none)
    reward: float  # env rewards of the played actions, plus the format penalty if any
    env_steps: int
    grounded: float | None = None  # the env's facts (LLMEnv.facts) the reasoning states, net of wrong ones (grounding)


@dataclass
class ChatEnvConfig:
    max_actions_per_turn: int = declared(2, help="actions one reply may hold (the paper's runs use 2)")
    enable_think: bool = declared(True, help="ask for <think>...</think> before <answer>")
    format_penalty: float = declared(-0.1, help="added when a reply holds no valid action")
    max_turns: int = declared(5, help="model replies per episode at most")
    prefill_think: bool = declared(True, help="the generation prompt ends with <think> (<answer> with enable_think "
                                   "off), so each reply starts inside it (RAGEN's ctx_manager does; it also helps "
                                   "small models keep the format)")
    penalize_invalid_actions: bool = declared(True, help="the format penalty also when some of a reply's actions "
                                              "are invalid (RAGEN's es_manager), not only when none is valid")
    length_line: Literal["env", "rollout"] = declared("env", help="the reply budget each turn's prompt states: "
                                                      "\"env\", the env's own (its catalogue entry's max_tokens, as "
                                                      "RAGEN's prompts state it), else the rollout's max_new_tokens; "
                                                      "\"rollout\", always the latter")
    max_images: int | None = declared(None, help="images kept in the history (the latest; older ones become a line "
                                      "of text): each costs the context its placeholder tokens take. None: all of "
                                      "them")

    def __post_init__(self):
        check_choices(self)
        check_positive_int("max_actions_per_turn", self.max_actions_per_turn)
        check_positive_int("max_turns", self.max_turns)
        if self.max_images is not None:
            check_positive_int("max_images", self.max_images)

    @property
    def prefill(self) -> str:
        """What every reply starts with, given in the prompt (``prefill_think``)."""
        if not self.prefill_think:
            return ""
        return THINK_OPEN if self.enable_think else ANSWER_OPEN


class ChatEnv:
    """Wraps ``env`` (an env id or a Gymnasium env with text observations) as a chat."""

    def __init__(self, env: str | gym.Env, config: ChatEnvConfig | None = None, max_response_tokens: int | None = None,
                 **env_kwargs):
        self.env = gym.make(env, **env_kwargs) if isinstance(env, str) else env
        self.env_id = env if isinstance(env, str) else self.env.spec.id if self.env.spec else type(env).__name__
        self.config = config or ChatEnvConfig()
        served = getattr(self.env.unwrapped, "env_id", None)  # the env a remote client plays
        # how tables name it: a remote client by the env it plays, not by the client's own id
        self.label = f"{served} (via {self.env_id})" if isinstance(served, str) else self.env_id
        entry = ENVIRONMENTS.get(served if isinstance(served, str) else self.env_id)
        own = entry.max_tokens if entry is not None and self.config.length_line == "env" else None
        self.max_response_tokens = own or max_response_tokens  # said in each turn's prompt when known
        try:
            self.instructions = self.env.get_wrapper_attr("instructions")
            self.valid_actions = self.env.get_wrapper_attr("valid_actions")
            self._parse_action = self.env.get_wrapper_attr("parse_action")
        except AttributeError as error:
            raise TypeError(f"ChatEnv needs an env with the ragen_envs.base.LLMEnv surface (instructions, "
                            f"valid_actions, parse_action); {self.env_id}: {error}") from None
        # the state facts a reasoning should get right (LLMEnv.facts); none from an env without them
        self._facts = getattr(self.env.unwrapped, "facts", dict)
        try:  # the steps an episode may take (the env contract's max_steps; a client copies it)
            self._max_steps = self.env.get_wrapper_attr("max_steps")
        except AttributeError:
            self._max_steps = None
        # Open-text tasks take the whole answer as one action.
        self.max_actions = self.config.max_actions_per_turn if self.valid_actions else 1
        self.messages: list[dict] = []
        # the history before the last user message was rewritten (max_images): a prompt built up turn
        # by turn no longer matches it
        self.history_rewritten = False
        self.turns: list[TurnRecord] = []
        self.reset_info: dict = {}  # the env's info at the last reset (e.g. optimal_solution_length)
        self.done = False
        self.success = False
        self.episode_return = 0.0

    # -- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, transition_seed: int | None = None) -> list[dict[str, str]]:
        """Start an episode; ``seed`` fixes the initial state, ``transition_seed`` the random
        transitions after it, so envs sharing an initial state still draw their own."""
        options = None if transition_seed is None else {"transition_seed": transition_seed}
        obs, info = self.env.reset(seed=seed, options=options)
        self.instructions = self.env.get_wrapper_attr("instructions")  # an env may word them per episode
        self.turns, self.done, self.success, self.episode_return = [], False, False, 0.0
        self.reset_info, self.history_rewritten = info, False
        c = self.config
        self.messages = [
            {"role": "system", "content": prompts.system_prompt(
                self.instructions, self.valid_actions, self.max_actions, c.enable_think)},
            {"role": "user", "content": self._turn_message(obs, feedback="")},
        ]
        return self.messages

    def step(self, response: str) -> TurnRecord:
        """Play one model reply; return the turn's record. ``messages`` gains the reply and, unless
        the episode ended, the next user message."""
        if self.done:
            raise RuntimeError("the episode is over: call reset()")
        c = self.config
        parsed = parse_response(response, self.max_actions, c.enable_think, split=bool(self.valid_actions))
        grounded = grounding(self._facts(), parsed.reasoning)  # of the state the reply was about
        played, rejected, reward, steps = [], [], 0.0, 0
        obs = None
        for action in parsed.actions:
            if self._parse_action(action) is None:
                rejected.append(action)
                continue
            obs, r, terminated, truncated, info = self.env.step(action)
            played.append(action)
            reward += float(r)
            steps += 1
            self.success = bool(info.get("success", False))
            if terminated or truncated:
                self.done = True
                break
        if not played or (rejected and c.penalize_invalid_actions):
            reward += c.format_penalty
        if not played:
            if parsed.actions:
                why = f"no valid action among {prompts.quote_actions(parsed.actions)}"
            elif parsed.answer is not None:
                why = "the answer held no action"
            else:
                why = ("no <think>...</think> <answer>...</answer> found" if c.enable_think
                       else "no <answer>...</answer> found")
            feedback = prompts.FEEDBACK_INVALID.format(why=why, penalty=c.format_penalty)
        else:
            feedback = prompts.FEEDBACK_REWARD.format(reward=reward)
            if rejected:
                feedback += prompts.FEEDBACK_SOME_INVALID.format(actions=prompts.quote_actions(rejected))
        record = TurnRecord(response=response, reasoning=parsed.reasoning, actions=played,
                            invalid_actions=rejected, format_ok=parsed.format_ok and bool(played), reward=reward,
                            env_steps=steps, grounded=grounded)
        self.turns.append(record)
        self.episode_return += reward
        self.messages.append({"role": "assistant", "content": response})
        if len(self.turns) >= c.max_turns:
            self.done = True
        if not self.done:
            if obs is None:  # nothing was played: show the unchanged state again
                obs = self._last_observation
            self.messages.append({"role": "user", "content": self._turn_message(obs, feedback)})
            self.history_rewritten = self._drop_old_images()
        return record

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def images(self) -> list[np.ndarray]:
        """The images the conversation shows, in order."""
        return vision.message_images(self.messages)

    def _turn_message(self, obs: Any, feedback: str) -> str | list[dict]:
        self._last_observation = obs
        image = obs if isinstance(obs, np.ndarray) else obs.get("image") if isinstance(obs, dict) else None
        text = prompts.IMAGE_OBSERVATION if isinstance(obs, np.ndarray) else observation_text(obs)
        c = self.config
        # the env's own step limit too (RubiksCube stops at 20 where 25 replies of 4 moves would say 100)
        steps_left = None if self._max_steps is None else self._max_steps - sum(t.env_steps for t in self.turns)
        turn = prompts.turn_prompt(len(self.turns) + 1, text, self.valid_actions, c.max_turns - len(self.turns),
                                   self.max_actions, c.enable_think, feedback, self.max_response_tokens, steps_left)
        if image is None:
            return turn
        return [{"type": "image", "image": image}, {"type": "text", "text": turn}]

    def _drop_old_images(self) -> bool:
        """Replace all but the latest ``max_images`` images with a line of text; True if any was."""
        extra = len(self.images) - (self.config.max_images or len(self.images))
        if extra <= 0:
            return False
        for k, m in enumerate(self.messages):
            if isinstance(m["content"], list):
                parts = []
                for part in m["content"]:
                    if part.get("type") == "image" and extra > 0:
                        part, extra = {"type": "text", "text": prompts.IMAGE_DROPPED}, extra - 1
                    parts.append(part)
                self.messages[k] = {**m, "content": parts}  # a new message: records of the old one keep it
        return True

    def close(self) -> None:
        self.env.close()
