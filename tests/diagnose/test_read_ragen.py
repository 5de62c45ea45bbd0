"""The reader of RAGEN's rollout dumps (ragen_envs.diagnose.read_ragen), on files built as RAGEN writes them.

RAGEN does not install here, so the files are built by following its code at commit
20daedc47558e000f7de912b060646bf2e8026bd (github.com/mll-lab-nu/RAGEN):

- a trajectory's ``history`` as ``EnvStateManager._update_cache_history`` and ``step`` fill it
  (ragen/llm_agent/es_manager.py): per turn ``state``, ``actions_left``, then ``actions``, ``reward``,
  ``info``, ``llm_response``, ``llm_raw_response``; a last entry with the final state only. The raw reply
  is ``"<think>" + generated text`` (``ContextManager.get_env_inputs``, ragen/llm_agent/ctx_manager.py);
- a JSONL line as ``rollout_to_openai_format`` / ``extract_openai_messages`` (scripts/convert_to_jsonl.py)
  and ``_save_as_jsonl`` (ragen/llm_agent/agent_proxy.py) write it: ``custom_id``, ``messages`` (the
  states as user messages, the raw replies as assistant messages, " (reward: r)" after a later state
  whose entry has a non-zero reward), ``metadata`` (env_id, group_id, num_turns, total_reward, success,
  the env's ``<tag>/<metric>`` numbers, entropy, n_tokens), dumped with ``json.dumps(..., ensure_ascii=False)``;
- a pickle as verl's ``DataProto.save_to_disk`` writes it (``pickle.dump``);
- the trainer's validation dump as verl's ``RayPPOTrainer._dump_generations`` (verl 1e47e41, RAGEN's pin
  before Nov 2025) writes what ``RayAgentTrainer._validate`` (ragen/trainer/agent_trainer.py) hands it.
"""

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ragen_envs.diagnose import read_ragen
from ragen_envs.diagnose.offline import reward_row
from ragen_envs.diagnose.texts import encode_pairs

TAG = "CoordSokoban"


def history(board: str, replies: list[str], rewards: list[float]) -> list[dict]:
    """One trajectory's history: a state per turn, then the turn's reply and reward, then the last state."""
    entries = [{"state": f"{board}\nturn 0", "actions_left": 10}]
    for turn, (reply, reward) in enumerate(zip(replies, rewards)):
        entries[-1].update({"actions": ["Up"], "reward": reward, "info": {"success": False, "raw_reward": 0.0},
                            "llm_response": reply, "llm_raw_response": reply})
        entries.append({"state": f"{board}\nturn {turn + 1}", "actions_left": 9 - turn})
    return entries


def ragen_line(index: int, entries: list[dict], env_id: int, group_id: int, total_reward: float,
               success: float) -> str:
    messages = []
    for i, turn in enumerate(entries):
        if "state" in turn:
            reward = turn.get("reward", 0)
            suffix = f" (reward: {reward})" if i > 0 and reward != 0 else ""
            messages.append({"role": "user", "content": f"{turn['state']}{suffix}"})
        if "llm_response" in turn and turn.get("llm_raw_response", turn.get("llm_response", "")):
            messages.append({"role": "assistant", "content": str(turn.get("llm_raw_response", turn["llm_response"]))})
    metrics = {f"{TAG}/success": success, f"{TAG}/num_actions": len(entries) - 1, f"{TAG}/pass@1": success}
    metadata = {"env_id": env_id, "group_id": group_id, "num_turns": len([h for h in entries if "actions" in h]),
                "total_reward": total_reward, "success": metrics.get("success", False)}
    metadata.update({k: v for k, v in metrics.items() if k != "success"})
    metadata.update({"entropy": 0.5, "n_tokens": 40})
    return json.dumps({"custom_id": f"traj_{index}", "messages": messages, "metadata": metadata},
                      ensure_ascii=False) + "\n"


def reply(group: int, k: int, turn: int) -> str:
    return f"<think>board {group} sample {k} turn {turn}: push up</think><answer>Up</answer>"


def write_dump(path: Path, groups: int, size: int, turns: int = 2, zero_rewards: bool = False) -> dict:
    """A dump of ``groups`` env groups of ``size`` trajectories (env_id = group * size + k, as RAGEN numbers
    them); returns {env_id: the return written}."""
    returns, lines = {}, []
    for g in range(groups):
        for k in range(size):
            env_id = g * size + k
            rewards = [-0.1] * (turns - 1) + [float(k + g)]
            returns[env_id] = sum(rewards)
            entries = history(f"board {g}", [reply(g, k, t) for t in range(turns)], rewards)
            lines.append(ragen_line(env_id, entries, env_id, g, 0.0 if zero_rewards else returns[env_id],
                                    float(k == 0)))
    path.write_text("".join(lines), encoding="utf-8")
    return returns


def test_a_dump_with_groups_of_g_reads_every_turn_with_groups_rewards_and_reasonings(tmp_path):
    source = tmp_path / "val_rollouts_20260413_123456.jsonl"
    returns = write_dump(source, groups=3, size=4, turns=3)
    assert read_ragen.matches(source)
    records = read_ragen.read(source)
    assert len(records) == 3 * 4 * 3 and {r.step for r in records} == {0}
    first, _, third = ([r for r in records if r.turn == t] for t in range(3))
    assert sorted(r.group for r in first) == [g for g in range(3) for _ in range(4)]
    assert [r.reward for r in first] == pytest.approx(list(returns.values()))
    assert first[5].reasoning == "board 1 sample 1 turn 0: push up"
    assert third[5].reasoning == "board 1 sample 1 turn 2: push up"
    # the conversation before the reply; the last state loses the reward its own reply earned (2.0 here)
    assert first[5].prompt == "user:\nboard 1\nturn 0\n\nassistant:\n"
    assert third[5].prompt == (f"user:\nboard 1\nturn 0\n\nassistant:\n{reply(1, 1, 0)}\n\n"
                               f"user:\nboard 1\nturn 1 (reward: -0.1)\n\nassistant:\n{reply(1, 1, 1)}\n\n"
                               "user:\nboard 1\nturn 2\n\nassistant:\n")
    assert reward_row([r.reward for r in first], [r.group for r in first])["notes"] == []


def test_a_folder_is_one_step_a_file_in_name_order_and_its_pickles_are_left_alone(tmp_path):
    write_dump(tmp_path / "val_rollouts_20260102_000000.jsonl", groups=2, size=2, turns=1)
    write_dump(tmp_path / "val_rollouts_20260101_000000.jsonl", groups=3, size=2, turns=1)
    (tmp_path / "val_rollouts_20260101_000000.pkl").write_bytes(pickle.dumps({"not": "read"}))
    assert read_ragen.matches(tmp_path)
    records = read_ragen.read(tmp_path)
    assert [sum(r.step == s for r in records) for s in (0, 1)] == [6, 4]


def test_a_validation_dump_has_one_sample_a_group_and_skips_the_reward_statistics(tmp_path):
    source = write_dump_path = tmp_path / "val_rollouts_20260413_000000.jsonl"
    write_dump(write_dump_path, groups=5, size=1)
    records = [r for r in read_ragen.read(source) if r.turn == 0]
    assert sorted(r.group for r in records) == [0, 1, 2, 3, 4]
    assert all(r.reasoning for r in records)
    assert reward_row([r.reward for r in records], [r.group for r in records])["notes"] == [
        "reward statistics skipped: every group has one sample"]


def test_a_chat_template_renders_the_prompt_up_to_the_reply(tmp_path, tokenizer):
    source = tmp_path / "dump.jsonl"
    write_dump(source, groups=2, size=2, turns=3)
    records = read_ragen.read(source, tokenizer=tokenizer)
    second = [r for r in records if r.turn == 1][0]
    messages = [{"role": "user", "content": "board 0\nturn 0"}, {"role": "assistant", "content": reply(0, 0, 0)},
                {"role": "user", "content": "board 0\nturn 1"}]
    assert second.prompt == tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    first = [r for r in records if r.turn == 0]
    x_ids, z_ids = encode_pairs(tokenizer, [first[0].prompt, first[2].prompt],
                                [[first[0].reasoning, first[1].reasoning], [first[2].reasoning]])
    assert len(x_ids) == 2 and [len(z) for z in z_ids] == [2, 1]


def test_a_pattern_replaces_the_think_tags(tmp_path):
    source = tmp_path / "dump.jsonl"
    write_dump(source, groups=2, size=1, turns=1)
    assert {r.reasoning for r in read_ragen.read(source, pattern=r"<answer>(.*?)</answer>")} == {"Up"}


def test_all_zero_total_rewards_warn_and_reward_reads_the_success(tmp_path):
    source = tmp_path / "dump.jsonl"
    write_dump(source, groups=2, size=2, turns=1, zero_rewards=True)
    with pytest.warns(UserWarning, match="total_reward is 0.0"):
        read_ragen.read(source)
    records = read_ragen.read(source, reward=f"{TAG}/success")
    assert [r.reward for r in records] == [1.0, 0.0, 1.0, 0.0]


class WritesFile:
    """Unpickling this writes a file: what a pickle can do to whoever opens it."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return Path.write_text, (self.target, "unpickled")


@pytest.mark.parametrize("name", ["val_rollouts_20260413_123456.pkl", "rollouts.bin"])
def test_a_pickle_is_refused_with_the_converter_named_and_never_unpickled(tmp_path, name):
    marker = tmp_path / "marker.txt"
    data = pickle.dumps(WritesFile(marker), protocol=4)
    pickle.loads(data)  # the fixture is live: opening it writes the marker
    assert marker.exists()
    marker.unlink()
    source = tmp_path / name
    source.write_bytes(data)
    assert read_ragen.matches(source)
    for call in (read_ragen.refuse_pickle, read_ragen.read):
        with pytest.raises(ValueError) as error:
            call(source)
        message = str(error.value)
        assert "\n" not in message and str(source) in message
        assert f"python scripts/convert_to_jsonl.py --input {source}" in message
    with pytest.raises(ValueError, match="convert_to_jsonl.py"):
        read_ragen.read(tmp_path)  # a folder with only the pickle
    assert not marker.exists()


def test_a_protocol_0_pickle_is_known_by_its_suffix(tmp_path):
    source = tmp_path / "old.pkl"
    source.write_bytes(pickle.dumps({"a": 1}, protocol=0))
    with pytest.raises(ValueError, match="convert_to_jsonl.py"):
        read_ragen.refuse_pickle(source)
    read_ragen.refuse_pickle(tmp_path / "missing.jsonl")  # not a file: nothing to refuse


def test_other_jsonl_is_not_ragen(tmp_path):
    generic = tmp_path / "generic.jsonl"
    generic.write_text(json.dumps({"prompt": "p", "response": "<think>z</think>", "reward": 1.0, "group": "g",
                                   "step": 0}) + "\n")
    verl = tmp_path / "7.jsonl"
    verl.write_text(json.dumps({"input": "user\nBoard", "output": "<think>z</think>", "gts": None, "score": 1.0,
                                "step": 7}) + "\n")
    text = tmp_path / "notes.txt"
    text.write_text("not json\n")
    for path in (generic, verl, text):
        assert not read_ragen.matches(path)
        with pytest.raises(ValueError, match="not a RAGEN rollout dump"):
            read_ragen.read(path)
    assert not read_ragen.matches(tmp_path)


def test_the_trainer_validation_dump_is_recognised_and_refused(tmp_path):
    source = tmp_path / "10.jsonl"
    output = ("system\nYou're a helpful assistant. \nuser\n\nTurn 1:\nState:\nboard\n...\nassistant\n"
              "<think>up</think><answer>Up</answer>")
    source.write_text(json.dumps({"input": "", "output": output, "score": -0.1, "step": 10, "reward": -0.1},
                                 ensure_ascii=False) + "\n")
    assert read_ragen.matches(source)
    with pytest.raises(ValueError, match="output.format=jsonl") as error:
        read_ragen.read(source)
    assert "\n" not in str(error.value) and str(source) in str(error.value)


@pytest.mark.parametrize("bad, what", [("{not json", "line 2 is not a JSON object"),
                                       (json.dumps({"custom_id": "traj_1", "messages": []}), "line 2 lacks"),
                                       (json.dumps({"custom_id": "traj_1", "messages": [],
                                                    "metadata": {"total_reward": 1.0}}), "line 2: metadata 'group_id'"),
                                       (json.dumps({"custom_id": "traj_1", "messages": [],
                                                    "metadata": {"group_id": 1, "total_reward": "1"}}),
                                        "line 2: metadata 'total_reward' must be a number")])
def test_a_malformed_line_is_one_error_line_naming_the_file_and_line(tmp_path, bad, what):
    source = tmp_path / "dump.jsonl"
    write_dump(source, groups=1, size=1, turns=1)
    source.write_text(source.read_text() + bad + "\n")
    with pytest.raises(ValueError) as error:
        read_ragen.read(source)
    assert "\n" not in str(error.value) and f"{source}: {what}" in str(error.value)


def test_importing_the_reader_loads_no_torch_nor_ragen():
    code = ("import sys, ragen_envs.diagnose.read_ragen; "
            "print(sorted(m for m in ('torch', 'transformers', 'verl', 'ragen') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
