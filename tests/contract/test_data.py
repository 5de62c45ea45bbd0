"""Dataset sources of the dataset-backed envs (ragen_envs/data.py): files, lists, the Hub (injected,
never the network), and clear errors."""

import json
import sys
import time
import types

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs import data
from toy_envs import PICK_ID

TASKS = [{"word": "cat"}, {"word": "dog"}]


@pytest.fixture(autouse=True)
def fresh_caches():
    data.load_file.cache_clear()
    data.load_hub.cache_clear()
    yield
    data.load_file.cache_clear()
    data.load_hub.cache_clear()


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_local_files(tmp_path, suffix):
    path = tmp_path / f"tasks{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(t) for t in TASKS) + "\n\n")
    elif suffix == ".json":
        path.write_text(json.dumps(TASKS))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(TASKS), path)
    env = gym.make(PICK_ID, dataset=str(path))
    seen = {env.reset(seed=s)[0] for s in range(20)}
    assert seen == {"Word: cat", "Word: dog"}


@pytest.mark.parametrize("content, message", [
    ("{\"word\": 1", "line 1 is not JSON"),
    ("", "holds no records"),
    ("[1, 2]", "record 0 is a int"),
])
def test_bad_files_fail_at_construction(tmp_path, content, message):
    path = tmp_path / ("t.json" if content.startswith("[") else "t.jsonl")
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        gym.make(PICK_ID, dataset=str(path))


def test_other_bad_sources():
    with pytest.raises(ValueError, match="no such file"):
        gym.make(PICK_ID, dataset="/no/such/file.jsonl")
    with pytest.raises(ValueError, match="dataset must be"):
        gym.make(PICK_ID, dataset=42)
    with pytest.raises(ValueError, match=r"\.jsonl, \.json or \.parquet"):
        data.load_file(__file__, 0)


def fake_datasets(monkeypatch, rows=None, error=None):
    calls = []

    def load_dataset(*args, split):
        calls.append((args, split))
        if error:
            raise error
        return rows

    module = types.SimpleNamespace(load_dataset=load_dataset, config=types.SimpleNamespace(HF_HUB_OFFLINE=False))
    monkeypatch.setitem(sys.modules, "datasets", module)
    return calls


def test_the_hub_source_through_datasets(monkeypatch):
    calls = fake_datasets(monkeypatch, rows=[{"word": "yak"}])
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: True)
    env = gym.make(PICK_ID, dataset="hub")
    assert env.reset(seed=0)[0] == "Word: yak" and env.step("yak")[1] == 1.0
    assert calls == [(("ragen/pick-words",), "train")]
    calls = fake_datasets(monkeypatch, rows=[{"word": "gnu"}])
    gym.make(PICK_ID, dataset="hub:someone/words:small", split="validation")
    assert calls == [(("someone/words", "small"), "validation")]


def test_offline_the_hub_fails_fast_with_a_clear_message(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "0")  # restored after the test, which sets them
    fake_datasets(monkeypatch, error=ConnectionError("offline and not cached"))
    monkeypatch.setattr(data, "HUB_HOST", ("127.0.0.1", 9))  # nothing listens: refused at once
    start = time.monotonic()
    with pytest.raises(ValueError, match="cannot be reached and the dataset is not in the local cache"):
        gym.make(PICK_ID, dataset="hub")
    assert time.monotonic() - start < 5
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"  # the library is told not to retry the network


def test_without_the_datasets_library_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match=r'ragen-envs\[data\]'):
        gym.make(PICK_ID, dataset="hub")


def test_seeds_of_builtin_splits_never_overlap():
    assert data.seeded_index("test") - data.seeded_index("train") > 1 << 31
