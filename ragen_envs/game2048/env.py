"""2048: slide the tiles, merge equal ones, build a large tile (RAGEN's game_2048).

Observation: the grid, one row per line (``.`` for an empty cell), the score so far (the sum of every
merged tile), and the moves that would change the grid.

Action: ``Up``, ``Right``, ``Down`` or ``Left`` (case-insensitive). Every tile slides that way as far as
it can; two equal tiles that meet merge into one of twice the value (each tile merges once a move).
After a move that changed the grid, a new tile appears in a random empty cell: 2 with probability
``two_prob`` (0.9), else 4. A move that changes nothing is allowed and only spends a step.

Reward: RAGEN's: 0.1 * log2(m + 1) for a move whose merges add up to m, 0 for a move without a merge
(RAGEN's penalty for a move that changes nothing is lost in its log scale: 0 as well). Success: a
tile of ``target`` (2048) or more.

Termination: terminated when no move can change the grid; truncated after ``max_steps`` (700, RAGEN's
actions per episode).

Arguments: ``size`` (4), ``target`` (2048), ``two_prob`` (0.9), ``max_steps`` (700), ``render_mode``. Their
bounds: ``argument_bounds`` (docs/envs.md's table).

``reset(seed=s)`` places the first two tiles from ``s``; ``options["transition_seed"]`` reseeds the
tiles that follow. ``oracle_action()`` is a one-move lookahead: the move with the most merged value,
then the most empty cells, keeping the largest tile in a corner; ``oracle_reasoning()`` says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragen_envs.base import MAX_STEPS, Bounds, TextEnv, check_positive_int

MOVES = ("Up", "Right", "Down", "Left")


def slide(grid: np.ndarray, move: str) -> tuple[np.ndarray, int]:
    """The grid after ``move`` (no new tile) and the value its merges add up to."""
    turned = np.rot90(grid, MOVES.index(move))  # rotate so the move is Up
    out = np.zeros_like(turned)
    merged = 0
    for c in range(turned.shape[1]):
        tiles = [int(v) for v in turned[:, c] if v]
        column, k = [], 0
        while k < len(tiles):
            if k + 1 < len(tiles) and tiles[k] == tiles[k + 1]:
                column.append(2 * tiles[k])
                merged += 2 * tiles[k]
                k += 2
            else:
                column.append(tiles[k])
                k += 1
        out[:len(column), c] = column
    return np.rot90(out, -MOVES.index(move)), merged


class Game2048Env(TextEnv):
    agent_info_keys = ("score", "max_tile")  # read off the grid
    valid_actions = list(MOVES)
    argument_bounds = {
        "size": Bounds(min=2, max=8, why="rows and columns; the largest tile, 2 ** (cells + 1), stays a float"),
        "target": Bounds(min=4, max=2 ** 20, why="a power of two"),
        "two_prob": Bounds(min=0, max=1, why="the chance that a new tile is a 2"),
        "max_steps": MAX_STEPS,
    }

    def __init__(self, size: int = 4, target: int = 2048, two_prob: float = 0.9, max_steps: int = 700,
                 render_mode: str | None = None):
        check_positive_int("max_steps", max_steps)
        if not isinstance(size, int):  # the bounds of the numbers: argument_bounds
            raise ValueError(f"size must be an integer, got {size!r}")
        if not isinstance(target, int) or target & (target - 1):
            raise ValueError(f"target must be a power of two >= 4, got {target!r}")
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.size, self.target, self.two_prob = size, target, two_prob
        # merges add up to at most the grid's sum, whose largest tile is 2 ** (cells + 1)
        self.reward_range = (0.0, 0.1 * np.log2(size * size * 2.0 ** (size * size + 1) + 1))
        self.instructions = (
            f"Play 2048 on a {size}x{size} grid. Each move slides every tile Up, Right, Down or Left; two equal "
            f"tiles that meet merge into their sum, and a new tile (2 or 4) appears after every move that changes "
            f"the grid. A move scores 0.1 * log2(m + 1) for merges adding up to m. Build a {target} tile. Answer "
            f"with one move.")
        self.grid = np.zeros((size, size), dtype=np.int64)
        self.score = 0

    def _spawn(self) -> None:
        empty = np.argwhere(self.grid == 0)
        if len(empty):
            r, c = empty[int(self.np_random.integers(len(empty)))]
            self.grid[r, c] = 2 if self.np_random.random() < self.two_prob else 4

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        self.grid = np.zeros((self.size, self.size), dtype=np.int64)
        self.score = 0
        self._spawn()
        self._spawn()
        return {}

    def parse_action(self, action: str) -> str | None:
        return self.parse_choice(action)

    def moves(self) -> list[str]:
        """The moves that would change the grid."""
        return [m for m in MOVES if not np.array_equal(slide(self.grid, m)[0], self.grid)]

    def _apply(self, move: str) -> tuple[float, bool, bool]:
        after, merged = slide(self.grid, move)
        if np.array_equal(after, self.grid):
            return 0.0, False, False
        self.grid = after
        self.score += merged
        self._spawn()
        return (0.1 * float(np.log2(merged + 1)) if merged else 0.0), not self.moves(), True

    def _text(self) -> str:
        width = len(str(int(self.grid.max()))) if self.grid.any() else 1
        rows = [" ".join(str(int(v)).rjust(width) if v else ".".rjust(width) for v in row) for row in self.grid]
        moves = self.moves()
        return "\n".join(rows) + f"\nScore: {self.score}. Moves that change the grid: {', '.join(moves) or 'none'}."

    def _is_success(self) -> bool:
        return int(self.grid.max()) >= self.target

    def _extra_info(self) -> dict[str, Any]:
        return {"score": self.score, "max_tile": int(self.grid.max())}

    def _ranked(self) -> list[tuple[tuple, str, int, int]]:
        """(key, move, merged, empty cells after) for each move that changes the grid, best first."""
        ranked = []
        for move in self.moves():
            after, merged = slide(self.grid, move)
            corner = int(max(after[0, 0], after[0, -1], after[-1, 0], after[-1, -1]) == after.max())
            empty = int((after == 0).sum())
            ranked.append(((merged, empty, corner), move, merged, empty))
        return sorted(ranked, reverse=True)

    def oracle_action(self) -> str | None:
        ranked = [] if self._terminated else self._ranked()
        return ranked[0][1] if ranked else None

    def oracle_reasoning(self) -> str | None:
        ranked = [] if self._terminated else self._ranked()
        if not ranked:
            return None
        _, move, merged, empty = ranked[0]
        r, c = np.unravel_index(int(self.grid.argmax()), self.grid.shape)
        gain = f"merges tiles worth {merged}" if merged else "merges nothing but keeps the grid open"
        return (f"The largest tile, {int(self.grid.max())}, is at row {r + 1} col {c + 1}, and "
                f"{int((self.grid == 0).sum())} cells are empty. {move} {gain}, leaving {empty} empty cells, the best "
                f"of {len(ranked)} possible moves.")
