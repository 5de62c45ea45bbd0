"""benchmarks/speed/vs_trl.py at the smallest scale, on a tiny random model: both sides run two iterations on the
same settings and the result holds every phase, token count, memory peak and ratio (never a timing's value)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the 'trl' extra")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "speed"))

import vs_trl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_iterations_each_side_give_phases_tokens_memory_and_ratios(tmp_path, tokenizer, tiny_model):
    model = tmp_path / "tiny"
    tiny_model.save_pretrained(model)
    tokenizer.save_pretrained(model)
    out = tmp_path / "result.json"
    printed = subprocess.run([sys.executable, "benchmarks/speed/vs_trl.py", "--model", str(model), "--groups", "2",
                              "--group-size", "2", "--max-turns", "2", "--max-new-tokens", "6", "--iterations", "2",
                              "--out", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=280, check=True).stdout
    result = json.loads(out.read_text())
    assert result["commit"] and result["versions"]["trl"]
    assert result["settings"] | {"model": str(model), "groups": 2, "group_size": 2, "max_turns": 2,
                                 "max_new_tokens": 6, "iterations": 2} == result["settings"]
    for name in vs_trl.SIDES:
        side = result[name]
        assert side["episodes"] == 2 * 4 and 0 < side["generated_tokens"] <= 2 * 4 * 2 * 6
        assert all(side[f"{p}_s"] >= 0 for p in vs_trl.PHASES) and side["total_s"] > 0
        # the phases split the iteration
        assert side["rollout_s"] + side["scoring_s"] + side["update_s"] == pytest.approx(side["total_s"])
        assert side["tokens_per_s"] == pytest.approx(side["generated_tokens"] / side["total_s"])
        assert side["peak_rss_mb"] > 0 and side["device"] == result["ours"]["device"]
        assert side["bf16"] == result["ours"]["bf16"]
    assert "mi_s" in result["ours"]  # MI on in ours
    ratio = result["ratio_ours_over_trl"]
    assert {f"{p}_s" for p in vs_trl.PHASES} | {"tokens_per_s", "peak_rss_mb"} <= ratio.keys()
    assert ratio["total_s"] == pytest.approx(result["ours"]["total_s"] / result["trl"]["total_s"])
    rows = {line.split("  ")[0].strip(): line for line in printed.splitlines()}
    assert {"rollout s", "scoring s", "update s", "total s", "tokens/s", "peak RSS MB"} <= rows.keys()
    assert "ours/TRL" in printed and f"written to {out}" in printed


def test_the_ratio_table_prints_what_both_sides_have():
    ours = {"rollout_s": 1.0, "scoring_s": 0.5, "update_s": 2.0, "total_s": 3.5, "mi_s": 0.4, "tokens_per_s": 10.0,
            "peak_rss_mb": 100.0}
    trl = {"rollout_s": 2.0, "scoring_s": 0.25, "update_s": 4.0, "total_s": 6.25, "tokens_per_s": 5.0,
           "peak_rss_mb": 200.0}
    ratio = vs_trl.ratios(ours, trl)
    assert ratio == pytest.approx({"rollout_s": 0.5, "scoring_s": 2.0, "update_s": 0.5, "total_s": 0.56,
                                   "tokens_per_s": 2.0, "peak_rss_mb": 0.5})
    text = vs_trl.table({"ours": ours, "trl": trl, "ratio_ours_over_trl": ratio})
    mi = next(line for line in text.splitlines() if "MI" in line)
    assert mi.split()[-2:] == ["0.40", "-"]  # ours' alone: no ratio
    assert next(line for line in text.splitlines() if line.startswith("scoring s")).endswith("2.00x")
