"""The fuzzer (benchmarks/audits/env_fuzz.py) over every registered env and its scoring variants, on a small
budget: hostile text and steps past the end keep the env contract. RAGEN_FUZZ_EXAMPLES=500 runs it
longer (or `python benchmarks/audits/env_fuzz.py --examples 500`)."""

import os
import time
import sys
from pathlib import Path

import pytest

from conftest import env_params
from ragen_envs.registry import ENVIRONMENTS, ids_in

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))
import env_fuzz  # noqa: E402
import viewer_fuzz  # noqa: E402

EXAMPLES = int(os.environ.get("RAGEN_FUZZ_EXAMPLES", "12"))


@pytest.mark.parametrize("env_id", env_params(list(ENVIRONMENTS)))
def test_hostile_episodes_keep_the_env_contract(env_id):
    for target, kwargs in env_fuzz.targets([env_id]):
        assert env_fuzz.fuzz(target, kwargs, examples=EXAMPLES) is None, kwargs


def _broken(kind):
    def apply(self, answer):
        if len(answer) > 300:  # hostile text
            if kind == "raises":
                raise ValueError("too long")
            if kind == "hangs":
                time.sleep(0.7)  # past the 0.5 s bound, before the alarm at twice it
            if kind == "overpays":
                return 5.0, False, True
        return 0.0, False, True
    return apply


@pytest.mark.parametrize("kind, says", [("raises", "raised ValueError"), ("hangs", "took"),
                                        ("overpays", "outside (0.0, 1.0)")])
def test_the_fuzzer_catches_a_step_that_raises_hangs_or_overpays(monkeypatch, kind, says):
    from ragen_envs.countdown import env as countdown

    monkeypatch.setattr(countdown.CountdownEnv, "_apply", _broken(kind))
    problem = env_fuzz.fuzz_one(ids_in("countdown")[0], {}, examples=50, bounds=env_fuzz.Bounds(step_seconds=0.5))
    assert problem is not None and says in problem


def test_hostile_rollouts_files_are_refused_or_shown_safely_by_the_viewer():
    assert viewer_fuzz.fuzz_viewer(examples=EXAMPLES) is None


def test_the_viewer_fuzzer_catches_a_crash_a_script_and_a_side_effect(monkeypatch, tmp_path):
    from ragen_envs.cli import report

    path, out = tmp_path / "r.jsonl", tmp_path / "r.html"
    path.write_text("{}\n")
    assert viewer_fuzz.check_view(path, out, []) is None  # refused with the clear error, naming the file
    effects = ["socket.connect"]
    assert "side effects" in viewer_fuzz.check_view(path, out, effects) and effects == []
    monkeypatch.setattr(report, "load", lambda p: 1 / 0)
    assert "raised ZeroDivisionError" in viewer_fuzz.check_view(path, out, [])
    monkeypatch.setattr(report, "load", lambda p: [])
    monkeypatch.setattr(report, "render", lambda *a, **k: "<p><SCRIPT>alert(1)</script>")
    assert "raw <script" in viewer_fuzz.check_view(path, out, [])
