"""MetaMathQA: RAGEN's exact check (by default) and the normalised one, retries at half reward, RAGEN's
pick of a record, the built-in word problems."""

import random

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.metamath.answers import gold_from_response, is_correct, normalise
from ragen_envs.metamath.generator import TEMPLATES, generate

PROBLEM = {"query": "What is 3/4 of 24?", "response": "3/4 * 24 = 18. The answer is: 18"}


@pytest.mark.parametrize("answer, gold, correct", [
    ("18", "18", True), (" 18 ", "18", True), ("$18$", "18", True), ("\\boxed{18}", "18", True),
    ("18.0", "18", True), ("18.000", "18", True), ("1,234", "1234", True), ("1234", "1,234", True),
    ("0.75", "3/4", True), ("3/4", "0.75", True), ("\\frac{3}{4}", "0.75", True), ("\\dfrac{3}{4}", "3/4", True),
    ("The answer is: 18", "18", True), ("18 dollars", "18", True), ("$18.", "18", True),
    ("0.7500001", "0.75", True), ("1e-7", "0", True), ("18.5", "18", False), ("17", "18", False),
    ("18 or 19", "18", False), ("", "18", False), ("x^2+1", "X^2+1", True), ("\\boxed{\\frac{1}{2}}", "1/2", True),
    ("(2, 3)", "(2,3)", False), ("Paris", "paris", True), ("1,000,000", "1000000", True),
])
def test_answer_checking(answer, gold, correct):
    assert is_correct(answer, gold) is correct


# (answer, RAGEN's verdict) for a record whose response ends "The answer is: 18", worked from RAGEN's
# _check_answer: lowercase, drop all whitespace, compare with the label
RAGEN_CASES = [("18", True), (" 18 ", True), ("1 8", True), ("18\n", True), ("$18", False), ("18.0", False),
               ("\\boxed{18}", False), ("The answer is: 18", False), ("eighteen", False), ("17", False)]


@pytest.mark.parametrize("answer, correct", RAGEN_CASES)
def test_the_default_check_is_ragens_exact_string(answer, correct):
    env = gym.make("Ragen/MetaMathQA-v0", max_attempts=1)
    env.reset(seed=0, options={"problem": PROBLEM})
    _, r, term, trunc, info = env.step(answer)
    assert (r, info["success"], term or trunc) == (float(correct), correct, True)
    lenient = gym.make("Ragen/MetaMathQA-v0", answer_check="normalized")
    lenient.reset(seed=0, options={"problem": PROBLEM})
    assert lenient.step(answer)[1] == float(answer.strip() not in ("eighteen", "17"))


def test_ragens_label_is_after_the_first_the_answer_is_and_case_and_spaces_do_not_count():
    env = gym.make("Ragen/MetaMathQA-v0")
    record = {"query": "Name it?", "response": "The answer is: Paris France. Or the answer is: 3"}
    env.reset(seed=0, options={"problem": record})
    assert env.unwrapped.oracle_action() == "Paris France. Or the answer is: 3"
    assert env.step("parisfrance.ortheansweris:3")[1] == 1.0
    lenient = gym.make("Ragen/MetaMathQA-v0", answer_check="normalized")
    lenient.reset(seed=0, options={"problem": record})
    assert lenient.unwrapped.oracle_action() == "3" and lenient.step("3")[1] == 1.0


def test_a_dataset_item_is_ragens_pick_for_the_seed():
    records = [{"query": f"q{i}?", "response": f"The answer is: {i}"} for i in range(7)]
    env = gym.make("Ragen/MetaMathQA-v0", dataset=records)
    for seed in (0, 1, 123, 10_000):
        assert env.reset(seed=seed)[0] == f"q{random.Random(seed).randint(0, 6)}?"
    with pytest.raises(ValueError, match="selection"):
        gym.make("Ragen/MetaMathQA-v0", selection="random")


def test_normalise_and_gold():
    assert normalise("The answer is: $\\boxed{1,200}$.") == "1200"
    assert gold_from_response(PROBLEM["response"]) == "18"
    assert gold_from_response("no final answer here") is None


def test_a_wrong_answer_halves_the_reward_of_the_next():
    env = gym.make("Ragen/MetaMathQA-v0")
    obs, _ = env.reset(seed=0, options={"problem": PROBLEM})
    assert obs == PROBLEM["query"]
    obs, r, term, trunc, info = env.step("17")
    assert (r, term, trunc, info["action_is_valid"]) == (0.0, False, False, True)
    assert "Incorrect. Please think again." in obs and "17" in obs
    obs, r, term, trunc, info = env.step("16")
    obs, r, term, trunc, info = env.step("18")
    assert (r, term, info["success"]) == (0.25, True, True)  # two misses: 1 / 2**2


def test_attempts_run_out_then_truncated():
    env = gym.make("Ragen/MetaMathQA-v0", max_attempts=2)
    env.reset(seed=0, options={"problem": PROBLEM})
    assert env.step("1")[2:4] == (False, False)
    assert env.step("2")[2:4] == (False, True)
    single = gym.make("Ragen/MetaMathQA-v0", max_attempts=1)
    single.reset(seed=0, options={"problem": PROBLEM})
    assert single.step("18")[1] == 1.0
    with pytest.raises(ValueError, match="max_attempts"):
        gym.make("Ragen/MetaMathQA-v0", max_attempts=0)


def test_the_builtin_problems():
    assert len(TEMPLATES) >= 25
    records = [generate(random.Random(i)) for i in range(2000)]
    assert records[:50] == [generate(random.Random(i)) for i in range(50)]  # deterministic
    assert len({r["type"] for r in records}) == len(TEMPLATES)
    assert len({r["query"] for r in records}) > 1900
    for r in records:
        gold = gold_from_response(r["response"])
        assert gold is not None and int(gold) >= 0 and r["response"].endswith(f"The answer is: {gold}")


def test_seed_picks_the_problem_and_the_oracle_solves_it():
    env = gym.make("Ragen/MetaMathQA-v0")
    first = env.reset(seed=4)[0]
    assert env.reset(seed=4)[0] == first and env.reset(seed=5)[0] != first
    assert gym.make("Ragen/MetaMathQA-v0", split="test").reset(seed=4)[0] != first
    assert env.step(env.unwrapped.oracle_action())[1] == 1.0


def test_other_sources_keep_metamathqas_fields(tmp_path):
    import json

    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [PROBLEM, {**PROBLEM, "query": "Again?"}]))
    env = gym.make("Ragen/MetaMathQA-v0", dataset=str(path))
    assert env.reset(seed=0)[0] in ("What is 3/4 of 24?", "Again?")
    with pytest.raises(ValueError, match="lacks field.*response"):
        gym.make("Ragen/MetaMathQA-v0", dataset=[{"query": "x", "answer": "1"}])
    with pytest.raises(ValueError, match="The answer is"):
        gym.make("Ragen/MetaMathQA-v0", dataset=[{"query": "x", "response": "no answer"}])


def test_the_hub_source_is_metamathqa(monkeypatch):
    from ragen_envs import data
    from tests.contract.test_data import fake_datasets

    calls = fake_datasets(monkeypatch, rows=[{"query": "1 + 1?", "response": "The answer is: 2", "type": "x"}])
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: True)
    data.load_hub.cache_clear()
    env = gym.make("Ragen/MetaMathQA-v0", dataset="hub")
    assert env.reset(seed=0)[0] == "1 + 1?" and env.step("2")[1] == 1.0
    assert calls == [(("meta-math/MetaMathQA",), "train")]
    data.load_hub.cache_clear()
    gym.make("Ragen/MetaMathQA-v0", dataset="hub", split="test")  # its one split, as RAGEN validates
    assert calls[-1] == (("meta-math/MetaMathQA",), "train")
    data.load_hub.cache_clear()


def test_a_huge_numeral_is_not_a_number_and_is_checked_at_once():
    # "1e100000000" made Fraction build a hundred-million-digit integer (past 20 s a step)
    assert not is_correct("1e100000000", "18") and not is_correct("9" * 5000, "18")
    assert is_correct("1.8e1", "18")
    env = gym.make("Ragen/MetaMathQA-v0", answer_check="normalized")
    env.reset(seed=0, options={"problem": PROBLEM})
    _, reward, _, _, info = env.step("1e100000000")
    assert reward == 0.0 and info["action_is_valid"]


def test_many_wrong_answers_neither_overflow_nor_grow_the_observation():
    # 1 / 2**1024 raised OverflowError; the list of every answer tried grew each step's text
    env = gym.make("Ragen/MetaMathQA-v0", max_attempts=2000, answer_check="normalized")
    env.reset(seed=0, options={"problem": PROBLEM})
    sizes = []
    for k in range(1500):
        obs, _, _, _, _ = env.step(str(10_000 + k))
        sizes.append(len(obs))
    assert abs(sizes[-1] - sizes[100]) <= 2 and "1490 more, then" in obs  # digits of the counts only
    _, reward, terminated, _, info = env.step("18")
    assert terminated and info["success"] and reward == 0.0


def test_max_attempts_past_its_bound_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^max_attempts must be in \[1, 10000\] \(.+\), got 1000000$"):
        gym.make("Ragen/MetaMathQA-v0", max_attempts=10**6)
