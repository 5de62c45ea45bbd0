"""The public MI diagnosis (ragen_envs.diagnose): a light import, reasonings read from replies, cross-scoring
from text equal to scoring the same ids, the pair cap, and the collapse monitor with its early warning."""

import subprocess
import sys

import numpy as np
import pytest

from ragen_envs.diagnose import CollapseMonitor, cross_loglik, encode_pairs, read_reasoning, score_texts


def test_import_loads_no_torch():
    script = "import ragen_envs.diagnose, sys; assert not {'torch','transformers','trl','verl'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", script], check=True)


def test_read_reasoning():
    assert read_reasoning("<think>box left</think><answer>Left</answer>") == "box left"
    assert read_reasoning("no tags") == read_reasoning("<think>never closed") == ""
    assert read_reasoning("box left</think><answer>Left</answer>", prefilled=True) == "box left"
    assert read_reasoning("[plan: go up] Up", pattern=r"\[plan: (.*?)\]") == "go up"
    assert read_reasoning("PLAN go", pattern=r"PLAN \w+") == "PLAN go"  # no group: the whole match


@pytest.fixture
def policy(tiny_model, tokenizer):
    from ragen_envs.agent.backends import make_policy

    return make_policy("transformers", model=tiny_model, tokenizer=tokenizer, device="cpu")


def chat(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)


def test_the_text_path_scores_the_ids_of_the_joined_text(policy, tokenizer):
    prompts = [chat(tokenizer, f"Board {n}: the box is {side}.") for n, side in enumerate(["left", "right", "up"])]
    reasonings = [["\nThe box is left, push it.", " go left"], ["right then"], ["", "up, up"]]
    x_ids, z_ids = encode_pairs(tokenizer, prompts, reasonings)
    assert [len(zs) for zs in z_ids] == [2, 1, 1]  # the empty reasoning is left out
    for x, prompt, zs, texts in zip(x_ids, prompts, z_ids, [reasonings[0], reasonings[1], ["up, up"]]):
        for z, text in zip(zs, texts):  # exactly the ids of X + <think> + Z, cut where Z starts
            assert x + z == tokenizer(prompt + "<think>" + text, add_special_tokens=False)["input_ids"]
    loglik, lengths = score_texts(policy, tokenizer, prompts, reasonings)
    ours, their_lengths = cross_loglik(policy, x_ids, z_ids)
    np.testing.assert_allclose(loglik, ours, rtol=0, atol=1e-5)
    assert lengths.tolist() == their_lengths.tolist() and loglik.shape == (3, 2, 3)
    policy.reset_cache()
    assert loglik[1, 0, 2] == pytest.approx(policy.score(x_ids[2], [z_ids[1][0]])[0].sum(), abs=1e-4)


def test_at_most_max_pairs_drawn_with_a_seed(tokenizer):
    prompts = [f"prompt {i}<think>" for i in range(3)]
    reasonings = [[f"reasoning {i} {k}" for k in range(30)] for i in range(3)]
    _, z_ids = encode_pairs(tokenizer, prompts, reasonings)
    assert sum(map(len, z_ids)) == 64
    assert encode_pairs(tokenizer, prompts, reasonings, seed=0) == encode_pairs(tokenizer, prompts, reasonings)
    assert encode_pairs(tokenizer, prompts, reasonings, seed=1) != encode_pairs(tokenizer, prompts, reasonings)
    assert sum(map(len, encode_pairs(tokenizer, prompts, reasonings, max_pairs=0)[1])) == 90


def test_a_token_across_the_split_is_an_error(tokenizer):
    with pytest.raises(ValueError, match="spans the end of the prompt"):
        encode_pairs(tokenizer, ["hel"], [["lo world"]], opener="")


def test_the_monitor_keeps_its_emas_and_warns_on_the_collapse_signature(policy, tokenizer):
    prompts = [chat(tokenizer, f"Board {n}") for n in range(3) for _ in range(2)]
    reasonings = ["push left", "go left", "push right", "go right", "push up", ""]
    monitor = CollapseMonitor(policy, tokenizer)
    first = monitor.update(0, prompts, reasonings, rewards=[1, 0, 1, 1, 0, 0.5], group_ids=[0, 0, 1, 1, 2, 2])
    for name in ("mi/mi_est", "mi/mi_zscore", "mi/recall_at_2", "mi_code/mi_est", "mi_code/mi_zscore",
                 "mi/mi_zscore_ema", "mi_code/mi_zscore_ema", "mi/conditional_entropy", "mi/reasoning_entropy",
                 "mi/retrieval_acc", "mi/retrieval_chance"):
        assert np.isfinite(first[name]), name
    assert first["mi/retrieval_chance"] == pytest.approx(1 / 3) and first["warning"] is None
    assert first["reward/std_mean"] == pytest.approx((0.5 + 0 + 0.25) * 2 ** 0.5 / 3)  # sample stds
    assert first["reward/zero_std_share"] == pytest.approx(1 / 3)
    sigma = monitor.emas["mi_code"].sigma
    assert sigma is not None and monitor.emas["mi"].sigma is not None
    # The same batch again: H(Z|X) holds exactly; a larger MI-ZScore-EMA seen before makes this one a fall.
    monitor.recent.appendleft(abs(first["mi_code/mi_zscore_ema"]) * 10 + 1)
    again = monitor.update(5, prompts, reasonings)
    assert again["mi_code/conditional_entropy"] == pytest.approx(first["mi_code/conditional_entropy"])
    assert again["warning"].startswith("template collapse?") and monitor.events == [{"step": 5,
                                                                                     "warning": again["warning"]}]
    assert "reward/std_mean" not in again
    assert monitor.update(6, prompts[:2], reasonings[:2]).keys() == {"step", "warning"}  # one group: no MI


def test_no_warning_when_entropy_moves_too():
    monitor = CollapseMonitor(None, window=3)
    assert monitor._warn({"mi_code/mi_zscore_ema": 2.0, "mi_code/conditional_entropy": 3.0}) is None
    assert monitor._warn({"mi_code/mi_zscore_ema": 0.5, "mi_code/conditional_entropy": 1.0}) is None  # H fell too
    assert monitor._warn({"mi_code/mi_zscore_ema": 0.5, "mi_code/conditional_entropy": 2.9}) is not None
    # the window holds 3 updates: 2.0 has left it, and 0.4 is not below half of 0.5
    assert monitor._warn({"mi_code/mi_zscore_ema": 0.4, "mi_code/conditional_entropy": 2.9}) is None


def test_a_restored_monitor_warns_as_an_uninterrupted_one_would():
    import json

    def fed(monitor, rows):
        return [monitor._warn({"mi_code/mi_zscore_ema": z, "mi_code/conditional_entropy": h}) for z, h in rows]

    rows = [(2.0, 3.0), (1.8, 3.0), (0.5, 2.9), (0.4, 2.9)]
    whole = CollapseMonitor(None, window=3)
    expected = fed(whole, rows)
    first = CollapseMonitor(None, window=3)
    fed(first, rows[:2])
    first.emas["mi"].sigma, first.updates = 0.7, 2
    resumed = CollapseMonitor(None, window=3)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # as a checkpoint stores it
    assert fed(resumed, rows[2:]) == expected[2:] and expected[2] is not None
    assert resumed.emas["mi"].sigma == 0.7 and resumed.updates == 2
