"""FrozenLake: walk over the ice to the goal without falling into a hole.

## Description
A ``size`` x ``size`` lake of frozen tiles (``_``) and holes (``O``), generated from the env's random
generator: each tile is frozen with probability ``p``, start and goal are any two distinct frozen
tiles, and maps without a frozen path from start to goal are drawn again. With probability ``slip``
a move goes to one of the two perpendicular directions instead (each with ``slip / 2``): 0 is
deterministic (the paper's default runs), 1 always slips.

## Observation
Text (default): ``grid`` format, one row per line, ``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal,
``X`` player in a hole, ``√`` player on the goal; ``coord`` (board size, coordinates of player, goal
and holes) or ``grid_coord`` (both). ``observation_type="image"``: an RGB array (size*32, size*32, 3);
``"both"``: a dict ``{"text", "image"}``.

## Action
Text, case-insensitive: ``"Up"``, ``"Down"``, ``"Left"``, ``"Right"``; anything else is invalid
(nothing changes, reward 0, ``info["action_is_valid"] = False``). A move off the board stays put.

## Reward
1 on reaching the goal, else 0.

## Episode end
Terminated in a hole or at the goal (``info["success"]``); truncated after ``max_steps`` calls to
``step`` (invalid ones included).

## Options
``reset(options={"map": text})`` plays a given map written with ``P``, ``_``, ``O`` and ``G``.

## Info
Every step: ``action_is_valid``, ``action_is_effective`` (the player moved), ``success``.
At reset also ``optimal_solution_length``: the shortest path's length in moves (None: no path).

## Arguments
``size=4``, ``p=0.8`` (frozen-tile probability), ``slip=0.0``, ``max_steps=100``,
``observation_format="grid"``, ``observation_type="text"``, ``render_mode`` (``ansi``,
``rgb_array``, ``human``), ``solution_lengths=None`` (a mix of difficulties: each map's shortest path is
as many moves as a length drawn from this list, maps drawn until one is, e.g. ``(1, 6)``: half one-move
maps, half six-move ones; None: as drawn, 1-7 moves at size 4). Their bounds: ``argument_bounds``
(docs/envs.md's table). A map is drawn at most ``MAX_ATTEMPTS`` times (a GenerationBudgetError naming ``p``
past that; with start and goal side by side in one draw of 100 even at size 20, it never comes to that).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ragen_envs import rendering
from ragen_envs.base import MAX_STEPS, Bounds, Budget, check_solution_lengths
from ragen_envs.grid import ACTION_NAMES, DIRECTIONS, GridEnv, ObservationFormat, ObservationType, format_cells

FROZEN, HOLE, GOAL, PLAYER, PLAYER_IN_HOLE, PLAYER_ON_GOAL = range(6)
MAX_ATTEMPTS = 10_000  # maps drawn before giving up (only for p so low that paths are rare)
SOLUTION_LENGTHS = Bounds(min=1, max=400, why="moves of the shortest path; a 20x20 lake's longest is under 400")

# The two directions perpendicular to each move, for slipping.
PERPENDICULAR = {"Up": ("Left", "Right"), "Down": ("Left", "Right"),
                 "Left": ("Up", "Down"), "Right": ("Up", "Down")}

INSTRUCTIONS = """You are walking on a frozen lake. Reach the goal without falling into a hole.
Symbols: _ frozen tile, O hole, G goal, P player, X player in a hole, √ player on the goal.
Reward: 1 for reaching the goal, 0 otherwise. Falling into a hole ends the episode.
A move off the edge of the lake leaves you where you are.
Valid actions: Up, Down, Left, Right."""

SLIP_NOTE = (
    "\nThe ice is slippery: with probability {slip:.0%} a move goes to one of the two perpendicular "
    "directions instead of the one you chose."
)


def _atlas() -> np.ndarray:
    ice = rendering.blank((200, 230, 245))
    hole = rendering.disc(ice, (30, 50, 90), radius=13)
    goal = rendering.square(ice, (240, 200, 40), margin=6)
    return np.stack([
        ice,
        hole,
        goal,
        rendering.disc(ice, (200, 60, 40), radius=9),
        rendering.disc(hole, (200, 60, 40), radius=7),
        rendering.disc(goal, (200, 60, 40), radius=7),
    ])


def generate_map(rng: np.random.Generator, size: int, p: float, budget: Budget | None = None):
    """(holes bool array, start, goal) with a frozen path from start to goal; each map drawn spends one
    unit of ``budget`` (default: ``MAX_ATTEMPTS`` maps)."""
    budget = budget or Budget(MAX_ATTEMPTS, "maps drawn", "p", p, "raise p, so that more maps have a path")
    while True:
        budget.spend()
        holes = rng.random((size, size)) >= p
        start, goal = (divmod(int(i), size) for i in rng.choice(size * size, size=2, replace=False))
        holes[start] = holes[goal] = False
        if shortest_path(holes, start, goal) is not None:
            return holes, start, goal


def shortest_path(holes: np.ndarray, start, goal) -> list[str] | None:
    """Fewest moves from start to goal over frozen tiles (breadth-first), or None."""
    size = holes.shape[0]
    came = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = []
            while came[cell] is not None:
                cell, action = came[cell]
                path.append(action)
            return path[::-1]
        for action, (dr, dc) in DIRECTIONS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and not holes[nxt] and nxt not in came:
                came[nxt] = (cell, action)
                queue.append(nxt)
    return None


class FrozenLakeEnv(GridEnv):
    """FrozenLake for LLM agents, with random maps and tunable slip. See the module docstring."""

    reset_options = ("map",)
    argument_bounds = {
        "size": Bounds(min=2, max=20, why="rows and columns"),
        "p": Bounds(above=0, max=1, why="the chance that a tile is frozen"),
        "slip": Bounds(min=0, max=1, why="the chance that a move slips sideways"),
        "max_steps": MAX_STEPS,
        "solution_lengths": SOLUTION_LENGTHS,
    }

    SYMBOLS = "_OGPX√"
    ATLAS = _atlas()

    def __init__(self, size: int = 4, p: float = 0.8, slip: float = 0.0, max_steps: int = 100,
                 observation_format: ObservationFormat = "grid", observation_type: ObservationType = "text",
                 render_mode: str | None = None, solution_lengths: tuple[int, ...] | None = None):
        if not isinstance(size, int):  # its bounds: argument_bounds
            raise ValueError(f"size must be an integer, got {size!r}")
        super().__init__((size, size), max_steps, observation_format, observation_type, render_mode)
        self.size, self.p, self.slip = size, float(p), float(slip)
        self.solution_lengths = check_solution_lengths(solution_lengths)
        self.instructions = INSTRUCTIONS + (SLIP_NOTE.format(slip=self.slip) if self.slip > 0 else "")
        self._holes = None

    def _new_episode(self, options):
        if "map" in options:
            self._holes, self._player, self._goal = self._map_from_text(options["map"])
        else:
            self._holes, self._player, self._goal = generate_map(self.np_random, self.size, self.p)
        path = self.shortest_path()
        return {"optimal_solution_length": None if path is None else len(path)}

    def _apply(self, action: str):
        u = self.np_random.random()
        if u < self.slip:  # slip: each perpendicular direction with probability slip / 2
            action = PERPENDICULAR[action][int(u >= self.slip / 2)]
        dr, dc = DIRECTIONS[action]
        r, c = self._player[0] + dr, self._player[1] + dc
        if not (0 <= r < self.size and 0 <= c < self.size):
            return 0.0, False, False
        self._player = (r, c)
        success = self._is_success()
        return float(success), success or bool(self._holes[r, c]), True

    def _is_success(self) -> bool:
        return self._holes is not None and self._player == self._goal

    def end_reason(self) -> str | None:
        if not self._terminated:
            return None
        return f"{'reached the goal' if self._is_success() else 'fell into a hole'} at {self._player}"

    def _map_from_text(self, text: str):
        codes = self.parse_grid(text)
        players, goals = np.argwhere(codes == PLAYER), np.argwhere(codes == GOAL)
        if len(players) != 1 or len(goals) != 1:
            raise ValueError("a FrozenLake map needs exactly one P (player) and one G (goal)")
        return codes == HOLE, tuple(int(v) for v in players[0]), tuple(int(v) for v in goals[0])

    # -- oracles ---------------------------------------------------------------------------------
    def shortest_path(self) -> list[str] | None:
        """Fewest moves from the player to the goal (optimal when ``slip == 0``); None if there is
        no path (a given map, or the player is in a hole)."""
        if self._holes is None:
            raise RuntimeError("call reset() before shortest_path()")
        if self._holes[self._player]:
            return None
        return shortest_path(self._holes, self._player, self._goal)

    def optimal_policy(self, horizon: int | None = None) -> np.ndarray:
        """Action names (size x size) maximising the chance of reaching the goal within ``horizon``
        moves (default: the steps left), given the slip probability. Computed by value iteration."""
        if self._holes is None:
            raise RuntimeError("call reset() before optimal_policy()")
        horizon = self.max_steps - self._elapsed_steps if horizon is None else horizon
        size = self.size
        value = np.zeros((size, size))
        value[self._goal] = 1.0
        # next_cell[a][r, c] = flat index reached from (r, c) by a move in direction a
        idx = np.arange(size * size).reshape(size, size)
        next_cell = {}
        for action, (dr, dc) in DIRECTIONS.items():
            rr = np.clip(np.arange(size)[:, None] + dr, 0, size - 1)
            cc = np.clip(np.arange(size)[None, :] + dc, 0, size - 1)
            next_cell[action] = idx[rr, cc]
        absorbing = self._holes.copy()
        absorbing[self._goal] = True
        q = np.zeros((4, size, size))
        for _ in range(max(horizon, 1)):
            flat = value.ravel()
            for a, action in enumerate(ACTION_NAMES):
                side1, side2 = PERPENDICULAR[action]
                q[a] = ((1 - self.slip) * flat[next_cell[action]]
                        + self.slip / 2 * (flat[next_cell[side1]] + flat[next_cell[side2]]))
            value = np.where(absorbing, value, q.max(axis=0))
        return np.array(ACTION_NAMES)[q.argmax(axis=0)]

    def optimal_action(self) -> str:
        """The optimal policy's action at the player's position."""
        return str(self.optimal_policy()[self._player])

    def oracle_action(self) -> str | None:
        """Without slip the first move of a shortest path; with slip the optimal policy's action
        (``optimal_action``), which maximises the chance of arriving (and can take a detour, since
        every arrival within the horizon counts the same). None once in a hole or on the goal."""
        if self._holes[self._player] or self._player == self._goal:
            return None
        if self.slip == 0:
            path = self.shortest_path()
            if path:
                return path[0]
        return self.optimal_action()

    def oracle_reasoning(self) -> str | None:
        """Where the player, the goal and the nearby holes are, and where the oracle's move leads."""
        action = self.oracle_action()
        if action is None:
            return None
        (r, c) = self._player
        dr, dc = DIRECTIONS[action]
        nr, nc = r + dr, c + dc
        near = [(r + a, c + b) for a, b in DIRECTIONS.values()
                if 0 <= r + a < self.size and 0 <= c + b < self.size and self._holes[r + a, c + b]]
        holes = f" Holes next to me: {format_cells(near)}." if near else " No hole is next to me."
        target = "the goal" if (nr, nc) == self._goal else f"({nr}, {nc})"
        path = self.shortest_path()
        left = f" {len(path)} move{'s' if len(path) > 1 else ''} to go." if path else ""
        slip = " The ice is slippery, so I keep away from holes." if self.slip else ""
        facts = self.facts()
        return f"{facts['position']} and {facts['goal']}.{holes} {action} takes me to {target}.{left}{slip}"

    def facts(self) -> dict[str, str]:
        (r, c), (gr, gc) = self._player, self._goal
        return {"position": f"I am at ({r}, {c})", "goal": f"the goal is at ({gr}, {gc})"}

    # -- views -----------------------------------------------------------------------------------
    def _tile_codes(self) -> np.ndarray:
        codes = np.where(self._holes, HOLE, FROZEN)
        codes[self._goal] = GOAL
        on = {FROZEN: PLAYER, HOLE: PLAYER_IN_HOLE, GOAL: PLAYER_ON_GOAL}
        codes[self._player] = on[codes[self._player]]
        return codes

    def _coord_lines(self) -> list[str]:
        return [
            f"Player: {format_cells([self._player])}",
            f"Goal: {format_cells([self._goal])}",
            f"Holes: {format_cells(zip(*np.nonzero(self._holes)))}",
        ]
