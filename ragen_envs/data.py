"""Where a dataset-backed env gets its items: one mechanism for every such env.

An env takes ``dataset=`` as one of
- ``"builtin"`` (the default): its own offline source, a generator or shipped data; works on a fresh
  machine with no network;
- a path to a local ``.jsonl``, ``.json`` (a list of records) or ``.parquet`` file;
- a list of records (dicts) in memory;
- ``"hub"`` (the env's online dataset) or ``"hub:OWNER/NAME"``, loaded through the ``datasets``
  library (extra ``data``). When the Hugging Face Hub cannot be reached, its offline mode is set and
  only the local cache is tried, so an offline machine fails in seconds with a clear message.

Records keep the online dataset's own field names; ``records`` checks them all at construction, so a
missing field is reported with the names expected, never in the middle of an episode. Loaded files
and hub splits are cached per process: thousands of envs share one copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragen_envs.extras import install_hint
from ragen_envs.once import build_once

HUB_HOST = ("huggingface.co", 443)


def records(dataset: str | Sequence[dict], fields: Sequence[str], hub_name: str | dict[str, str],
            split: str) -> tuple[dict, ...]:
    """The records of a non-builtin ``dataset`` (see the module docstring), each checked for ``fields``.
    ``hub_name`` is the env's online dataset: ``OWNER/NAME[:CONFIG]``, configs joined by ``+`` (their
    records one after another), or a dict of such names by split."""
    if isinstance(dataset, str):
        if is_hub(dataset):
            name = dataset[4:] or (hub_name.get(split) if isinstance(hub_name, dict) else hub_name)
            if not name:
                raise ValueError(f"dataset='hub' has no split {split!r}; its splits: {', '.join(hub_name)}")
            repo, _, configs = name.partition(":")
            rows = sum((load_hub(f"{repo}:{config}" if config else repo, split)
                        for config in configs.split("+")), ())
        else:
            path = Path(dataset).expanduser()
            if not path.is_file():
                raise ValueError(f"dataset={dataset!r}: no such file (or use 'builtin', 'hub', 'hub:OWNER/NAME' "
                                 "or a list of records)")
            rows = load_file(str(path.resolve()), path.stat().st_mtime_ns)
        where = dataset
    elif isinstance(dataset, Sequence) and not isinstance(dataset, (bytes, bytearray)):
        rows, where = tuple(dataset), "the dataset list"
    else:
        raise ValueError(f"dataset must be 'builtin', 'hub', 'hub:OWNER/NAME', a file path or a list of records, "
                         f"got {type(dataset).__name__}")
    if not rows:
        raise ValueError(f"{where} holds no records")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: record {i} is a {type(row).__name__}, not a mapping with fields "
                             f"{', '.join(fields)}")
        missing = [name for name in fields if name not in row]
        if missing:
            raise ValueError(f"{where}: record {i} lacks field(s) {', '.join(missing)}; expected fields: "
                             f"{', '.join(fields)}")
    return rows


def is_hub(dataset: Any) -> bool:
    """Whether ``dataset`` names an online dataset: ``"hub"`` or ``"hub:OWNER/NAME[:CONFIG]"``."""
    return isinstance(dataset, str) and (dataset == "hub" or dataset.startswith("hub:"))


@build_once(maxsize=8)
def load_file(path: str, mtime_ns: int) -> tuple[dict, ...]:
    """Records of a .jsonl, .json or .parquet file (cached per path and modification time)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(f"{path}: reading parquet needs pyarrow: pip install pyarrow, or the 'data' extra: "
                             f"{install_hint('data')}") from None
        return tuple(pq.read_table(path).to_pylist())
    text = Path(path).read_text(encoding="utf-8")
    if suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}: line {number} is not JSON ({error})") from None
        return tuple(rows)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON ({error})") from None
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json dataset is a list of records")
        return tuple(data)
    raise ValueError(f"{path}: dataset files are .jsonl, .json or .parquet")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub opens within ``timeout`` seconds."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return False
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # behind a proxy a direct connection says nothing: let the library try
    try:
        socket.create_connection(HUB_HOST, timeout=timeout).close()
        return True
    except OSError:
        return False


@build_once(maxsize=4)
def load_hub(name: str, split: str) -> tuple[dict, ...]:
    """A split of a Hub dataset (``OWNER/NAME`` or ``OWNER/NAME:CONFIG``) as records, through ``datasets``;
    offline, from its cache or a clear error."""
    try:
        import datasets
    except ImportError:
        raise ValueError(f"dataset 'hub:{name}' needs the datasets library: {install_hint('data')}; "
                         "or use the built-in offline source, dataset='builtin'") from None
    if not hub_reachable():
        # Without this the library retries the network for ~25 s before failing.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        datasets.config.HF_HUB_OFFLINE = True
        try:
            table = datasets.load_dataset(*name.split(":", 1), split=split)
        except Exception as error:
            raise ValueError(f"dataset {name!r} ({split}): the Hugging Face Hub cannot be reached and the dataset "
                             f"is not in the local cache ({type(error).__name__}); use dataset='builtin', a local "
                             "file, or run once with network") from None
    else:
        try:
            table = datasets.load_dataset(*name.split(":", 1), split=split)
        except Exception as error:
            raise ValueError(f"dataset {name!r} ({split}) could not be loaded: {error}") from None
    return tuple(table)


BUILTIN_SIZE = 1 << 31  # items of a generated source an episode draws from


class Source:
    """The items of a dataset-backed env, random-access.

    ``dataset="builtin"`` uses the env's own source: ``generate(rng)`` builds item i of a split from
    ``Random(base(split) + i)``, or ``shipped()`` returns the split's items (finite, shipped data).
    Any other ``dataset`` is loaded with ``records`` and each record turned into an item by
    ``convert(record, where)``, which raises a ValueError naming ``where`` for a bad one; ``select``
    (items -> items) then keeps the ones the env's rule keeps (RAGEN's first N and filters), and
    ``pick(seed, n)`` says which item an episode reset with ``seed`` plays (RAGEN's rule, e.g.
    ``seed % n``); without it, or without a seed, the env's generator draws one.
    """

    def __init__(self, dataset: Any, split: str, fields: Sequence[str], hub_name: str | dict[str, str],
                 convert: Callable,
                 generate: Callable[[random.Random], Any] | None = None,
                 shipped: Callable[[], Sequence[Any]] | None = None,
                 select: Callable[[list], list] | None = None, pick: Callable[[int, int], int] | None = None):
        self.dataset, self.split = dataset, split
        self._generate, self._pick = None, None
        if isinstance(dataset, str) and dataset == "builtin":
            if generate is not None:
                self._generate, self._base, self._items = generate, seeded_index(split), None
            else:
                self._items = list(shipped())
        else:
            rows = records(dataset, fields, hub_name, split)
            self._items = [convert(r, f"{describe(dataset)}: record {i}") for i, r in enumerate(rows)]
            if select is not None:
                self._items = select(self._items)
                if not self._items:
                    raise ValueError(f"{describe(dataset)}: no record passes the env's selection")
            self._pick = pick

    def __len__(self) -> int:
        return BUILTIN_SIZE if self._items is None else len(self._items)

    def __getitem__(self, index: int):
        if self._items is None:
            return self._generate(random.Random(self._base + index))
        return self._items[index]

    def sample(self, np_random, seed: int | None = None):
        """An episode's item: ``pick(seed, n)`` where given, else drawn with the env's generator (so one
        seed means one problem either way)."""
        if self._pick is not None and seed is not None:
            return self[self._pick(seed, len(self))]
        return self[int(np_random.integers(len(self)))]


def hash_split(key: str) -> str:
    """"train" or "test" (about 20%: a first hash byte below 52 of 256) for an item of a shipped set,
    fixed by its key (a question, an id)."""
    return "test" if hashlib.sha256(key.encode()).digest()[0] < 52 else "train"


def seeded_index(split: str) -> int:
    """The base of a built-in split's item seeds: item i of split s is built from Random(base(s) + i),
    and splits never share a seed."""
    bases = {"train": 0, "test": 1 << 40}
    if split not in bases:
        raise ValueError(f"split must be 'train' or 'test' for the built-in source, got {split!r}")
    return bases[split]


def describe(dataset: Any) -> str:
    """A short name of the source, for info and messages."""
    if isinstance(dataset, str):
        return dataset
    return f"list of {len(dataset)} records"
