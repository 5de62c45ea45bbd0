"""Sudoku: fill the grid one number at a time (RAGEN's SimpleSudoku).

Every row, column and box must hold each number 1..n once. Puzzles are generated with exactly one
solution (``puzzles.py``), so a placement is right or wrong, never a matter of taste.

Observation: the grid, row by row: the puzzle's fixed cells in brackets (``[5]``), numbers placed by
the agent as they are, empty cells as ``.``; then what the last action did (a conflict names the row,
column or box it clashes with, and the numbers that fit the cell) and how many cells are empty.

Action: one placement, 1-based: ``place 5 at row 2 col 3``, ``place 5 at (2,3)``, ``place 5 at 2,3``,
``5 at 2,3``, ``(2,3,5)`` or ``2,3,5`` (row, column, number), the whole action being the placement.
Anything else is invalid: nothing changes, reward 0.

Reward: ``correct_reward`` (1) for a number that fills an empty cell with the solution's number;
``mistake_penalty`` (-0.1) for a placement the rules refuse (a fixed cell, a clash with the row, column
or box, a number out of range), which changes nothing, and for a number that breaks no rule but is not
the solution's (it is placed, and may be overwritten later); ``solved_bonus`` (10) when the grid is
complete. A cell holding its solution's number is locked. So the total is at most the empty cells plus
the bonus, and only right numbers earn it. (RAGEN pays 0.5 for a legal wrong number, which a policy
could collect again and again by rewriting one cell: a departure on purpose.) Every placement's reward
says whether it was right, so trial and error over a cell's candidates is a strategy; each wrong try
costs the penalty and a turn of ``max_steps``, so it earns less than placing the right number, and the
audit (``benchmarks/audits/reward_audit.py``) measures it below the solver.

Termination: terminated when the grid is solved; truncated after ``max_steps`` (81) actions.

Arguments: ``size`` (9, or 4 for 2x2 boxes), ``holes`` (empty cells, 1 to 50 and fewer than the grid's;
default 40% of the grid, RAGEN's "easy"; where no more cells can be emptied with one solution left, the
puzzle has fewer), ``correct_reward=1.0``, ``mistake_penalty=-0.1``, ``solved_bonus=10.0``, ``max_steps=81``,
``render_mode``. Their bounds: ``argument_bounds`` (docs/envs.md's table).

``reset(seed=s)`` generates the puzzle from ``s``. ``oracle_action()`` places the solution's number in
the empty cell with the fewest candidates (a solver's move); ``oracle_reasoning()`` says why it fits.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ragen_envs.base import MAX_STEPS, Bounds, TextEnv, check_positive_int
from ragen_envs.sudoku.puzzles import box_side, candidates, generate

# A number has at most 4 digits: int() of a 4,301-digit numeral raises (Python's digit limit), and no
# grid is that big; a longer one is no placement.
N = r"\d{1,4}"
FORMATS = [re.compile(p.replace("NUM", N)) for p in (
    r"place\s+(?P<n>NUM)\s+at\s+row\s+(?P<r>NUM)\s*,?\s*col(?:umn)?\s+(?P<c>NUM)",
    r"place\s+(?P<n>NUM)\s+at\s+\(?\s*(?P<r>NUM)\s*,\s*(?P<c>NUM)\s*\)?",
    r"(?P<n>NUM)\s+at\s+\(?\s*(?P<r>NUM)\s*,\s*(?P<c>NUM)\s*\)?",
    r"\(?\s*(?P<r>NUM)\s*,\s*(?P<c>NUM)\s*,\s*(?P<n>NUM)\s*\)?",
)]


class SudokuEnv(TextEnv):
    agent_info_keys = ("empty_cells",)  # read off the grid
    argument_bounds = {
        "size": Bounds(min=4, max=9, why="a square: 4 or 9; a 16x16 puzzle with one solution takes minutes to make"),
        "holes": Bounds(min=1, max=50, why="empty cells; a sparser puzzle takes long to prove it has one solution"),
        "correct_reward": Bounds(above=0, max=100, why="pays a right number"),
        "mistake_penalty": Bounds(min=-100, max=0, why="a penalty"),
        "solved_bonus": Bounds(min=0, max=1000, why="a bonus"),
        "max_steps": MAX_STEPS,
    }

    def __init__(self, size: int = 9, holes: int | None = None, correct_reward: float = 1.0,
                 mistake_penalty: float = -0.1, solved_bonus: float = 10.0, max_steps: int = 81,
                 render_mode: str | None = None):
        box_side(size)
        holes = int(size * size * 0.4) if holes is None else holes
        check_positive_int("holes", holes)
        check_positive_int("max_steps", max_steps)
        if holes >= size * size:
            raise ValueError(f"holes must be fewer than the {size * size} cells, got {holes}")
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.size, self.holes = size, holes
        self.correct_reward, self.mistake_penalty, self.solved_bonus = correct_reward, mistake_penalty, solved_bonus
        self.reward_range = (mistake_penalty, correct_reward + solved_bonus)
        self.instructions = (
            f"Solve a {size}x{size} Sudoku: every row, column and {box_side(size)}x{box_side(size)} box must hold "
            f"the numbers 1-{size} once each. Fixed cells are shown in [brackets], empty cells as dots. Place one "
            f"number per action, rows and columns counted from 1: place 5 at row 2 col 3 (or 2,3,5). A right "
            f"number scores {correct_reward:g}, a placement the rules refuse {mistake_penalty:g}, a complete "
            f"grid {solved_bonus:g} more.")
        self.puzzle = self.solution = self.grid = np.zeros((size, size), dtype=int)
        self.feedback = ""

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        self.puzzle, self.solution = generate(self.np_random, self.size, self.holes)
        self.grid = self.puzzle.copy()
        self.feedback = ""
        return {"empty_cells": int((self.puzzle == 0).sum())}

    def parse_action(self, action: str) -> tuple[int, int, int] | None:
        text = action.strip().lower()
        for pattern in FORMATS:
            match = pattern.fullmatch(text)
            if match:
                return int(match["r"]) - 1, int(match["c"]) - 1, int(match["n"])
        return None

    def _apply(self, move: tuple[int, int, int]) -> tuple[float, bool, bool]:
        row, col, number = move
        problem = self._refusal(row, col, number)
        if problem:
            self.feedback = f"Refused: {problem}"
            return self.mistake_penalty, False, False
        self.grid[row, col] = number
        if number != self.solution[row, col]:
            self.feedback = f"Placed {number} at row {row + 1} col {col + 1}: it breaks no rule yet, but it is wrong."
            return self.mistake_penalty, False, True
        self.feedback = f"Placed {number} at row {row + 1} col {col + 1}: right."
        if self._is_success():
            self.feedback += " The grid is solved."
            return self.correct_reward + self.solved_bonus, True, True
        return self.correct_reward, False, True

    def _refusal(self, row: int, col: int, number: int) -> str:
        """Why the rules refuse the placement ("" when they allow it)."""
        n = self.size
        if not (0 <= row < n and 0 <= col < n and 1 <= number <= n):
            return f"rows, columns and numbers go from 1 to {n}"
        where = f"row {row + 1} col {col + 1}"
        if self.puzzle[row, col]:
            return f"{where} is a fixed cell"
        if self.grid[row, col] == self.solution[row, col]:
            return f"{where} already holds its right number"
        trial = self.grid.copy()
        trial[row, col] = 0
        if number in candidates(trial, row, col):
            return ""
        b = box_side(n)
        clashes = [name for name, cells in (("the row", trial[row]), ("the column", trial[:, col]),
                                            ("the box", trial[row - row % b:row - row % b + b,
                                                              col - col % b:col - col % b + b]))
                   if number in cells]
        fits = candidates(trial, row, col)
        return f"{number} at {where} clashes with {' and '.join(clashes)}; numbers that fit there: " \
               f"{', '.join(map(str, fits)) or 'none'}"

    def _text(self) -> str:
        rows = []
        for r in range(self.size):
            cells = [f"[{v}]" if self.puzzle[r, c] else (f" {v} " if v else " . ") for c, v in enumerate(self.grid[r])]
            rows.append("".join(cells))
        empty = int((self.grid == 0).sum())
        wrong = int(((self.grid != 0) & (self.grid != self.solution)).sum())
        status = f"Empty cells: {empty}." + (f" Wrong numbers placed: {wrong}." if wrong else "")
        return "\n".join(rows) + "\n" + (f"{self.feedback}\n" if self.feedback else "") + status

    def _is_success(self) -> bool:
        return bool((self.grid == self.solution).all())

    def _next(self) -> tuple[int, int] | None:
        """The open cell (empty or wrong) with the fewest candidates once wrong numbers are cleared."""
        cleared = np.where(self.grid == self.solution, self.grid, 0)
        open_cells = np.argwhere(self.grid != self.solution)
        if len(open_cells) == 0:
            return None
        row, col = min(open_cells.tolist(), key=lambda rc: len(candidates(cleared, *rc)))
        return row, col

    def oracle_action(self) -> str | None:
        cell = None if self._terminated else self._next()
        if cell is None:
            return None
        row, col = cell
        return f"place {self.solution[row, col]} at row {row + 1} col {col + 1}"

    def oracle_reasoning(self) -> str | None:
        cell = None if self._terminated else self._next()
        if cell is None:
            return None
        row, col = cell
        cleared = np.where(self.grid == self.solution, self.grid, 0)
        fits = candidates(cleared, row, col)
        how = "is the only number that fits" if len(fits) == 1 else \
            f"is the one of {', '.join(map(str, fits))} that leaves the rest solvable"
        return f"Row {row + 1} col {col + 1} has the fewest options; {self.solution[row, col]} {how} there."
