"""Optimal Sokoban solver: A* over (player, boxes) states, each move costing 1.

The heuristic is the fewest pushes that bring the boxes onto distinct targets, each box alone (the
best assignment of boxes to targets; with more than ``MAX_MATCHED_BOXES`` boxes, each box to its
nearest target instead). Every push is a move, so it never overestimates and A* returns a shortest
solution in moves. Cells from which no push sequence reaches a target are dead; states with a box
on a dead cell are never expanded. Boxes are a bit mask on flat cell indices, so a state is one int.
"""

from __future__ import annotations

import heapq
from itertools import permutations

import numpy as np

INF = 1 << 30
MAX_MATCHED_BOXES = 4  # up to 4! = 24 assignments per state


def push_distances(walls: np.ndarray, targets) -> list[int]:
    """Fewest pushes from each cell to a target for a lone box (INF = dead cell)."""
    cols = walls.shape[1]
    floor = (~walls).ravel().tolist()
    dist = [INF] * len(floor)
    frontier = list(targets)
    for t in frontier:
        dist[t] = 0
    for cell in frontier:  # breadth-first: the list grows while we walk it
        for step in (-cols, cols, -1, 1):
            # a box at `src` pushed by `step` lands on `cell`; the player stands at src - step
            src = cell - step
            if floor[src] and floor[src - step] and dist[src] == INF:
                dist[src] = dist[cell] + 1
                frontier.append(src)
    return dist


def solve(walls: np.ndarray, targets, boxes, player: int, max_nodes: int = 200_000) -> list[int] | None:
    """Shortest list of direction indices (0 Up, 1 Down, 2 Left, 3 Right) solving the position.

    Returns None when the position has no solution, or none was found within ``max_nodes``
    expanded states. The border of ``walls`` must be wall.
    """
    cols = walls.shape[1]
    n = walls.size
    floor = (~walls).ravel().tolist()
    targets = sorted(targets)
    dist = push_distances(walls, targets)  # to the nearest target: dead cells are INF
    boxes = tuple(sorted(boxes))
    if any(dist[b] == INF for b in boxes):
        return None
    if len(boxes) <= MAX_MATCHED_BOXES:
        tables = [push_distances(walls, [t]) for t in targets]
        orders = [[tables[t] for t in order] for order in permutations(range(len(targets)))]

        def heuristic(bs):
            return min(sum(table[b] for table, b in zip(order, bs)) for order in orders)
    else:
        def heuristic(bs):
            return sum(dist[b] for b in bs)
    goal = sum(1 << t for t in targets)
    h0 = heuristic(boxes)
    steps = (-cols, cols, -1, 1)
    start = sum(1 << b for b in boxes) * n + player
    parent = {start: None}
    best_g = {start: 0}
    # (f, -g, tiebreak, state, boxes): deeper states first among equal f finds the goal sooner
    heap = [(h0, 0, 0, start, boxes)]
    counter = 0
    expanded = 0
    while heap:
        f, neg_g, _, state, bs = heapq.heappop(heap)
        g = -neg_g
        if best_g.get(state, INF) < g:
            continue
        mask, pos = divmod(state, n)
        if mask == goal:
            return _path(parent, state)
        expanded += 1
        if expanded > max_nodes:
            return None
        for d, step in enumerate(steps):
            nxt = pos + step
            if not floor[nxt]:
                continue
            nmask, nbs, nh = mask, bs, f - g
            if mask >> nxt & 1:
                land = nxt + step
                if not floor[land] or mask >> land & 1 or dist[land] == INF:
                    continue
                nmask = mask ^ (1 << nxt) ^ (1 << land)
                nbs = tuple(land if b == nxt else b for b in bs)
                nh = heuristic(nbs)
                if nh >= INF:
                    continue
            child = nmask * n + nxt
            if g + 1 < best_g.get(child, INF):
                best_g[child] = g + 1
                parent[child] = (state, d)
                counter += 1
                heapq.heappush(heap, (g + 1 + nh, -(g + 1), counter, child, nbs))
    return None


def _path(parent: dict, state: int) -> list[int]:
    moves = []
    while parent[state] is not None:
        state, d = parent[state]
        moves.append(d)
    return moves[::-1]
