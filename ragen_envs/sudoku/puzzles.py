"""Sudoku puzzles with exactly one solution, and the solver that checks it and plays the oracle.

A puzzle of side n (4 or 9: boxes of sqrt(n) x sqrt(n)) is made from a ``numpy`` generator: a full
grid by randomised backtracking, then cells emptied one at a time in random order, each kept empty
only if the puzzle still has a single solution, until ``holes`` cells are empty (or no cell can be
emptied without a second solution). Grids are ``numpy`` arrays with 0 for an empty cell.
"""

from __future__ import annotations

import numpy as np


def box_side(n: int) -> int:
    side = int(round(n ** 0.5))
    if side * side != n or n < 4:
        raise ValueError(f"a Sudoku's side must be a square >= 4 (4, 9, 16), got {n}")
    return side


def candidates(grid: np.ndarray, row: int, col: int) -> list[int]:
    """The numbers that can go in (row, col) without repeating in its row, column or box."""
    n = grid.shape[0]
    b = box_side(n)
    r0, c0 = row - row % b, col - col % b
    used = set(grid[row].tolist()) | set(grid[:, col].tolist()) | set(grid[r0:r0 + b, c0:c0 + b].ravel().tolist())
    return [v for v in range(1, n + 1) if v not in used]


def solutions(grid: np.ndarray, limit: int = 2, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Up to ``limit`` solutions of ``grid``: backtracking over the cell with the fewest candidates,
    with bit masks of the numbers each row, column and box holds (values in random order with ``rng``)."""
    n = grid.shape[0]
    b = box_side(n)
    cells = [int(v) for v in grid.ravel()]
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    for i, v in enumerate(cells):
        if v:
            r, c = divmod(i, n)
            rows[r] |= 1 << v
            cols[c] |= 1 << v
            boxes[r // b * b + c // b] |= 1 << v
    every = (1 << (n + 1)) - 2
    empties = [i for i, v in enumerate(cells) if v == 0]
    found: list[np.ndarray] = []

    def search() -> bool:
        best, best_mask, best_count = -1, 0, n + 1
        for i in empties:
            if cells[i]:
                continue
            r, c = divmod(i, n)
            mask = every & ~(rows[r] | cols[c] | boxes[r // b * b + c // b])
            count = bin(mask).count("1")
            if count < best_count:
                best, best_mask, best_count = i, mask, count
                if count <= 1:
                    break
        if best < 0:
            found.append(np.array(cells).reshape(n, n))
            return len(found) >= limit
        values = [v for v in range(1, n + 1) if best_mask >> v & 1]
        if rng is not None:
            values = [int(v) for v in rng.permutation(values)]
        r, c = divmod(best, n)
        box = r // b * b + c // b
        for v in values:
            bit = 1 << v
            cells[best] = v
            rows[r] |= bit
            cols[c] |= bit
            boxes[box] |= bit
            if search():
                return True
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[box] &= ~bit
        cells[best] = 0
        return False

    search()
    return found


def generate(rng: np.random.Generator, n: int = 9, holes: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle, its one solution)."""
    box_side(n)
    solution = solutions(np.zeros((n, n), dtype=int), limit=1, rng=rng)[0]
    puzzle = solution.copy()
    emptied = 0
    for index in rng.permutation(n * n):
        if emptied >= holes:
            break
        row, col = divmod(int(index), n)
        kept = puzzle[row, col]
        puzzle[row, col] = 0
        if len(solutions(puzzle, limit=2)) == 1:
            emptied += 1
        else:
            puzzle[row, col] = kept
    return puzzle, solution
