"""Sokoban: push every box onto a target.

## Description
A warehouse room of walls (``#``) and floor (``_``), with targets (``O``), boxes (``X``) and the
player (``P``). The player walks Up, Down, Left or Right and pushes a box when walking into it,
provided the cell behind the box is free floor. Boxes cannot be pulled. Levels are generated from
the env's random generator by reverse play (see ``generator.py``): always solvable, never solved at
the start.

## Observation
Text (``observation_type="text"``, the default): the board in ``grid`` format, one row per line,
with ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P`` player,
``S`` player on target; or ``coord`` (board size and coordinates of player, boxes, targets and inner
walls), or ``grid_coord`` (both). ``observation_type="image"`` gives an RGB array
(rows*32, cols*32, 3); ``"both"`` a dict ``{"text", "image"}``.

## Action
Text, case-insensitive: ``"Up"``, ``"Down"``, ``"Left"``, ``"Right"``. Anything else is invalid:
nothing changes, reward 0, ``info["action_is_valid"] = False``.

## Reward
``reward="shaped"`` (the default, as gym-sokoban and RAGEN): -0.1 per valid step, +1 for pushing a box onto
a target, -1 for pushing one off, +10 when all boxes are on targets. ``reward="success"``: 1 on the step
that puts the last box on its target, else 0 (a binary reward: no step penalty to rank episodes that fail).

## Episode end
Terminated when every box is on a target (``info["success"]``). Truncated after ``max_steps`` calls to
``step`` (invalid ones included).

## Options
``reset(options={"level": text})`` plays a given level written in the ``grid`` symbols instead of a
generated one (fixed evaluation sets, tests).

## Info
Every step: ``action_is_valid``, ``action_is_effective`` (the player moved), ``success``.
At reset also ``optimal_solution_length``: the fewest moves that solve the level (difficulty), or
None if the solve ran past ``solver_nodes`` (about 3% of 10x10 rooms with 3 boxes).

## Arguments
``dim_room=(6, 6)`` (rows, cols, border included), ``num_boxes=1``, ``max_steps=100``,
``search_depth=300`` (moves of reverse play; deeper walks give harder levels), ``solver_nodes=8000``
(states the optimal-length solve at reset may expand before it reports None: it bounds the reset's
cost; at 10x10 with 3 boxes about 3% of levels exceed it, the default rooms never),
``observation_format="grid"``, ``observation_type="text"``, ``symbols="#_O√XPS"`` (the ``grid`` symbols of
wall, floor, target, box on target, box, player, player on target; RAGEN's SokobanDifferentGridVocab
uses ``"W.GCBA@"``), ``render_mode`` (``ansi``,
``rgb_array``, ``human``), ``reward="shaped"`` (above), ``solution_lengths=None`` (a mix of difficulties: each
level's optimal solution is as many moves as a length drawn from this list, levels generated until one is,
e.g. ``(1, 1, 10)``: two one-push levels for each ten-move one; None: as generated, 1-13 moves at 6x6).
Their bounds: ``argument_bounds`` (docs/envs.md's table). Arguments where no level
turns up in ``generator.MAX_ATTEMPTS`` rooms carved raise a GenerationBudgetError naming ``dim_room``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragen_envs import rendering
from ragen_envs.base import MAX_STEPS, Bounds, check_positive_int, check_solution_lengths
from ragen_envs.grid import ACTION_NAMES, DIRECTIONS, GridEnv, ObservationFormat, ObservationType, format_cells
from ragen_envs.sokoban.generator import Level, generate_level
from ragen_envs.sokoban.solver import solve

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)

STEP_PENALTY = -0.1
BOX_ON_REWARD = 1.0
BOX_OFF_PENALTY = -1.0
SOLVED_REWARD = 10.0

INSTRUCTIONS = """You are solving the Sokoban puzzle. You are the player; push all boxes onto targets.
When you are right next to a box, you can push it by moving in the same direction.
You cannot push a box through a wall, and you cannot pull a box.
Symbols: {legend}.
Rewards: {rewards}.
Valid actions: Up, Down, Left, Right."""
REWARDS = {  # each reward scheme in the instructions' words
    "shaped": "-0.1 per move, +1 for a box pushed onto a target, -1 for a box pushed off a target,\n"
              "+10 when every box is on a target",
    "success": "1 when every box is on a target, 0 otherwise",
}
TILE_NAMES = ("wall", "floor", "target", "box on target", "box", "player", "player on target")  # in tile order


def _atlas() -> np.ndarray:
    floor = rendering.blank((190, 180, 160))
    target = rendering.disc(floor, (200, 40, 40), radius=11, ring=3)
    box = rendering.square(floor, (170, 110, 40), margin=4, cross=(110, 65, 20))
    player = rendering.disc(floor, (40, 90, 200), radius=11)
    return np.stack([
        rendering.bricks((120, 60, 50), (70, 70, 70)),  # wall
        floor,
        target,
        rendering.square(floor, (60, 160, 60), margin=4, cross=(30, 100, 30)),  # box on target
        box,
        player,
        rendering.disc(target, (40, 90, 200), radius=7),  # player on target
    ])


class SokobanEnv(GridEnv):
    """Sokoban for LLM agents. See the module docstring for spaces, rewards and arguments."""

    reset_options = ("level",)
    argument_bounds = {
        "dim_room": Bounds(min=3, max=20, why="rows and columns, the border included"),
        "num_boxes": Bounds(min=1, max=10, why="at most a third of the room's inner cells"),
        "max_steps": MAX_STEPS,
        "search_depth": Bounds(min=1, max=1000, why="moves of each reverse walk; four walks a room"),
        "solver_nodes": Bounds(min=1, max=50_000, why="states the solve at reset expands, each a few microseconds"),
        "solution_lengths": Bounds(min=1, max=1000, why="moves of the optimal solution"),
    }

    SYMBOLS = "#_O√XPS"
    ATLAS = _atlas()
    # a step pays its penalty plus a box pushed on or off a target, plus the bonus on the last box
    reward_range = (STEP_PENALTY + BOX_OFF_PENALTY, STEP_PENALTY + BOX_ON_REWARD + SOLVED_REWARD)

    def __init__(self, dim_room: tuple[int, int] = (6, 6), num_boxes: int = 1, max_steps: int = 100,
                 search_depth: int = 300, solver_nodes: int = 8000,
                 observation_format: ObservationFormat = "grid", observation_type: ObservationType = "text",
                 symbols: str = SYMBOLS, render_mode: str | None = None,
                 reward: Literal["shaped", "success"] = "shaped", solution_lengths: tuple[int, ...] | None = None):
        rows, cols = _pair("dim_room", dim_room)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(map(repr, REWARDS))}, got {reward!r}")
        if not isinstance(symbols, str) or len(symbols) != len(TILE_NAMES) or len(set(symbols)) != len(symbols) \
                or any(ch.isspace() for ch in symbols):
            raise ValueError(f"symbols must be {len(TILE_NAMES)} different characters, one for each of "
                             f"{', '.join(TILE_NAMES)} (default {self.SYMBOLS!r}), got {symbols!r}")
        inner = (max(rows - 2, 0), max(cols - 2, 0))
        if min(inner) < 1 or max(inner) < 3:
            raise ValueError(f"dim_room={dim_room!r} is too small for any box: one push needs three free cells "
                             f"in a line (player, box, target), and its walls leave {inner[0]}x{inner[1]}; "
                             "try (6, 6)")
        if not isinstance(num_boxes, int) or not 1 <= num_boxes <= (rows - 2) * (cols - 2) // 3:
            raise ValueError(
                f"num_boxes must be an integer from 1 to a third of the room's inner cells, got {num_boxes!r}"
            )
        check_positive_int("search_depth", search_depth)
        check_positive_int("solver_nodes", solver_nodes)
        super().__init__((rows, cols), max_steps, observation_format, observation_type, render_mode)
        self.SYMBOLS = symbols  # the board's text, the legend and reset's "level" option all use them
        said = (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET)  # the legend's order, as always
        self.instructions = INSTRUCTIONS.format(legend=", ".join(f"{symbols[k]} {TILE_NAMES[k]}" for k in said),
                                                rewards=REWARDS[reward])
        self.reward = reward
        if reward == "success":
            self.reward_range = (0.0, 1.0)
        self.solution_lengths = check_solution_lengths(solution_lengths)
        self.dim_room = (rows, cols)
        self.num_boxes = num_boxes
        self.search_depth = search_depth
        self.solver_nodes = solver_nodes
        self._level: Level | None = None

    # -- episode ---------------------------------------------------------------------------------
    def _new_episode(self, options):
        if "level" in options:
            self._level = self._level_from_text(options["level"])
        else:
            self._level = generate_level(self.np_random, self.dim_room, self.num_boxes, self.search_depth)
        self._boxes = set(self._level.boxes)
        self._player = self._level.player
        solution = self.solve(max_nodes=self.solver_nodes)
        return {"optimal_solution_length": None if solution is None else len(solution)}

    def _apply(self, action: str):
        shaped, effective = self._move(action)
        solved = self._is_success()
        if self.reward == "success":
            return float(solved), solved, effective
        return shaped + solved * SOLVED_REWARD, solved, effective

    def _move(self, action: str) -> tuple[float, bool]:
        """Walk or push; the shaped reward of the move (its step, a box on or off a target) and whether it moved."""
        level = self._level
        dr, dc = DIRECTIONS[action]
        step = dr * level.cols + dc
        dest = self._player + step
        reward = STEP_PENALTY
        if level.walls.flat[dest]:
            return reward, False
        if dest in self._boxes:
            land = dest + step
            if level.walls.flat[land] or land in self._boxes:
                return reward, False
            self._boxes.remove(dest)
            self._boxes.add(land)
            reward += (land in level.targets) * BOX_ON_REWARD + (dest in level.targets) * BOX_OFF_PENALTY
        self._player = dest
        return reward, True

    def _is_success(self) -> bool:
        return self._level is not None and self._boxes <= self._level.targets

    def _level_from_text(self, text: str) -> Level:
        codes = self.parse_grid(text)
        rows, cols = codes.shape
        flat = codes.ravel()
        walls = codes == WALL
        if not (walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()):
            raise ValueError("a Sokoban level must be enclosed by walls (#)")
        players = np.flatnonzero((flat == PLAYER) | (flat == PLAYER_ON_TARGET))
        targets = np.flatnonzero(np.isin(flat, (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)))
        boxes = np.flatnonzero((flat == BOX) | (flat == BOX_ON_TARGET))
        if len(players) != 1 or len(boxes) != self.num_boxes or len(targets) != len(boxes):
            raise ValueError(
                f"a Sokoban level needs one player and num_boxes={self.num_boxes} boxes and targets; "
                f"got {len(players)} players, {len(boxes)} boxes, {len(targets)} targets"
            )
        return Level(rows, cols, walls, frozenset(targets.tolist()), frozenset(boxes.tolist()),
                     int(players[0]))

    # -- oracle ----------------------------------------------------------------------------------
    def solve(self, max_nodes: int = 200_000) -> list[str] | None:
        """Shortest action sequence solving the current position; None if unsolvable or over budget."""
        level = self._level
        if level is None:
            raise RuntimeError("call reset() before solve()")
        moves = solve(level.walls, level.targets, self._boxes, self._player, max_nodes=max_nodes)
        return None if moves is None else [ACTION_NAMES[d] for d in moves]

    def oracle_action(self) -> str | None:
        """The first move of an optimal solution; None when the position is lost (a box stuck)."""
        plan = self.solve()
        return plan[0] if plan else None

    def oracle_reasoning(self) -> str | None:
        """Where the player, the boxes and the targets are, and what the solver's next move does."""
        plan = self.solve()
        if not plan:
            return None
        cols = self._level.cols
        action = plan[0]
        dr, dc = DIRECTIONS[action]
        dest = self._player + dr * cols + dc
        effect = (f"pushes the box at {self._cells([dest])} to {self._cells([dest + dr * cols + dc])}"
                  if dest in self._boxes else f"moves me to {self._cells([dest])}")
        facts = self.facts()
        return (f"{facts['position']}; {facts['boxes']}; {facts['targets']}. {action} {effect}. "
                f"{len(plan)} move{'s solve' if len(plan) > 1 else ' solves'} it.")

    def facts(self) -> dict[str, str]:
        return {"position": f"I am at {self._cells([self._player])}", "boxes": f"boxes at {self._cells(self._boxes)}",
                "targets": f"targets at {self._cells(self._level.targets)}"}

    def _cells(self, flat) -> str:
        """Flat cell indices as "(r, c), (r, c)", in index order."""
        return format_cells(divmod(i, self._level.cols) for i in sorted(flat))

    # -- views -----------------------------------------------------------------------------------
    def _tile_codes(self) -> np.ndarray:
        level = self._level
        codes = np.where(level.walls, WALL, FLOOR).ravel()
        codes[list(level.targets)] = TARGET
        for b in self._boxes:
            codes[b] = BOX_ON_TARGET if b in level.targets else BOX
        codes[self._player] = PLAYER_ON_TARGET if self._player in level.targets else PLAYER
        return codes.reshape(level.rows, level.cols)

    def _coord_lines(self) -> list[str]:
        level, cells = self._level, self._cells
        inner = level.walls[1:-1, 1:-1]
        walls = [(r + 1) * level.cols + c + 1 for r, c in zip(*np.nonzero(inner))]
        return [
            f"Player: {cells([self._player])}",
            f"Boxes: {cells(self._boxes)}",
            f"Targets: {cells(level.targets)}",
            f"Walls: the outer border, and {cells(walls)}",
        ]


def _pair(name: str, value) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in value)
        if (rows, cols) != tuple(value):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of integers (rows, cols), got {value!r}") from None
    return rows, cols
