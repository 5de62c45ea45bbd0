"""Shared machinery of the grid games (Sokoban, FrozenLake): directions, text formats, images.

A grid env describes its board as a 2-D array of tile codes (``_tile_codes``), one code per symbol
of ``SYMBOLS`` and per tile of ``ATLAS``; text, images and the human window all derive from it.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
from gymnasium import spaces

from ragen_envs import rendering
from ragen_envs.base import MAX_STEPS, Bounds, LLMEnv, no_render_mode
from ragen_envs.spaces import CHARSET, TextSpace

# (row, column) steps; the order is the solvers' direction index.
DIRECTIONS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
ACTION_NAMES = list(DIRECTIONS)
# the option sets of the grid games' arguments, checked by gym.make (registry.check_arguments)
ObservationFormat = Literal["grid", "coord", "grid_coord"]
ObservationType = Literal["text", "image", "both"]
OBSERVATION_FORMATS, OBSERVATION_TYPES = get_args(ObservationFormat), get_args(ObservationType)

COORD_HEADER = (
    "Board size: {rows} rows x {cols} columns; "
    "(row, column) coordinates start at (0, 0) in the top-left corner."
)


def format_cells(cells) -> str:
    cells = list(cells)
    return ", ".join(f"({r}, {c})" for r, c in cells) if cells else "none"


class GridEnv(LLMEnv):
    """Base of the grid games: Up/Down/Left/Right actions, text and image observations."""

    metadata = {"render_modes": ["ansi", "rgb_array", *rendering.human_modes()], "render_fps": 4}
    valid_actions = ACTION_NAMES
    # a game declares its own arguments' (Sokoban's dim_room, FrozenLake's size), within these
    argument_bounds = {"shape": Bounds(min=1, max=20, why="rows and columns: the observation spaces grow with them"),
                       "max_steps": MAX_STEPS}

    SYMBOLS: str = ""  # symbol of each tile code
    ATLAS: np.ndarray  # image of each tile code, shape (codes, TILE, TILE, 3)

    def __init__(self, shape: tuple[int, int], max_steps: int, observation_format: ObservationFormat,
                 observation_type: ObservationType, render_mode: str | None):
        if render_mode == "human" and "human" not in self.metadata["render_modes"]:
            raise ImportError(rendering.NEEDS_PYGAME)  # said rather than "not one of the modes"
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.shape = tuple(shape)
        self.observation_format = observation_format
        self.observation_type = observation_type
        rows, cols = shape
        # Generous bound: the grid, plus a coordinate list naming every cell at most a few times.
        text = TextSpace(max_length=rows * (cols + 1) + 400 + 40 * rows * cols, charset=CHARSET)
        image = spaces.Box(0, 255, (rows * rendering.TILE, cols * rendering.TILE, 3), np.uint8)
        self.observation_space = {
            "text": text,
            "image": image,
            "both": spaces.Dict({"text": text, "image": image}),
        }[observation_type]
        self._window = None

    # -- subclasses ------------------------------------------------------------------------------
    def _tile_codes(self) -> np.ndarray:
        raise NotImplementedError

    def _coord_lines(self) -> list[str]:
        """Lines naming the coordinates of the board's objects, for the ``coord`` format."""
        raise NotImplementedError

    def parse_grid(self, text: str) -> np.ndarray:
        """Tile codes of a board written in ``SYMBOLS`` (one row per line), for ``reset(options=...)``."""
        lines = [line.strip() for line in str(text).strip().splitlines()]
        if not lines or any(len(line) != len(lines[0]) for line in lines):
            raise ValueError(f"a board must be non-empty rows of equal length, got {text!r}")
        if (len(lines), len(lines[0])) != self.shape:
            raise ValueError(f"board is {len(lines)}x{len(lines[0])}, the env was made for {self.shape}")
        unknown = set("".join(lines)) - set(self.SYMBOLS)
        if unknown:
            raise ValueError(f"unknown board symbols {sorted(unknown)}; use {self.SYMBOLS!r}")
        return np.array([[self.SYMBOLS.index(ch) for ch in line] for line in lines])

    # -- actions ---------------------------------------------------------------------------------
    def parse_action(self, action: str) -> str | None:
        return self.parse_choice(action)

    # -- observations ----------------------------------------------------------------------------
    def grid_text(self) -> str:
        symbols = np.array(list(self.SYMBOLS))[self._tile_codes()]
        return "\n".join("".join(row) for row in symbols)

    def coord_text(self) -> str:
        rows, cols = self._tile_codes().shape
        return "\n".join([COORD_HEADER.format(rows=rows, cols=cols), *self._coord_lines()])

    def text_observation(self) -> str:
        if self.observation_format == "grid":
            return self.grid_text()
        if self.observation_format == "coord":
            return self.coord_text()
        return self.grid_text() + "\n" + self.coord_text()

    def image_observation(self) -> np.ndarray:
        return rendering.frame(self.ATLAS, self._tile_codes())

    def _observation(self):
        if self.observation_type == "text":
            return self.text_observation()
        if self.observation_type == "image":
            return self.image_observation()
        return {"text": self.text_observation(), "image": self.image_observation()}

    # -- rendering -------------------------------------------------------------------------------
    def render(self):
        if self.render_mode == "ansi":
            return self.text_observation()
        if self.render_mode == "rgb_array":
            return self.image_observation()
        if self.render_mode == "human":
            if self._window is None:
                self._window = rendering.Window(type(self).__name__, self.metadata["render_fps"])
            self._window.show(self.image_observation())
            return None
        return no_render_mode(self)

    def close(self):
        if self._window is not None:
            self._window.close()
            self._window = None
