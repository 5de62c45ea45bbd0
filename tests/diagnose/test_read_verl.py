"""The verl rollout-dump reader on dump lines written here as verl writes them (ids decoded with special
tokens skipped); tests/integrations/test_verl.py reads a dump that verl itself wrote."""

import json

import pytest

from ragen_envs.agent import chat_encoding
from ragen_envs.diagnose.read_verl import FORMAT, matches, read
from ragen_envs.diagnose.texts import encode_pairs

SYSTEM = {"role": "system", "content": "You play a board game. Answer in <think>...</think><answer>...</answer>."}


def user(board: str) -> dict:
    return {"role": "user", "content": f"Board:\n{board}\nYour move?"}


def line(step, input_, output, score=1.0, **extra) -> dict:
    return {"input": input_, "output": output, "gts": None, "score": score, "step": step, **extra}


def write(path, lines) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def verl_text(tokenizer, ids) -> str:
    """What verl's dump holds for these ids: ``batch_decode(..., skip_special_tokens=True)``."""
    return tokenizer.batch_decode([ids], skip_special_tokens=True)[0]


def prompt_ids(tokenizer, messages, prefill="<think>") -> list[int]:
    """A prompt as this project's verl agent loop builds it: the template's ids, then the prefill's."""
    return chat_encoding.encode_chat(tokenizer, messages) + chat_encoding.tokenize(tokenizer, prefill)


def test_matches_verl_dumps_only(tmp_path):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    write(dump / "2.jsonl", [line(2, "q", "<think>a</think>")])
    write(dump / "10.jsonl", [line(10, "q", "<think>a</think>")])
    assert FORMAT == "verl rollout dump"
    assert matches(dump) and matches(dump / "10.jsonl")
    generic = tmp_path / "generic.jsonl"
    write(generic, [{"prompt": "q", "reasoning": "a", "reward": 1, "group": 0, "step": 0}])
    (tmp_path / "empty").mkdir()
    (tmp_path / "text.jsonl").write_text("not json\n")
    other = tmp_path / "other"
    other.mkdir()
    write(other / "1.jsonl", [{"input": "q", "output": "a"}])  # no score nor step
    assert not any(matches(p) for p in (generic, tmp_path / "empty", tmp_path / "text.jsonl", other,
                                        tmp_path / "missing"))


def test_groups_steps_rewards_and_prefilled_reasonings(tmp_path):
    write(tmp_path / "10.jsonl", [line(10, "board A\nassistant\n<think>", "go left</think><answer>Left</answer>", 1.0),
                                  line(10, "board B\nassistant\n<think>", "no idea", 0.0)])
    write(tmp_path / "2.jsonl", [
        line(2, "board B\nassistant\n<think>", "push</think><answer>Up</answer>", 0.5),
        line(2, "board A\nassistant\n<think>", "wait</think><answer>Down</answer>", 1.0),
        line(2, "board B\nassistant\n<think>", "<think>again</think><answer>Up</answer>", 0.0),  # opened twice
        # the first reply never closed its block: the </think> is the next turn's
        line(2, "board A\nassistant\n<think>", "ran out\nuser\nTurn 2\nassistant\n<think>late</think><answer>Up"),
        line(2, "board C\nassistant\n", "<think>not prefilled</think><answer>Up</answer>", 2.0)])
    records = read(tmp_path)
    assert [(r.step, r.group, r.turn, r.reward) for r in records] == [
        (2, 0, 0, 0.5), (2, 1, 0, 1.0), (2, 0, 0, 0.0), (2, 1, 0, 1.0), (2, 2, 0, 2.0), (10, 0, 0, 1.0),
        (10, 1, 0, 0.0)]
    assert [r.reasoning for r in records] == ["push", "wait", "<think>again", "", "not prefilled", "go left", ""]
    assert records[0].prompt == "board B\nassistant\n<think>" and records[0].prompt_ids == []
    assert [r.reasoning for r in read(tmp_path / "2.jsonl", pattern=r"<answer>(\w+)")] == [
        "Up", "Down", "Up", "Up", "Up"]


@pytest.mark.parametrize("content, problem", [
    ("not json\n", "line 1 is not a JSON object"),
    (json.dumps({"input": "q", "output": "a", "step": 1}) + "\n", "line 1 lacks score"),
    (json.dumps(line(1, "q", "a", score="high")) + "\n", "field 'score' has the wrong type"),
    (json.dumps(line(1.5, "q", "a")) + "\n", "field 'step' has the wrong type"),
    (json.dumps(line(1, "q", "a")) + "\n[]\n", "line 2 is not a JSON object"),
    ("\n", "no samples"),
])
def test_each_problem_is_one_line_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "3.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=problem) as error:
        read(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_folder_without_step_files_or_no_path(tmp_path):
    with pytest.raises(ValueError, match="no N.jsonl files"):
        read(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        read(tmp_path / "missing")


@pytest.mark.parametrize("messages", [
    [SYSTEM, user("_P_G")],
    [user("_P_G")],  # the template adds its default system prompt
    [SYSTEM, user("_P_G"), {"role": "assistant", "content": "<think>left</think><answer>Left</answer>"},
     user("P__G")],
], ids=["system-user", "user", "multi-turn"])
def test_the_chat_template_is_reapplied_to_the_ids_the_model_read(tmp_path, tokenizer, messages):
    ids = prompt_ids(tokenizer, messages)
    decoded = verl_text(tokenizer, ids)
    assert "<|im_start|>" not in decoded and decoded.endswith("assistant\n<think>")
    write(tmp_path / "1.jsonl", [line(1, decoded, "go right</think><answer>Right</answer>")])
    record, = read(tmp_path, tokenizer=tokenizer)
    x, zs = encode_pairs(tokenizer, [record.prompt], [[record.reasoning]])
    assert x == [ids] and zs == [[chat_encoding.tokenize(tokenizer, "go right")]]
    # Without a tokenizer the prompt is the decoded text: the template's special tokens are missing.
    plain, = read(tmp_path)
    assert plain.prompt == decoded and encode_pairs(tokenizer, [plain.prompt], [["go"]])[0] != [ids]


def test_a_prompt_from_another_template_is_refused(tmp_path, tokenizer):
    llama_like = "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"  # plain text to this tokenizer
    write(tmp_path / "1.jsonl", [line(1, llama_like, "a</think>")])
    with pytest.raises(ValueError, match="does not decode from the tokenizer's chat template") as error:
        read(tmp_path, tokenizer=tokenizer)
    assert str(tmp_path / "1.jsonl") in str(error.value)


def test_the_tokenizer_cuts_the_output_at_the_first_reply(tmp_path, tokenizer):
    """A multi-turn output (this project's agent loop, no prefill): the first reply has no reasoning, a
    later one does. The tokenizer's turn separator ends the first reply there; the text alone cannot."""
    messages = [SYSTEM, user("_P_G")]
    first = chat_encoding.encode_chat(tokenizer, messages)
    reply = chat_encoding.tokenize(tokenizer, "no format") + [tokenizer.eos_token_id]
    chat = messages + [{"role": "assistant", "content": "no format"}, user("P__G")]
    later = chat_encoding.extend(tokenizer, first, reply, chat)[len(first):] + chat_encoding.tokenize(
        tokenizer, "<think>late</think><answer>Left</answer>")
    write(tmp_path / "1.jsonl", [line(1, verl_text(tokenizer, first), verl_text(tokenizer, later))])
    assert read(tmp_path, tokenizer=tokenizer)[0].reasoning == ""
    assert read(tmp_path)[0].reasoning == "late"  # as the module docstring warns
