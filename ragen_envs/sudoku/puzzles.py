"""Sudoku puzzles with exactly one solution, and the solver that checks it and plays the oracle.

A puzzle of side n (4 or 9: boxes of sqrt(n) x sqrt(n)) is made from a ``numpy`` generator: a full
grid by randomised backtracking, then cells emptied one at a time in random order, each kept empty
only if the puzzle still has a single solution, until ``holes`` cells are empty (or no cell can be
emptied without a second solution). Grids are ``numpy`` arrays with 0 for an empty cell.

Both searches are counted (``Budget``): a reset that would spend more search nodes than ``FILL_NODES`` or
``DIG_NODES`` raises a GenerationBudgetError naming ``size`` or ``holes`` instead of running on.
"""

from __future__ import annotations

import numpy as np

from ragen_envs.base import Budget

# Search nodes one reset may spend filling the grid and digging its holes. The most 2,300 seeds took at
# the largest allowed size and holes (9, 50): 102 to fill, 8,095 to dig; a 16x16 grid's digging runs past
# any budget, which is why the env's bounds stop at 9.
FILL_NODES = 10_000
DIG_NODES = 200_000


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


def solutions(grid: np.ndarray, limit: int = 2, rng: np.random.Generator | None = None,
              budget: Budget | None = None) -> list[np.ndarray]:
    """Up to ``limit`` solutions of ``grid``: backtracking over the cell with the fewest candidates,
    with bit masks of the numbers each row, column and box holds (values in random order with ``rng``);
    each node of the search spends one unit of ``budget``."""
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
        if budget is not None:
            budget.spend()
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


def generate(rng: np.random.Generator, n: int = 9, holes: int = 32, fill: Budget | None = None,
             dig: Budget | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle, its one solution). ``fill`` and ``dig`` count the search nodes of the two steps (default:
    budgets of ``FILL_NODES`` and ``DIG_NODES``)."""
    box_side(n)
    fill = fill or Budget(FILL_NODES, "search nodes filling the grid", "size", n, "use a smaller size")
    dig = dig or Budget(DIG_NODES, "search nodes digging holes", "holes", holes,
                        "use fewer holes: a sparser puzzle takes longer to prove it has one solution")
    solution = solutions(np.zeros((n, n), dtype=int), limit=1, rng=rng, budget=fill)[0]
    puzzle = solution.copy()
    emptied = 0
    for index in rng.permutation(n * n):
        if emptied >= holes:
            break
        row, col = divmod(int(index), n)
        kept = puzzle[row, col]
        puzzle[row, col] = 0
        if len(solutions(puzzle, limit=2, budget=dig)) == 1:
            emptied += 1
        else:
            puzzle[row, col] = kept
    return puzzle, solution
