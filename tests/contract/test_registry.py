"""The catalogue: registration, presets, optional extras, roles, and env ids only where they belong."""

import ast
import re
from pathlib import Path
from typing import Literal

import gymnasium as gym
import pytest

from ragen_envs import CATALOGUE, ENVIRONMENTS, EnvEntry, MissingExtraError
from ragen_envs.registry import register, type_mismatch, usable_ids
from conftest import DEFAULT, env_params


@pytest.mark.parametrize("env_id", env_params(list(ENVIRONMENTS)))
def test_every_catalogue_entry_is_registered(env_id):
    entry = ENVIRONMENTS[env_id]
    env = gym.make(env_id)
    assert env.unwrapped.spec.id == env_id
    for name, value in entry.kwargs.items():  # presets are applied
        assert getattr(env.unwrapped, name, value) == value
    assert entry.description and "\n" not in entry.description
    env.close()


def option_arguments(env_id: str) -> dict[str, tuple]:
    """The env class's arguments typed ``Literal[...]``: its option sets, written once, in its signature."""
    import typing

    from ragen_envs.registry import load_class

    hints = typing.get_type_hints(load_class(ENVIRONMENTS[env_id]).__init__)
    return {name: typing.get_args(h) for name, h in hints.items() if typing.get_origin(h) is Literal}


def test_the_envs_option_sets_are_literal_types():
    found = {env_id: option_arguments(env_id) for env_id in usable_ids()}
    names = {name for options in found.values() for name in options}
    # the grid games' formats and the text tasks' scoring options (RAGEN's rule or ours) all are Literals
    assert {"observation_format", "observation_type", "answer_check", "selection", "invalid_action", "success",
            "reward", "observation", "compare"} <= names


@pytest.mark.parametrize("env_id", env_params(list(ENVIRONMENTS)))
def test_gym_make_refuses_a_value_outside_an_option_set(env_id):
    for name, choices in option_arguments(env_id).items():
        with pytest.raises(ValueError, match=f"argument {name!r} must be one of {', '.join(map(repr, choices))}"):
            gym.make(env_id, **{name: "no-such-option"})


def test_a_missing_extra_is_named_at_make():
    register(EnvEntry("RagenTest/NeedsExtra-v0", "ragen_envs.sokoban:SokobanEnv", "needs a package",
                      extra="shop", requires=("no_such_module_for_ragen",)))
    with pytest.raises(MissingExtraError, match=r'pip install "ragen-envs\[shop\]"'):
        gym.make("RagenTest/NeedsExtra-v0")
    del ENVIRONMENTS["RagenTest/NeedsExtra-v0"]


def test_usable_ids_leave_out_what_cannot_run_here():
    needs_extra = EnvEntry("RagenTest/NeedsModule-v0", "ragen_envs.sokoban:SokobanEnv", "needs a package",
                           extra="shop", requires=("no_such_module_for_ragen",))
    needs_program = EnvEntry("RagenTest/NeedsProgram-v0", "ragen_envs.sokoban:SokobanEnv", "needs a program",
                             system="nothing", system_check="platform:system")  # a non-empty answer: a problem
    for entry in (needs_extra, needs_program):
        register(entry)
    try:
        usable = usable_ids()
        assert DEFAULT in usable and needs_extra.id not in usable and needs_program.id not in usable
    finally:
        for entry in (needs_extra, needs_program):
            del ENVIRONMENTS[entry.id]


def test_module_prefixed_id():
    env = gym.make(f"ragen_envs:{DEFAULT}")
    assert env.unwrapped.spec.id == DEFAULT


def test_each_role_is_played_by_one_entry():
    from ragen_envs.registry import ROLES, env_for

    for role in ROLES:
        assert [e.id for e in ENVIRONMENTS.values() if role in e.roles] == [env_for(role)]
    smoke = gym.make(env_for("smoke"), **ENVIRONMENTS[env_for("smoke")].test_kwargs)
    assert smoke.get_wrapper_attr("valid_actions")  # the shared tests reply with its actions


def test_each_of_ragens_tasks_is_one_entry():
    from ragen_envs.registry import env_for_task, ragen_tasks

    named = [e.ragen_task for e in ENVIRONMENTS.values() if e.ragen_task]
    assert len(named) == len(set(named)) == len(ragen_tasks())
    # RAGEN's main table (run_main_table_diff_algo.sh --tasks) and its Sokoban sweeps' config, _2_sokoban
    # (base.yaml's CoordSokoban); _3_frozen_lake's CoordFrozenLake with success_rate 1
    assert {"sokoban", "frozenlake", "webshop", "metamathqa", "countdown"} <= set(named)
    sokoban, lake = ENVIRONMENTS[env_for_task("sokoban")], ENVIRONMENTS[env_for_task("frozenlake")]
    assert sokoban.package == "sokoban" and sokoban.kwargs == {"observation_format": "grid_coord"}
    assert lake.kwargs == {"observation_format": "grid_coord"} and gym.make(lake.id).unwrapped.slip == 0
    with pytest.raises(ValueError, match="countdown"):
        env_for_task("chess")


ROOT = Path(__file__).resolve().parents[2]
ENV_SETTINGS = Path("trainers/env_settings.py")  # the trainer layer's settings of each env, keyed by its id


def _code_strings(path: Path) -> list[str]:
    """The string literals of a Python file's code (f-string parts too), not its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_file_outside_an_envs_package_entry_and_test_names_its_id():
    """Every fact about an env is in its package and its catalogue entry: code elsewhere (the agent,
    trainers, CLI, server, benchmarks, shared tests, Makefile) reads the entry, by role or package,
    and never writes an env id. The env's own test file (tests/test_<package>*.py) may, and so may
    trainers/env_settings.py, the trainer settings keyed by env id (its part of each preset, its organism's)."""
    ids = {e.id: e.package for e in ENVIRONMENTS.values()}
    pattern = re.compile("|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)))
    files = [*ROOT.glob("ragen_envs/**/*.py"), *ROOT.glob("trainers/**/*.py"), *ROOT.glob("benchmarks/**/*.py"),
             *ROOT.glob("tests/**/*.py"), ROOT / "Makefile", ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
    offenders = []
    for path in files:
        rel = path.relative_to(ROOT)
        texts = _code_strings(path) if path.suffix == ".py" else [path.read_text()]
        for env_id in {m.group(0) for text in texts for m in pattern.finditer(text)}:
            package = ids[env_id]
            if rel in (Path("ragen_envs/registry.py"), ENV_SETTINGS) or rel.parts[:2] == ("ragen_envs", package) or \
                    (rel.parts[0] == "tests" and rel.name.startswith(f"test_{package}")):
                continue
            offenders.append(f"{rel}: {env_id}")
    assert offenders == [], "\n".join(offenders)


def test_the_trainers_env_settings_name_catalogue_ids_and_presets():
    """trainers/env_settings.py keys each env's trainer settings by its catalogue id: a typo, or an env
    removed from the catalogue, would leave settings that nothing reads; its preset names are presets."""
    from trainers.config import PRESETS
    from trainers.env_settings import ORGANISM_SFT_PARTS, PRESET_PARTS

    ids = {e.id for e in CATALOGUE}
    assert set(PRESET_PARTS) - ids == set() and set(ORGANISM_SFT_PARTS) - ids == set()
    assert {name for parts in PRESET_PARTS.values() for name in parts} - set(PRESETS) == set()


@pytest.mark.parametrize("value, hint, classes, wanted", [
    (3, int, False, None), (True, int, False, "an integer"), (2, float, False, None),
    ("x", float | None, False, "a number or None"), (None, float | None, False, None),
    ("c", Literal["a", "b"], False, "one of 'a', 'b'"), ("a", Literal["a", "b"], False, None),
    ("x", list[int], False, None), ("x", list[int], True, "a list"), ([1], list[int] | None, True, None),
])
def test_type_mismatch_names_what_was_wanted(value, hint, classes, wanted):
    """One check for env arguments and run-config keys: bool is no integer, a Literal lists its choices,
    classes only where asked."""
    assert type_mismatch(value, hint, classes) == wanted
