"""benchmarks/speed/diagnose_speed.py on a tiny random model: the naive loop and the transformers scorer give the same
log-likelihoods on the script's batch, and a whole run writes every row (never a timing's value)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragen_envs.registry import env_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "speed"))

import diagnose_speed  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_batch_has_distinct_prompts_up_to_think_and_reasonings_of_the_asked_lengths(tokenizer):
    prompts, reasonings = diagnose_speed.build_batch(tokenizer, env_for("demo"), 3, 2, 5, 9)
    think = tokenizer.encode(diagnose_speed.THINK, add_special_tokens=False)
    assert len({tuple(x) for x in prompts}) == 3 and all(x[-len(think):] == think for x in prompts)
    assert [len(zs) for zs in reasonings] == [2, 2, 2]
    assert all(5 <= len(z) <= 9 for zs in reasonings for z in zs)


def test_the_naive_loop_and_the_transformers_scorer_agree(tokenizer, tiny_model):
    from ragen_envs.agent.backends.transformers import TransformersPolicy

    prompts, reasonings = diagnose_speed.build_batch(tokenizer, env_for("demo"), 3, 2, 4, 12)
    naive = diagnose_speed.naive_loglik(tiny_model, prompts, reasonings)
    policy = TransformersPolicy(tiny_model, tokenizer, device="cpu", batch_size=2)
    ours = diagnose_speed.policy_loglik(policy, prompts, reasonings)
    assert naive.shape == ours.shape == (3, 2, 3)
    np.testing.assert_allclose(ours, naive, atol=1e-4)


def test_tokens_through_the_model_count_each_prompt_once_against_every_pair():
    batch = {"prompts": 2, "reasonings": 4, "prompt_tokens": [10, 12], "reasoning_tokens": [1, 2, 3, 4]}
    counted = diagnose_speed.through_model(batch)
    assert counted["naive_tokens"] == 4 * 22 + 2 * 10 and counted["prompt_once_tokens"] == 22 + 2 * 10
    assert counted["token_ratio"] == pytest.approx(108 / 42)


def test_the_table_names_a_scorer_that_could_not_run():
    rows = {"naive": {"seconds": 4.0, "peak_rss_mb": 100.0, "loglik": [[[-1.0]]]},
            "transformers": {"seconds": 0.5, "peak_rss_mb": 120.0, "loglik": [[[-1.0005]]]},
            "vllm": {"unavailable": "no vLLM venv"}}
    diagnose_speed.summarise(rows, pairs=8, reasonings=2, tokens=80)
    assert rows["transformers"]["speed_vs_naive"] == pytest.approx(8.0)
    assert rows["transformers"]["max_abs_loglik_diff_vs_naive"] == pytest.approx(5e-4)
    assert rows["transformers"]["reasonings_per_s"] == pytest.approx(4.0)
    assert all("loglik" not in row for row in rows.values())
    text = diagnose_speed.table(rows)
    assert "vllm          not available: no vLLM venv" in text
    assert diagnose_speed.verdict(rows).startswith("not met: the transformers scorer 8.0x")


@pytest.mark.slow
def test_a_run_writes_each_scorer_and_says_why_vllm_is_missing(tmp_path, model_dir):
    out = tmp_path / "result.json"
    printed = subprocess.run([sys.executable, "benchmarks/speed/diagnose_speed.py", "--model", model_dir,
                              "--prompts", "2", "--samples", "2", "--min-tokens", "3", "--max-tokens", "6",
                              "--threads", "1", "--vllm-python", str(tmp_path / "none" / "python"), "--out", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=280, check=True).stdout
    result = json.loads(out.read_text())
    assert result["batch"]["pairs"] == 2 * 4 and result["machine"]["cores"] >= 1
    assert result["batch"]["token_ratio"] > 1 and "tokens through the model a pass" in printed
    for name in ("naive", "transformers"):
        row = result["scorers"][name]
        assert row["peak_rss_mb"] > 0 and len(row["seconds_each"]) == 1 and row["threads"] == 1
        assert row["max_abs_loglik_diff_vs_naive"] < 1e-4
    assert result["scorers"]["vllm"]["unavailable"].startswith("no vLLM venv")
    assert "vllm          not available: no vLLM venv" in printed and f"written to {out}" in printed
