"""--report-to wandb, in W&B's offline mode (no network): the run file holds the trainer's metrics under
their names and RAGEN's, at step = iteration, the run's config and a table of sampled episodes; a missing
wandb is one line before any model loads; --report-to auto without TensorBoard says where metrics go."""

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from ragen_envs.agent.trajectory import Trajectory, load_jsonl
from trainers import Trainer, TrainerConfig
from trainers.metrics import MetricsLogger, read_metrics, tensorboard_writer
from trainers.tracking import COLUMNS, EPISODES_PER_ITERATION, RAGEN_NAMES, TABLE_KEY, episode_rows, wandb_dir
from tests.trainers.test_trainer import SeededReplies, config, make_model
from conftest import SMOKE


def read_wandb_file(path: Path) -> list:
    """The records of a .wandb file (LevelDB's log format: 32 KiB blocks of CRC, length, type, data;
    a 7-byte W&B header first), as wandb's protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    records, pending = [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):  # the rest of a block is padding
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def finished_records(path: Path, timeout: float = 60.0) -> list:
    """The run file's records once it holds the exit record: wandb's service process may still be writing
    it when ``finish()`` has returned."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = read_wandb_file(path)
        except Exception:  # a record cut off mid-write
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, every file it writes under tmp_path."""
    home = tmp_path / "wandb-home"
    for name, sub in [("WANDB_DIR", "dir"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data"),
                      ("WANDB_CONFIG_DIR", "config")]:
        (home / sub).mkdir(parents=True)
        monkeypatch.setenv(name, str(home / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return home


def test_an_offline_wandb_run_holds_the_metrics_the_config_and_an_episode_table(offline, tokenizer, tmp_path):
    cfg = config(tmp_path, num_iterations=2, report_to="wandb", save_rollouts_steps=1, save_strategy="no")
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    trainer.train()
    runs = list((offline / "dir" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and not (tmp_path / "run" / "wandb").exists()  # WANDB_DIR, not the run folder
    records = finished_records(next(runs[0].glob("run-*.wandb")))

    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "run" and run.run_group == "run"
    wandb_config = {item.key: json.loads(item.value_json) for item in run.config.update}
    written = json.loads((tmp_path / "run" / "config.json").read_text())
    assert {k: wandb_config[k] for k in written} == written  # config.json as it is, report_to included

    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    assert [h["_step"] for h in history] == [1, 2]
    for logged, record in zip(history, read_metrics(tmp_path / "run")):
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float))}
        assert {k: logged[k] for k in numbers} == pytest.approx(numbers)  # every metric, under its own name
        assert {RAGEN_NAMES[k]: v for k, v in numbers.items() if k in RAGEN_NAMES} == \
            pytest.approx({RAGEN_NAMES[k]: logged[RAGEN_NAMES[k]] for k in numbers if k in RAGEN_NAMES})
    first = read_metrics(tmp_path / "run")[0]
    assert {"rollout/success", "mi/retrieval_acc", "filter/kept_ratio"} <= history[0].keys()
    assert set(RAGEN_NAMES) <= first.keys(), set(RAGEN_NAMES) - first.keys()  # no alias of a name not logged

    for step, logged in zip((1, 2), history):
        assert logged[f"{TABLE_KEY}/_type"] == "table-file"
        assert logged[f"{TABLE_KEY}/nrows"] == EPISODES_PER_ITERATION
        table = json.loads((runs[0] / "files" / logged[f"{TABLE_KEY}/path"]).read_text())
        assert table["columns"] == COLUMNS
        played = load_jsonl(tmp_path / "run" / "rollouts" / f"iteration-{step}.jsonl")
        for row in map(dict, (zip(COLUMNS, values) for values in table["data"])):
            assert row["iteration"] == step
            assert row["prompt"].startswith("[system]") and "[assistant]" not in row["prompt"]
            assert row["reply"].startswith("[assistant]")
            # one of the group's G episodes (they share the seed), with its own turns, reward and success
            assert any(t.env_id == row["env"] and t.num_turns == row["turns"] == row["reply"].count("[assistant]")
                       and t.episode_return == pytest.approx(row["reward"]) and t.success == row["success"]
                       and all(m["content"] in row["reply"] for m in t.messages if m["role"] == "assistant")
                       for t in played if (t.seed, t.group) == (row["seed"], row["group"]))


def test_wandb_files_go_to_wandb_dir_else_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert wandb_dir(tmp_path / "run") == str(tmp_path / "run")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    assert wandb_dir(tmp_path / "run") == str(tmp_path / "elsewhere")


def _trajectory(seed: int, reward: float, success: bool) -> Trajectory:
    messages = [{"role": "system", "content": "You play."}, {"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": f"state {seed}"}]},
        {"role": "assistant", "content": "<answer>Up</answer>"}, {"role": "user", "content": "moved"},
        {"role": "assistant", "content": "<answer>Left</answer>"}]
    return Trajectory("env-v0", group=seed, seed=100 + seed, messages=messages, episode_return=reward,
                      success=success)


def test_episode_rows_split_each_episode_at_its_first_reply():
    episodes = [_trajectory(i, float(i), i % 2 == 0) for i in range(10)]
    rows = episode_rows(episodes, iteration=7, n=3)
    assert rows == episode_rows(episodes, iteration=7, n=3) and len(rows) == 3  # the iteration seeds the draw
    for row in map(dict, (zip(COLUMNS, r) for r in rows)):
        i = row["group"]
        assert row["iteration"] == 7 and row["seed"] == 100 + i
        assert row["reward"] == i and row["success"] == (i % 2 == 0)
        assert row["prompt"] == f"[system] You play.\n\n[user] <image>state {i}"
        assert row["reply"] == "[assistant] <answer>Up</answer>\n\n[user] moved\n\n[assistant] <answer>Left</answer>"
    assert len(episode_rows(episodes[:2], iteration=1, n=3)) == 2


@pytest.mark.parametrize("tracker", ["wandb", "tensorboard"])
def test_asking_for_a_tracker_without_it_is_one_line_before_any_model_loads(tracker, tmp_path, capsys, monkeypatch):
    import importlib.util

    import transformers

    from ragen_envs.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    assert main(["train", "--env", SMOKE, "--output-dir", str(tmp_path / "run"), "--report-to", tracker]) == 2
    err = capsys.readouterr().err
    assert f"{tracker} is not installed" in err and f"[{tracker}]" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert TrainerConfig().report_to == "auto"  # by default a tracker is used where installed, never required


def test_auto_without_tensorboard_says_in_one_line_where_metrics_go(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # its import fails
    logger = MetricsLogger(tmp_path / "run")
    out, err = capsys.readouterr()
    assert logger._tb is None and err.count("\n") == 1 and not out  # stdout is the metrics table's
    assert "TensorBoard is not installed" in err and "metrics.jsonl and metrics.csv only" in err
    with pytest.raises(ImportError):  # asked for by name: no quiet fallback
        tensorboard_writer(tmp_path / "run", 0, "tensorboard")
    assert TrainerConfig().report_to == "auto"
