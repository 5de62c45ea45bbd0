"""benchmarks/speed/eval_memory.py on a tiny random model: each bound plays the same episodes in a process of
its own; with no cache kept every reply's cache is counted as not kept and the prompts run in full (never a
timing's or a peak's value)."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import SMOKE

ROOT = Path(__file__).resolve().parents[2]


def test_each_bound_plays_the_same_episodes_and_says_what_it_kept(model_dir, tmp_path):
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "eval_memory.py"), "--env", SMOKE,
                           "--model", model_dir, "--groups", "2", "--group-size", "2", "--max-turns", "2",
                           "--max-new-tokens", "6", "--bounds", "none,0", "--forward-batch", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert result["settings"]["forward_batch"] == 3  # 4 rows a turn: a forward pass of 3, then 1
    assert runs["none"]["caches_not_kept"] == 0 and runs["none"]["kept_mb_max"] > 0
    assert runs["0"]["caches_not_kept"] > 0 and runs["0"]["kept_mb_max"] == 0
    assert runs["0"]["prefilled_tokens"] > runs["none"]["prefilled_tokens"]
    assert runs["0"]["tokens"] == runs["none"]["tokens"] and runs["0"]["success"] == runs["none"]["success"]
    assert "x peak" in done.stdout and all(r["peak_mb"] > 0 for r in runs.values())
