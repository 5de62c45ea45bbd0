"""The contract every ragen-envs environment keeps, and the two bases that implement it.

What a caller may use (through any Gymnasium wrapper with ``env.get_wrapper_attr(name)``, or on a
remote client, which exposes the same names):

- ``instructions`` (str): what an agent must know: goal, symbols, rewards, the action format.
- ``valid_actions`` (list[str] | None): the finite action set, matched case-insensitively; None where
  actions are open text (an answer, a query, a program), of which a reply holds exactly one.
- ``parse_action(text)``: the env's own action, or None when ``text`` is not a valid action. ``step``
  applies the same rule, so a caller can test actions without stepping.
- ``reset(seed=s, options={...})``: ``seed`` fixes the initial state (a level, a map, a problem).
  ``options["transition_seed"] = t`` reseeds the random transitions that follow (FrozenLake's slip),
  so envs reset with one seed share the start and draw their own dynamics; each env documents its
  other options and lists them in ``reset_options``; an unknown key is a ValueError. All randomness
  comes from ``self.np_random``, never from global state.
- ``reward_range``: (lowest, highest) reward of one step (0 to 1 unless the env says otherwise).
- ``step(action)``: ``action`` is a string. A string the env cannot parse (or a non-string) never
  raises: nothing changes, the reward is 0 and ``info["action_is_valid"]`` is False. Every call counts
  towards ``max_steps``; the episode is truncated there.
- ``oracle_action()``: the next action of the env's reference policy (optimal where the env can
  compute it), or None where it knows none; demos, benchmarks and warm starts play it.
  ``oracle_reasoning()`` says, from the current state, why that action (None where the env has no
  words for it): the reasoning of warm-start demonstrations, so it differs from state to state.
- ``info`` at reset and at every step holds ``action_is_valid``, ``action_is_effective`` (the state
  changed), ``success`` and ``episode_over`` (below); envs add their own keys
  (``optimal_solution_length`` at reset, ...). ``agent_info_keys`` names those an agent may see; the
  others (how far the answer is, whether the gold passage was found) are for the trainer and metrics,
  and ``agent_info(info)`` drops them: the env server sends only that, as a policy that read them
  could earn without doing the task.
- An ended episode stays ended: after ``terminated`` or ``truncated``, every step applies nothing and
  returns the same observation, reward 0, the same ``terminated`` / ``truncated`` flags and
  ``info["episode_over"] = True`` (False on every step of a running episode). A policy cannot earn
  past the end, and a caller that keeps stepping is told why nothing happens.

Subclasses implement ``_new_episode``, ``parse_action``, ``_apply``, ``_observation`` and
``_is_success``, and may add ``info`` keys of their own with ``_extra_info``. ``GridEnv``
(``grid.py``) adds boards, images and rendering for grid games;
``TextEnv`` below gives text-only tasks a text observation space and ``ansi`` rendering.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import inspect
import numbers
import typing
from typing import Any

import gymnasium as gym
import numpy as np

from ragen_envs.spaces import CHARSET, TextSpace

# Longest action string an agent is expected to send; longer ones are still accepted (and rejected
# as invalid by the env's parser), the bound only describes the action space.
MAX_ACTION_CHARS = 4096
# Longest open-text answer the envs that read any text as an answer (RAGEN's rule) take; longer text
# is an invalid action (RAGEN would step it; no answer is a book)
MAX_ANSWER_CHARS = 10_000

# episodes an env with ``solution_lengths`` may draw in one reset before it says the lengths are out of reach
# (a rare length, FrozenLake's 7 moves at size 4, takes about 150)
LENGTH_ATTEMPTS = 2_000
# the latest seeds' finds of those envs (a batch's groups), shared by the envs made alike in this process
LENGTH_DRAWS_KEPT = 1_024
_LENGTH_DRAWS: dict = {}

INFO_KEYS = ("action_is_valid", "action_is_effective", "success", "episode_over")


class LLMEnv(gym.Env):
    """Base for text-in, text-out environments. See the module docstring for the contract."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    #: Task description for the agent: goal, symbols, action format. Set by each subclass.
    instructions: str = ""
    #: The finite list of valid actions, or None where actions are open text (one per reply).
    valid_actions: list[str] | None = None
    #: (lowest, highest) reward of any one step, as each env's docstring states it; the fuzzer
    #: (``benchmarks/audits/env_fuzz.py``) holds every env to it.
    reward_range: tuple[float, float] = (0.0, 1.0)
    #: The keys of ``reset(options=...)`` this env reads besides "transition_seed"; any other key is an
    #: error (a misspelt option silently ignored would play the wrong episode).
    reset_options: tuple[str, ...] = ()
    #: This env's own ``info`` keys an agent may see (``INFO_KEYS`` always are); the rest stay with the
    #: caller in this process and never go to a remote agent (``agent_info``).
    agent_info_keys: tuple[str, ...] = ()
    #: Attributes no step changes (a corpus, a catalogue, an index) that a deep copy shares with its
    #: original, besides the spaces: look-ahead and audits copy envs by the thousand.
    shared_on_copy: tuple[str, ...] = ()

    #: The allowed values of this env's numeric arguments (name -> ``Bounds``), every one of them declared:
    #: chosen so that every allowed value resets quickly, and checked (``check_argument_bounds``) before
    #: the env's own code runs, however the env is made. docs/envs.md lists them (``registry.bounds_table``).
    argument_bounds: dict[str, Bounds] = {}
    #: The optimal solution lengths a generated episode is drawn among (None: as generated), set by the envs
    #: whose ``_new_episode`` reports ``optimal_solution_length`` and that take a ``solution_lengths``
    #: argument (FrozenLake, Sokoban): a study's mix of difficulties, e.g. (1, 1, 6), two trivial boards
    #: for one hard one.
    solution_lengths: tuple[int, ...] | None = None

    def __new__(cls, *args, **kwargs):
        # Here rather than in __init__, so that every subclass's arguments meet their bounds first, made by
        # gym.make, by the class itself or by a subclass (a copy or an unpickling passes none).
        arguments = call_arguments(cls, args, kwargs) if args or kwargs else {}
        check_argument_bounds(cls, arguments)
        env = super().__new__(cls)
        env._made_with = repr(sorted(arguments.items(), key=str))  # with the seed: which episode a reset draws
        return env

    def __init__(self, max_steps: int, render_mode: str | None = None):
        check_positive_int("max_steps", max_steps)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.action_space = TextSpace(MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self._elapsed_steps = 0
        self.reset_seed: int | None = None
        self._started = False
        self._terminated = False
        self._truncated = False

    # -- what subclasses implement -------------------------------------------------------------
    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        """Set up a new episode from ``self.np_random`` (or ``options``); return extra reset info."""
        raise NotImplementedError

    def parse_action(self, action: str) -> Any | None:
        """Turn the action text into the env's own action, or None when it is not valid."""
        raise NotImplementedError

    def _apply(self, action: Any) -> tuple[float, bool, bool]:
        """Apply a parsed action; return (reward, terminated, action_is_effective)."""
        raise NotImplementedError

    def _observation(self) -> Any:
        raise NotImplementedError

    def _is_success(self) -> bool:
        raise NotImplementedError

    def oracle_action(self) -> str | None:
        """The reference policy's next action from the current state, or None."""
        raise NotImplementedError

    def oracle_reasoning(self) -> str | None:
        """Why ``oracle_action()`` here, in a sentence or two about the current state; None: no words."""
        return None

    def facts(self) -> dict[str, str]:
        """What a reasoning about the current observation should get right, each in the words of
        ``oracle_reasoning`` (name -> phrase, e.g. "position": "I am at (2, 3)"). A phrase is words, then
        a value (numbers, or cells "(r, c), (r, c)"): the grounding metric takes every place a reasoning
        says the words as a statement of that fact, right or wrong by the value that follows. Empty where
        the env has no facts to check."""
        return {}

    def end_reason(self) -> str | None:
        """Why the episode is over, in words a viewer shows ("fell into a hole at (2, 1)"); None while it
        is not over or where the env has no words beyond success."""
        return "solved" if self._terminated and self._is_success() else None

    def _extra_info(self) -> dict[str, Any]:
        """Env-specific ``info`` keys of the current state, added at reset and after every step."""
        return {}

    # -- the shared reset and step ---------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.reset_seed = seed  # the seed of this reset (None: none given), for RAGEN's item rules
        options = dict(options or {})
        transition_seed = options.pop("transition_seed", None)
        unknown = sorted(set(options) - set(self.reset_options), key=str)
        if unknown:
            known = ["transition_seed", *self.reset_options]
            close = difflib.get_close_matches(str(unknown[0]), known, n=1)
            raise ValueError(f"{type(self).__name__}.reset: unknown option {unknown[0]!r}"
                             f"{f'; did you mean {close[0]!r}?' if close else ''} (its options: {', '.join(known)})")
        self._elapsed_steps = 0
        self._terminated = False
        self._truncated = False
        if self.solution_lengths and not options:  # a given board (an option) is played as given
            extra = self._episode_of_drawn_length(options)
        else:
            extra = self._new_episode(options)
        if transition_seed is not None:
            # The initial state is drawn; what follows comes from its own stream.
            if not isinstance(transition_seed, (int, np.integer)) or isinstance(transition_seed, bool) \
                    or not 0 <= transition_seed < 2 ** 64:  # a seed's range, as for reset(seed=...)
                raise ValueError(f"options['transition_seed'] must be an integer in [0, 2**64), "
                                 f"got {_brief(transition_seed)}")
            self._np_random = np.random.default_rng(int(transition_seed))
        self._started = True
        if self.render_mode == "human":
            self.render()
        return self._observation(), self._info(valid=True, effective=False, episode_over=False, **extra)

    def _episode_of_drawn_length(self, options: dict[str, Any]) -> dict[str, Any]:
        """A length drawn from ``solution_lengths``, then episodes drawn until one's ``optimal_solution_length``
        is that length (all from ``np_random``: a seed still fixes the episode)."""
        target = self.solution_lengths[int(self.np_random.integers(len(self.solution_lengths)))]
        # A group's G envs reset with one seed: where an env alike found this seed's episode, start from the
        # generator state that drew it (the same episode and the same state after, without the search)
        key = (type(self), getattr(self, "_made_with", None), self.reset_seed) if self.reset_seed is not None else None
        found = _LENGTH_DRAWS.get(key) if key is not None else None
        if found is not None:
            self.np_random.bit_generator.state = found
        budget = Budget(LENGTH_ATTEMPTS, "episodes drawn", "solution_lengths", self.solution_lengths,
                        f"no episode of {type(self).__name__} with these arguments came out {target} moves "
                        "long; list lengths its episodes have (info['optimal_solution_length'] at reset)")
        while True:
            before = self.np_random.bit_generator.state
            extra = self._new_episode(options)
            if extra.get("optimal_solution_length") == target:
                break
            budget.spend()
        if key is not None:
            _LENGTH_DRAWS[key] = before
            while len(_LENGTH_DRAWS) > LENGTH_DRAWS_KEPT:
                _LENGTH_DRAWS.pop(next(iter(_LENGTH_DRAWS)))
        return extra

    def step(self, action: str):
        if not self._started:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset(): call reset() first")
        if self._terminated or self._truncated:
            # Past the end nothing is parsed or applied (parsing hostile text costs time too).
            info = self._info(valid=False, effective=False, episode_over=True)
            return self._observation(), 0.0, self._terminated, self._truncated, info
        # Every call counts towards max_steps, invalid ones too, so an episode always ends.
        self._elapsed_steps += 1
        parsed = self.parse_action(action) if isinstance(action, str) else None
        if parsed is None:
            reward, terminated, effective = 0.0, False, False
        else:
            reward, terminated, effective = self._apply(parsed)
        self._terminated = terminated
        self._truncated = truncated = not terminated and self._elapsed_steps >= self.max_steps
        if self.render_mode == "human":
            self.render()
        info = self._info(valid=parsed is not None and self._is_valid(parsed), effective=effective,
                          episode_over=False)
        return self._observation(), float(reward), terminated, truncated, info

    def __deepcopy__(self, memo):
        """A copy of the env whose state is its own; the spaces and ``shared_on_copy`` are shared."""
        for name in ("observation_space", "action_space", "spec", "metadata", *self.shared_on_copy):
            value = self.__dict__.get(name)
            if value is not None:
                memo[id(value)] = value
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        twin.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return twin

    def agent_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info`` without the keys an agent must not see (``agent_info_keys``): what a server sends."""
        shown = set(INFO_KEYS) | set(self.agent_info_keys)
        return {k: v for k, v in info.items() if k in shown}

    def _is_valid(self, parsed: Any) -> bool:
        """``info["action_is_valid"]`` of a parsed action: True, unless the env steps text it takes for
        no action of its own (RAGEN's rules: a SearchQA reply that is neither search nor finish is scored
        as an answer, a WebShop action off the page does nothing), to say so in its metrics."""
        return True

    def _info(self, valid: bool, effective: bool, **extra) -> dict[str, Any]:
        return {"action_is_valid": valid, "action_is_effective": effective,
                "success": self._is_success(), **self._extra_info(), **extra}

    def parse_choice(self, action: str) -> str | None:
        """Case-insensitive match of ``action`` against ``valid_actions``: the canonical name or None."""
        key = action.strip().lower()
        for name in self.valid_actions or ():
            if key == name.lower():
                return name
        return None


class TextEnv(LLMEnv):
    """Base of text-only tasks (questions, puzzles, search, shopping, code).

    Subclasses return the observation text from ``_text()``. The observation space is a
    ``TextSpace`` of any Unicode up to ``max_observation_chars``; a longer text is cut there, with a
    note saying how much was left out, so an observation always lies in its space.
    """

    #: Upper bound of an observation's length in characters (the observation space's max_length).
    max_observation_chars: int = 16_384

    def __init__(self, max_steps: int, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.observation_space = TextSpace(self.max_observation_chars, min_length=0, charset=CHARSET)

    def _text(self) -> str:
        raise NotImplementedError

    def _observation(self) -> str:
        return clip_text(self._text(), self.max_observation_chars)

    def render(self):
        if self.render_mode == "ansi":
            return self._observation()
        return no_render_mode(self)


def no_render_mode(env) -> None:
    """What ``render()`` does without a render mode: nothing, saying so once as Gymnasium's own envs do
    (silence would look like a broken renderer)."""
    if env.render_mode is None:
        spec = getattr(env, "spec", None)
        gym.logger.warn("You are calling render method without specifying any render mode. You can specify the "
                        f"render_mode at initialization, e.g. gym.make(\"{spec.id if spec else type(env).__name__}\", "
                        f"render_mode=\"{env.metadata['render_modes'][0]}\")")
    return None


def observation_text(obs) -> str:
    """The text of an observation: the observation itself, or its "text" part (grid envs with images)."""
    return obs["text"] if isinstance(obs, dict) else str(obs)


def declared(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, **metadata):
    """A dataclass field with its metadata declared beside it: ``help`` (its command-line help), ``flag``, ...;
    ``factory`` makes its default per instance (a list, a dict, a nested config)."""
    return dataclasses.field(default=default, default_factory=factory, metadata=metadata)


def bounded(default, *, min=None, above=None, max=None, why: str = "", **metadata):
    """A dataclass field whose bounds are declared with it: at least ``min``, more than ``above``, at most
    ``max`` (``why``: the reason a message gives); ``check_bounds`` checks them. Other keywords are metadata."""
    limits = {k: v for k, v in (("min", min), ("above", above), ("max", max)) if v is not None}
    return dataclasses.field(default=default, metadata={**metadata, "bounds": limits, "why": why})


def check_bounds(config, name=None) -> None:
    """A ValueError for each field of the dataclass ``config`` outside the bounds ``bounded`` declared (None
    passes where the field's type admits it); ``name(field)``: what a message calls it (default: its name)."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        limits = f.metadata.get("bounds")
        value = getattr(config, f.name)
        optional = type(None) in typing.get_args(hints.get(f.name))
        if not limits or value is None and optional:
            continue
        Bounds(**limits, why=f.metadata.get("why", "")).check(name(f) if name else f.name, value, optional=optional)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The allowed values of a number: at least ``min``, more than ``above``, at most ``max`` (None: no such
    bound); ``why`` is the reason an error gives. An env declares its arguments' in ``argument_bounds``,
    a config its fields' with ``bounded``. A pair or list (Sokoban's ``dim_room``) holds each of its numbers
    to them."""

    min: float | None = None
    max: float | None = None
    above: float | None = None
    why: str = ""

    def text(self) -> str:
        """The bounds in words: "in [2, 9]", ">= 0", "> 0 and <= 1"."""
        if self.min is not None and self.max is not None:
            return f"in [{self.min}, {self.max}]"
        return " and ".join(f"{op} {v}" for v, op in ((self.min, ">="), (self.above, ">"), (self.max, "<="))
                            if v is not None)

    def admits(self, value) -> bool:
        """Whether ``value`` is a number within the bounds (a bool, a string or NaN is not)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        return (self.min is None or value >= self.min) and (self.above is None or value > self.above) \
            and (self.max is None or value <= self.max) and value == value

    def check(self, name: str, value, optional: bool = False) -> None:
        """A ValueError unless ``value`` (each of its numbers, for a pair or list) is within the bounds:
        "size must be in [4, 9] (why), got 16"."""
        values = list(value) if isinstance(value, (tuple, list)) else [value]
        if values and all(self.admits(v) for v in values):
            return
        subject = f"each number of {name}" if isinstance(value, (tuple, list)) else name
        why = f" ({self.why})" if self.why else ""
        raise ValueError(f"{subject} must be {self.text()}{why}{' or None' if optional else ''}, got {_brief(value)}")


def _brief(value) -> str:
    """``repr(value)``, cut short (an int past Python's 4,300 printable digits has none)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer too long to print"
    return text if len(text) <= 100 else text[:100] + "..."


#: The bounds of every env's ``max_steps``: an LLM agent's episode is far shorter, and the oracles that plan
#: over the steps left (FrozenLake's value iteration) stay quick.
MAX_STEPS = Bounds(min=1, max=10_000, why="steps of one episode")


def call_arguments(cls: type, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of the call ``cls(*args, **kwargs)`` by name, those a ``**`` parameter takes included;
    empty when they do not fit ``cls.__init__``, whose own TypeError then says why."""
    signature = inspect.signature(cls.__init__)
    try:
        named = dict(signature.bind_partial(None, *args, **kwargs).arguments)
    except TypeError:
        return {}
    for name, parameter in signature.parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:
            named.update(named.pop(name, {}))
    return named


def check_argument_bounds(cls: type, arguments: dict[str, Any]) -> None:
    """A ValueError for the first of ``arguments`` (name -> value) outside the bounds the env class declares
    in ``argument_bounds``; None passes (an optional argument left to its default). ``LLMEnv.__new__`` and
    ``registry.check_arguments`` (gym.make) call it: the one place an env's bounds are checked."""
    bounds = getattr(cls, "argument_bounds", {})
    for name, value in arguments.items():
        if name in bounds and value is not None:
            bounds[name].check(name, value)


class GenerationBudgetError(ValueError):
    """A generator spent its counted budget (search nodes, attempts) in one reset: the env's arguments ask for
    more than a reset may cost. ``argument`` names the argument to change."""

    def __init__(self, message: str, argument: str):
        super().__init__(message)
        self.argument = argument


class Budget:
    """The work one generation may do, counted: ``spend()`` once a unit (a search node, an attempt); past
    ``limit`` units it raises a GenerationBudgetError naming ``argument`` and its ``value``, with ``advice``.
    ``used`` is the count so far, which tests read (they count work, never time it)."""

    def __init__(self, limit: int, unit: str, argument: str, value, advice: str):
        self.limit, self.unit, self.argument, self.value, self.advice = limit, unit, argument, value, advice
        self.used = 0

    def spend(self, count: int = 1) -> None:
        self.used += count
        if self.used > self.limit:
            raise GenerationBudgetError(f"generation took more than {self.limit:,} {self.unit} with "
                                        f"{self.argument}={_brief(self.value)}: {self.advice}", self.argument)


def check_solution_lengths(lengths) -> tuple[int, ...] | None:
    """An env's ``solution_lengths`` argument as a tuple (None: lengths as generated), or a ValueError: a
    non-empty list of positive integers (each number's bounds are the env's ``argument_bounds``)."""
    if lengths is None:
        return None
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__") or not list(lengths) or any(
            isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in lengths):
        raise ValueError("solution_lengths must be None or a non-empty list of positive integers (the optimal "
                         f"solution lengths episodes are drawn among, a length listed twice drawn twice as "
                         f"often), got {_brief(lengths)}")
    return tuple(int(n) for n in lengths)


def check_choices(config, name=None) -> None:
    """A ValueError for each field of the dataclass ``config`` typed ``Literal[...]`` (or ``... | None``)
    whose value is not one of its choices: a config's option sets are written once, in its types.
    ``name(field)``: what a message calls it (default: its name)."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        hint = hints.get(f.name)
        options = [hint] if typing.get_origin(hint) is typing.Literal else list(typing.get_args(hint))
        choices = [c for option in options if typing.get_origin(option) is typing.Literal
                   for c in typing.get_args(option)]
        if not choices:
            continue
        if type(None) in options:
            choices.append(None)
        value = getattr(config, f.name)
        if value not in choices:
            raise ValueError(f"{name(f) if name else f.name} must be one of {', '.join(map(repr, choices))}, "
                             f"got {value!r}")


def check_positive_int(name: str, value) -> None:
    """A ValueError unless ``value`` is an int >= 1 (a bool is not)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def open_text(action: str, max_chars: int) -> str | None:
    """An open-text action (an answer, a query) stripped, or None when it is empty, longer than
    ``max_chars`` or holds control characters other than tab and newline (a NUL is not an answer)."""
    text = action.strip()
    if not text or len(text) > max_chars or any(ord(c) < 32 and c not in "\t\n\r" or c == "\x7f" for c in text):
        return None
    return text


QUOTE_MORE = "... ({n} more characters)"


def quoted(text: str, max_chars: int) -> str:
    """``text`` as an env or a prompt quotes an agent's own words back: each whitespace run one space,
    other unprintable characters "?", and past ``max_chars`` characters cut with a note of how many were
    left out. Never longer than ``text`` itself (plus the note): quoting must not amplify a reply."""
    plain = "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))
    return plain if len(plain) <= max_chars else plain[:max_chars] + QUOTE_MORE.format(n=len(plain) - max_chars)


CLIP_NOTE = "\n[... {n} characters cut]"


def clip_text(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and a note of what was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(CLIP_NOTE.format(n=len(text))), 0)
    return text[:keep] + CLIP_NOTE.format(n=len(text) - keep)[:limit - keep]
