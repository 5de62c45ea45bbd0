"""JSON on the wire: env values and spaces, as the env server sends them and ``RemoteEnv`` reads them.

Observations, infos and actions are JSON with two additions: a numpy array travels as
``{"__ndarray__": base64, "dtype": ..., "shape": [...]}`` (an image stays bytes, not a nested list),
and a numpy scalar as the Python number it holds. Spaces travel as a small description
(``space_to_json``) that ``space_from_json`` turns back into an equal Gymnasium space, so a client
needs none of the env's own dependencies.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from gymnasium import spaces

from ragen_envs.spaces import TextSpace


def encode(value: Any) -> Any:
    """A JSON-ready copy of ``value`` (dicts, lists, tuples, numpy arrays and scalars, plain values)."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return {"__ndarray__": base64.b64encode(data.tobytes()).decode("ascii"), "dtype": data.dtype.str,
                "shape": list(data.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot send a {type(value).__name__} as JSON")


def decode(value: Any) -> Any:
    """The inverse of ``encode`` (tuples come back as lists)."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def space_to_json(space: spaces.Space) -> dict:
    if isinstance(space, spaces.Text):
        return {"type": "text", "min_length": space.min_length, "max_length": space.max_length,
                "charset": "".join(space.character_set)}
    if isinstance(space, spaces.Box):
        return {"type": "box", "low": encode(space.low), "high": encode(space.high), "dtype": space.dtype.str}
    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Dict):
        return {"type": "dict", "spaces": {k: space_to_json(s) for k, s in space.spaces.items()}}
    raise TypeError(f"no wire form for {type(space).__name__}")


def space_from_json(data: dict) -> spaces.Space:
    kind = data["type"]
    if kind == "text":
        return TextSpace(data["max_length"], min_length=data["min_length"], charset=data["charset"])
    if kind == "box":
        return spaces.Box(decode(data["low"]), decode(data["high"]), dtype=np.dtype(data["dtype"]))
    if kind == "discrete":
        return spaces.Discrete(data["n"], start=data["start"])
    if kind == "dict":
        return spaces.Dict({k: space_from_json(s) for k, s in data["spaces"].items()})
    raise ValueError(f"unknown space type {kind!r}")
