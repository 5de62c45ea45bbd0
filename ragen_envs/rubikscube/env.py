"""Rubik's Cube, 2x2 (the Pocket Cube): turn the faces until every face is one colour (RAGEN's rubikscube).

Observation: the six faces, one line each, labelled with their names (Up, Left, Front, Right, Back,
Down) and their four stickers as two rows of two colour letters (W white, O orange, G green, R red,
B blue, Y yellow), in the layout of ``cube.py``: Up seen from above with Back at its top, Down seen
from below with Front at its top, the side faces seen from outside with Up at their top; then the
moves. The solved cube has W up, O left, G front, R right, B back and Y down.

Action: one quarter turn in Singmaster notation: ``U``, ``D``, ``L``, ``R``, ``F``, ``B`` turn that
face 90 degrees clockwise as seen looking at it, ``U'`` (and so on) counter-clockwise; a typographic
apostrophe (``U’``) is read as ``'``, and letters match in either case (the env contract's rule for a
finite action set). Anything else is invalid: nothing changes, reward 0.

Reward: RAGEN's: 1.0 for the move that solves the cube (every face one colour, whatever the
orientation of the whole cube), 0.0 for any other move. Nothing pays for partial progress.

Termination: terminated when solved; truncated after ``max_steps`` (20, RAGEN's actions per episode).

Arguments: ``scramble_depth`` (3: quarter turns from solved, 1 to 14), ``max_steps`` (20),
``render_mode``. RAGEN scrambles one turn deep (its ``ragen2-main`` preset here does too), but depth 1 is
solved without looking: up to a rotation of the whole cube it has six positions, and eleven fixed moves
(try a turn, undo it, try the next) solve every one of them within 20 steps. From depth 3 (120 positions)
no fixed sequence of 20 moves can pass through more than a sixth of them, so the default reads the cube
(``benchmarks/audits/blind_audit.py``).

``reset(seed=s)`` scrambles the cube from ``s``; there are no random transitions after it. The
scramble is exactly ``scramble_depth`` turns from solved: random moves, each one taking the cube one
turn farther (RAGEN's random moves may cancel or leave the cube nearer, even solved); depth 14 (God's
number in quarter turns, 276 of the 3,674,160 positions) takes 200 tries on average to draw (0.5 s), and
past ``cube.MAX_SCRAMBLES`` tries a reset raises a GenerationBudgetError naming ``scramble_depth``.
``info["optimal_solution_length"]`` at reset is that depth, ``info["distance"]`` at every step the
quarter turns still needed. ``oracle_action()`` is the first move of a shortest solution, from an exact
distance table (``cube.py``), from any state the agent reaches; ``oracle_reasoning()`` says how far the
cube is and which move starts a shortest solution.
"""

from __future__ import annotations

from typing import Any

from ragen_envs.base import MAX_STEPS, Bounds, TextEnv, check_positive_int
from ragen_envs.rubikscube import cube

FACE_NAMES = ("Up", "Left", "Front", "Right", "Back", "Down")


def faces_text(state: str) -> str:
    """One line a face: its name, then its top row / bottom row."""
    return "\n".join(f"{name}: {state[k]} {state[k + 1]} / {state[k + 2]} {state[k + 3]}"
                     for name, k in zip(FACE_NAMES, range(0, 24, 4)))


class RubiksCubeEnv(TextEnv):
    valid_actions = list(cube.MOVES)
    argument_bounds = {
        "scramble_depth": Bounds(min=1, max=cube.GODS_NUMBER, why="no 2x2 position is farther from solved"),
        "max_steps": MAX_STEPS,
    }

    def __init__(self, scramble_depth: int = 3, max_steps: int = 20, render_mode: str | None = None):
        check_positive_int("max_steps", max_steps)
        if not isinstance(scramble_depth, int):  # its bounds: argument_bounds
            raise ValueError(f"scramble_depth must be an integer, got {scramble_depth!r}")
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.scramble_depth = scramble_depth
        self.instructions = (
            "Solve a 2x2 Rubik's Cube: make every face a single colour (any orientation of the whole cube "
            "counts). The faces are Up, Left, Front, Right, Back and Down, each shown as its top row / bottom "
            "row of colours: W white, O orange, G green, R red, B blue, Y yellow. Up is seen from above with "
            "Back at its top, Down from below with Front at its top, the other faces from outside with Up at "
            "their top. A move turns one face a quarter turn: U, D, L, R, F or B turns that face clockwise as "
            "seen looking straight at it, and a prime (U', D', L', R', F', B') turns it counter-clockwise. "
            "Reward 1 for solving the cube, 0 otherwise. Answer with moves, such as R or U'.")
        self.state = cube.SOLVED

    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        self.state = cube.scramble(self.scramble_depth, self.np_random)
        return {"optimal_solution_length": self.scramble_depth}

    def parse_action(self, action: str) -> str | None:
        return self.parse_choice(action.replace("\u2019", "'"))

    def _apply(self, move: str) -> tuple[float, bool, bool]:
        self.state = cube.apply(self.state, move)
        solved = cube.is_solved(self.state)
        return (1.0 if solved else 0.0), solved, True  # a quarter turn always moves four corners

    def _text(self) -> str:
        return f"{faces_text(self.state)}\nMoves: {', '.join(cube.MOVES)}."

    def _is_success(self) -> bool:
        return cube.is_solved(self.state)

    def _extra_info(self) -> dict[str, Any]:
        return {"distance": cube.distance(self.state)}

    def oracle_action(self) -> str | None:
        return None if self._terminated else cube.solve_step(self.state)

    def oracle_reasoning(self) -> str | None:
        move = self.oracle_action()
        if move is None:
            return None
        d = cube.distance(self.state)
        # what the observation shows (each mixed face's colours), then the plan
        mixed = [f"{name} ({' '.join(sorted(set(self.state[k:k + 4])))})"
                 for name, k in zip(FACE_NAMES, range(0, 24, 4)) if len(set(self.state[k:k + 4])) > 1]
        left = "solves the cube" if d == 1 else f"leaves {d - 1} more"
        return (f"Mixed faces: {', '.join(mixed)}. The cube is {d} quarter turn{'s' if d > 1 else ''} from "
                f"solved; {move} starts a shortest solution and {left}.")
