"""Sokoban level generation by reverse play.

1. Carve a room: a random walk through a walled rectangle turns cells into floor.
2. Put every box on a target and the player on a free cell: a solved position.
3. Play backwards for ``search_depth`` moves: the player walks and pulls the box behind it. Every
   reverse move undone is a legal forward move, so each position on the walk is solvable.
4. Take the unsolved position that scores highest (box moves alternating between boxes, times
   total box displacement) over a few walks from different placements in the room; a single walk
   often strays into a dead end and leaves a one-move level. Rooms where no walk moves a box are
   replaced by a new room.
5. Move the player to a random cell it can walk to without touching a box: walking is reversible,
   so the level stays solvable, and the player no longer starts right beside the last box moved.

Everything uses flat cell indices (``row * cols + col``) and draws its random numbers from the
caller's ``numpy.random.Generator`` in a few vectorised calls, so a 10x10 room takes about a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragen_envs.base import Budget

MAX_ATTEMPTS = 1000  # rooms tried before giving up (a GenerationBudgetError); a failure means impossible arguments
WALKS_PER_ROOM = 4  # reverse walks per room, from different placements; the best is kept


@dataclass
class Level:
    """A Sokoban position on flat cell indices."""

    rows: int
    cols: int
    walls: np.ndarray  # bool, shape (rows, cols)
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int


def carve_room(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Walls everywhere except the cells a random walk visited (the border always stays wall).

    The walk goes on until 50-80% of the inner cells are floor: fewer leaves corridors too narrow
    to move a box; more leaves an open hall with trivial levels.
    """
    walls = np.ones((rows, cols), dtype=bool)
    inner = (rows - 2) * (cols - 2)
    wanted = max(3, int(inner * rng.uniform(0.5, 0.8)))
    max_steps = 20 * inner
    draws = rng.random((max_steps, 3)).tolist()
    r, c = int(rng.integers(1, rows - 1)), int(rng.integers(1, cols - 1))
    dr, dc = (0, 1)
    turns = ((-1, 0), (1, 0), (0, -1), (0, 1))
    carved = 0
    for turn, widen, side in draws:
        carved += walls[r, c]
        walls[r, c] = False
        if widen < 0.2:  # make the corridor two cells wide here, so boxes can be walked around
            wr, wc = turns[int(side * 4)]
            if 0 < r + wr < rows - 1 and 0 < c + wc < cols - 1:
                carved += walls[r + wr, c + wc]
                walls[r + wr, c + wc] = False
        if carved >= wanted:
            break
        if turn < 0.35:
            dr, dc = turns[int(turn / 0.35 * 4)]
        r = min(max(r + dr, 1), rows - 2)
        c = min(max(c + dc, 1), cols - 2)
    return walls


def reverse_walk(rng, walls: np.ndarray, targets: list[int], player: int, depth: int):
    """Pull boxes back from their targets; return (score, boxes, player) of the best unsolved
    position on the walk, or None when every position of the walk is solved."""
    cols = walls.shape[1]
    floor = (~walls).ravel().tolist()
    deltas = (-cols, cols, -1, 1)
    origin = {t: t for t in targets}  # current box cell -> target it started on
    target_set = set(targets)
    last_box, swaps, displacement = None, 0, 0
    best, best_score = None, 0
    for d in rng.integers(0, 4, size=depth).tolist():
        step = deltas[d]
        dest = player + step
        if not floor[dest] or dest in origin:
            continue
        behind = player - step
        if behind in origin:  # pull the box behind the player onto the player's cell
            start = origin.pop(behind)
            origin[player] = start
            displacement += _manhattan(player, start, cols) - _manhattan(behind, start, cols)
            if behind != last_box:
                swaps += 1
            last_box = player
        player = dest
        score = swaps * displacement
        if score > best_score and not target_set.issuperset(origin):
            best, best_score = (score, frozenset(origin), player), score
    return best


def _random_reachable(rng, walls: np.ndarray, boxes: frozenset[int], player: int) -> int:
    cols = walls.shape[1]
    floor = (~walls).ravel().tolist()
    seen = [player]
    visited = {player}
    for cell in seen:  # breadth-first flood fill; the list grows while we walk it
        for step in (-cols, cols, -1, 1):
            nxt = cell + step
            if floor[nxt] and nxt not in boxes and nxt not in visited:
                visited.add(nxt)
                seen.append(nxt)
    return seen[int(rng.integers(len(seen)))]


def _manhattan(a: int, b: int, cols: int) -> int:
    return abs(a // cols - b // cols) + abs(a % cols - b % cols)


def generate_level(rng: np.random.Generator, dim_room: tuple[int, int], num_boxes: int,
                   search_depth: int, budget: Budget | None = None) -> Level:
    """A level by reverse play; each room carved spends one unit of ``budget`` (default: ``MAX_ATTEMPTS``
    rooms, each of ``WALKS_PER_ROOM`` walks of ``search_depth`` moves, so the work is counted)."""
    rows, cols = dim_room
    budget = budget or Budget(MAX_ATTEMPTS, "rooms", "dim_room", dim_room,
                              f"use a larger room or fewer boxes than num_boxes={num_boxes}")
    while True:
        budget.spend()
        walls = carve_room(rng, rows, cols)
        free = np.flatnonzero(~walls.ravel())
        if len(free) < num_boxes + 2:
            continue
        best, targets = None, None
        for _ in range(WALKS_PER_ROOM):
            picks = rng.choice(free, size=num_boxes + 1, replace=False).tolist()
            found = reverse_walk(rng, walls, picks[:-1], picks[-1], search_depth)
            if found is not None and (best is None or found[0] > best[0]):
                best, targets = found, picks[:-1]
        if best is not None:
            _, boxes, player = best
            player = _random_reachable(rng, walls, boxes, player)
            return Level(rows, cols, walls, frozenset(targets), boxes, player)
