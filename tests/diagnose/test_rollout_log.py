"""RolloutLog writes what the generic reader reads, checks each sample before writing, counts steps, and
keeps lines whole when several processes append."""

import multiprocessing

import pytest

from ragen_envs.diagnose import RolloutLog, read_records


def test_what_is_logged_is_read_back(tmp_path):
    log = RolloutLog(tmp_path / "r.jsonl", samples_per_step=4)
    for n in range(8):
        log.add(prompt=f"Board {n // 2}\n", response=f"<think>plan {n}</think>Left", reward=float(n % 2), group=n // 2)
    kind, records = read_records(tmp_path / "r.jsonl")
    assert kind == "generic JSONL" and [r.step for r in records] == [0] * 4 + [1] * 4
    assert [r.reasoning for r in records] == [f"plan {n}" for n in range(8)] and records[3].group == 1


def test_a_bad_sample_is_refused_before_anything_is_written(tmp_path):
    log = RolloutLog(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="no step"):
        log.add(prompt="x", response="y", reward=1.0, group=0)
    with pytest.raises(ValueError, match="'reward' has the wrong type"):
        log.add(prompt="x", response="y", reward="high", group=0, step=0)
    with pytest.raises(ValueError, match="one of the two"):
        log.add(prompt="x", reward=1.0, group=0, step=0)
    assert not (tmp_path / "r.jsonl").exists()


def _write(path, worker):
    log = RolloutLog(path)
    for n in range(300):
        log.add(prompt="p" * 500, reasoning=f"{worker}-{n}" * 20, reward=1.0, group=worker, step=0)


def test_lines_from_several_processes_stay_whole(tmp_path):
    path = tmp_path / "r.jsonl"
    workers = [multiprocessing.get_context("fork").Process(target=_write, args=(path, w)) for w in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    _, records = read_records(path)  # a torn line would be a ValueError here
    assert len(records) == 900 and {r.group for r in records} == {0, 1, 2}
