"""Image rendering for the grid games: procedurally drawn tiles and an optional pygame window.

Tiles are drawn once per process with numpy (no sprite files, nothing read from disk per frame).
A frame is one fancy-indexing of the tile atlas by the board's tile codes, so rendering costs
microseconds, not the milliseconds of blitting sprite by sprite.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ragen_envs.extras import install_hint, installed

TILE = 32  # pixels per board cell

_yy, _xx = np.mgrid[0:TILE, 0:TILE]
_centre = (TILE - 1) / 2


def blank(color) -> np.ndarray:
    tile = np.empty((TILE, TILE, 3), dtype=np.uint8)
    tile[:] = color
    return tile


def disc(tile: np.ndarray, color, radius: float, ring: float | None = None) -> np.ndarray:
    """Draw a filled disc (or a ring of the given width) in the middle of ``tile``."""
    out = tile.copy()
    dist = np.hypot(_yy - _centre, _xx - _centre)
    mask = dist <= radius if ring is None else (dist <= radius) & (dist >= radius - ring)
    out[mask] = color
    return out


def square(tile: np.ndarray, color, margin: int, cross=None) -> np.ndarray:
    """Draw a square inset by ``margin``, with an optional diagonal cross (a crate)."""
    out = tile.copy()
    out[margin:-margin, margin:-margin] = color
    if cross is not None:
        inner = (_yy >= margin) & (_yy < TILE - margin) & (_xx >= margin) & (_xx < TILE - margin)
        diag = (np.abs(_yy - _xx) <= 1) | (np.abs(_yy + _xx - (TILE - 1)) <= 1)
        border = inner & ~((_yy >= margin + 2) & (_yy < TILE - margin - 2)
                           & (_xx >= margin + 2) & (_xx < TILE - margin - 2))
        out[inner & (diag | border)] = cross
    return out


def bricks(color, mortar) -> np.ndarray:
    tile = blank(color)
    rows = (_yy % (TILE // 4)) == 0
    offset = np.where((_yy // (TILE // 4)) % 2 == 0, 0, TILE // 4)
    cols = ((_xx + offset) % (TILE // 2)) == 0
    tile[rows | cols] = mortar
    return tile


def frame(atlas: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Compose an (rows*TILE, cols*TILE, 3) uint8 image from a board of tile indices into ``atlas``."""
    rows, cols = codes.shape
    return atlas[codes].transpose(0, 2, 1, 3, 4).reshape(rows * TILE, cols * TILE, 3)


NEEDS_PYGAME = f'render_mode="human" needs pygame, which is not installed: {install_hint("image")}'


def human_modes() -> list[str]:
    """``["human"]`` where pygame is installed, else none: an env declares only the modes it can render, so
    Gymnasium's ``check_env`` (which makes the env in every declared mode) passes on the core install."""
    return ["human"] if installed("pygame") else []


class Window:
    """A pygame window for ``render_mode="human"``; set SDL_VIDEODRIVER=dummy to run headless."""

    def __init__(self, title: str, fps: int):
        try:
            import pygame
        except ImportError as err:
            raise ImportError(NEEDS_PYGAME) from err
        self._pygame = pygame
        self._title = title
        self._fps = fps
        self._screen = None
        self._clock = None

    def show(self, image: np.ndarray) -> None:
        pygame = self._pygame
        if self._screen is None:
            pygame.init()
            pygame.display.set_caption(self._title)
            self._screen = pygame.display.set_mode((image.shape[1], image.shape[0]))
            self._clock = pygame.time.Clock()
        pygame.event.pump()
        surface = pygame.surfarray.make_surface(image.transpose(1, 0, 2))
        self._screen.blit(surface, (0, 0))
        pygame.display.flip()
        self._clock.tick(self._fps)

    def close(self) -> None:
        if self._screen is not None:
            self._pygame.display.quit()
            self._screen = None


def png_bytes(rgb: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 image as PNG file bytes (written here: no imaging library needed)."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))
