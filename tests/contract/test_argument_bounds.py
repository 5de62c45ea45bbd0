"""Every numeric argument of every catalogue env has declared bounds (``argument_bounds``), checked by
gym.make and by the class itself, and every allowed value resets: a reset at the extremes of each bound
plays, or spends its counted budget and says which argument to change. Work is counted, never timed."""

import inspect
import math
import typing

import gymnasium as gym
import pytest

from conftest import SMOKE, env_params
from ragen_envs import base
from ragen_envs.base import Bounds, GenerationBudgetError
from ragen_envs.countdown.generator import CountdownConfig
from ragen_envs.registry import CATALOGUE, load_class, missing_modules, usable_ids

# one entry per env class, the plain one (the first in the catalogue): presets only change arguments
FIRST_IDS = list({e.entry_point: e.id for e in reversed(CATALOGUE)}.values())[::-1]
SEEDS = (0, 1, 2)
GENERATORS = {"SokobanEnv", "FrozenLakeEnv", "SudokuEnv", "RubiksCubeEnv", "CountdownEnv"}  # count their work


def _entry(env_id):
    return next(e for e in CATALOGUE if e.id == env_id)


def _class(env_id):
    return load_class(_entry(env_id))


def numeric_arguments(cls) -> dict[str, object]:
    """The numeric parameters of ``cls.__init__`` (name -> default): annotated int or float (optionally
    with None), a pair of numbers by default, or a tuple of integers (its default shown as ``(1,)``); those
    a ``**`` parameter passes on to a config (Countdown's generator settings) too."""
    hints = typing.get_type_hints(cls.__init__)
    found = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        options = set(typing.get_args(hints.get(name))) or {hints.get(name)}
        if options - {type(None)} <= {int, float} and options - {type(None)} \
                or isinstance(parameter.default, tuple) and all(isinstance(v, int) for v in parameter.default):
            found[name] = parameter.default
        elif any(typing.get_origin(o) is tuple and typing.get_args(o)[:1] == (int,) for o in options):
            found[name] = (1,)  # a list of integers, None by default (solution_lengths): a list's shape
        if parameter.kind is parameter.VAR_KEYWORD and cls.__name__ == "CountdownEnv":
            found.update({f: getattr(CountdownConfig(), f) for f in CountdownConfig.__dataclass_fields__
                          if isinstance(getattr(CountdownConfig(), f), int)})
    return found


def extremes(bounds: Bounds) -> list:
    """The smallest and the largest value the bounds allow."""
    low = bounds.min if bounds.min is not None else math.nextafter(bounds.above, math.inf)
    return [low, bounds.max]


def outside(bounds: Bounds) -> list:
    """Values just outside the bounds."""
    return [bounds.min - 1 if bounds.min is not None else bounds.above, bounds.max + 1]


def shaped(value, default):
    """``value`` in the shape of the argument's default: a pair for a pair."""
    return tuple(value for _ in default) if isinstance(default, tuple) else value


@pytest.mark.parametrize("env_id", FIRST_IDS)
def test_every_numeric_argument_has_declared_bounds_that_hold_its_default(env_id):
    cls = _class(env_id)
    arguments = numeric_arguments(cls)
    assert "max_steps" in arguments or "max_attempts" in arguments
    assert set(arguments) == set(cls.argument_bounds), "declare bounds for exactly the numeric arguments"
    for name, default in arguments.items():
        if default is not None:
            cls.argument_bounds[name].check(name, default)  # raises if the default were outside


@pytest.mark.parametrize("env_id", FIRST_IDS)
def test_values_outside_the_bounds_are_refused_by_make_and_by_the_class(env_id):
    if missing_modules(_entry(env_id)):  # refused before the env's code runs: no system program needed
        pytest.skip("its extra is not installed")
    cls, preset = _class(env_id), _entry(env_id).without_system
    defaults = numeric_arguments(cls)
    for name, bounds in cls.argument_bounds.items():
        message = rf"^(each number of )?{name} must be {bounds.text()}".replace("[", r"\[")
        for value in outside(bounds):
            with pytest.raises(ValueError, match=message):
                gym.make(env_id, **preset, **{name: shaped(value, defaults[name])})
        for value in [*outside(bounds), float("nan"), float("inf"), True]:  # the class itself: no type check first
            with pytest.raises(ValueError, match=message):
                cls(**preset, **{name: shaped(value, defaults[name])})


@pytest.mark.parametrize("env_id", env_params(FIRST_IDS))
def test_resets_at_the_extremes_of_every_bound_play_or_name_the_argument(env_id, monkeypatch):
    if env_id not in usable_ids():
        pytest.skip("its extra is not installed")
    spent = []  # the units each budget spent, counted at every spend
    spend = base.Budget.spend

    def counting(self, count=1):
        spend(self, count)  # raises past the limit, as ever
        spent.append((self.argument, self.used, self.limit))

    monkeypatch.setattr(base.Budget, "spend", counting)
    cls, preset = _class(env_id), _entry(env_id).without_system
    defaults = numeric_arguments(cls)
    for name, bounds in cls.argument_bounds.items():
        made = 0
        for value in extremes(bounds):
            try:
                env = gym.make(env_id, **preset, **{name: shaped(value, defaults[name])})
            except ValueError as error:  # a rule of how arguments go together (holes < cells), not a bound
                assert "must be" in str(error) or "too small" in str(error) or "need" in str(error), error
                continue
            made += 1
            for seed in SEEDS:
                try:
                    env.reset(seed=seed)
                except GenerationBudgetError as error:
                    assert error.argument in cls.argument_bounds, error
            env.close()
        assert made, f"{name}: neither extreme of {bounds.text()} makes an env"
    assert all(used <= limit for _, used, limit in spent)
    assert bool(spent) == (cls.__name__ in GENERATORS)  # every generator's work is counted


@pytest.mark.parametrize("bad", [-1, 2 ** 64, 10 ** 4000, 1.5, True])
def test_a_transition_seed_is_an_integer_in_a_seeds_range(bad):
    env = gym.make(SMOKE)
    with pytest.raises(ValueError, match="transition_seed"):
        env.reset(seed=0, options={"transition_seed": bad})
    env.reset(seed=0, options={"transition_seed": 2 ** 64 - 1})
