"""The findings scripts' shared pieces: resumable cells, run summaries, rank correlation."""

import csv
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS / "studies"), str(BENCHMARKS / "audits")]

import collapse_diagnostics  # noqa: E402
import findings  # noqa: E402
from conftest import SMOKE, SMOKE_KWARGS  # noqa: E402


def test_an_interval_of_one_seed_says_so_instead_of_nan():
    assert findings.interval_text(0.1, float("nan"), float("nan"), 1) == "+0.100 (1 seed: no interval)"
    assert findings.interval_text(*findings.t_interval([0.1, 0.2, 0.3]), 3) == "+0.200 [-0.048, +0.448] over 3 seeds"


def test_spearman_is_a_rank_correlation_with_ties():
    assert findings.spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert findings.spearman([1, 2, 3, 4], [9, 4, 1, 0]) == pytest.approx(-1.0)
    assert findings.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486833, abs=1e-6)
    assert math.isnan(findings.spearman([1, 1, 1], [1, 2, 3]))  # a constant has no order
    assert math.isnan(findings.spearman([1, 2], [1, 2]))  # too few runs
    assert findings.spearman([1, 2, float("nan"), 3], [1, 2, 5, 3]) == pytest.approx(1.0)


def test_the_success_spread_is_set_beside_the_sampling_noise():
    rows = [{"val_success": v, "val_episodes": n} for v, n in ((0.3, 100), (0.5, 400))]
    spread = collapse_diagnostics.spread(rows)
    assert spread["across_runs_sd"] == pytest.approx(np.std([0.3, 0.5], ddof=1))
    assert spread["sampling_sd"] == pytest.approx(np.sqrt((0.21 / 100 + 0.25 / 400) / 2))  # each run's own
    assert spread["episodes"] == [100, 400]
    assert math.isnan(collapse_diagnostics.spread(rows[:1])["across_runs_sd"])


def test_the_evaluation_keeps_each_episodes_outcome_by_env_seed(scripted):
    """``val_wins`` lets runs evaluated on the same maps be compared map by map."""
    s = replace(findings.QUICK, val_episodes=12, max_turns=3)
    moves = scripted(["<think>x</think><answer>Up || Right</answer>", "<think>x</think><answer>Right || Down</answer>"])
    result = findings.evaluate(moves, SMOKE, SMOKE_KWARGS, s, seed=2)
    assert result["val_seed"] == findings.HELD_OUT_SEED + 2 and result["val_episodes"] == 12
    assert len(result["val_wins"]) == 12 and set(result["val_wins"]) <= {"0", "1"}
    assert result["val_wins"].count("1") / 12 == pytest.approx(result["val_success"])
    assert 0 < result["val_success"] < 1  # a fixed move wins some of these maps, not all


def test_a_finished_cell_is_read_back_not_trained_again(tmp_path, monkeypatch):
    import trainers

    (tmp_path / "cell").mkdir()
    (tmp_path / "cell" / "result.json").write_text(json.dumps({"cell": "cell", "val_success": 0.25,
                                                              "val_episodes": findings.QUICK.val_episodes}))
    monkeypatch.setattr(trainers, "Trainer", lambda *a, **k: pytest.fail("a finished cell was trained again"))
    result = findings.run_cell(tmp_path, "cell", SMOKE, "m", None, findings.QUICK, None, 0)
    assert result["val_success"] == 0.25


def test_a_finished_cell_asked_for_more_held_out_episodes_is_evaluated_again_from_its_checkpoint(
        tmp_path, monkeypatch):
    """Only the evaluation is redone, on the final checkpoint's weights; without that checkpoint the cell
    trains again. The earlier result stays beside the new one."""
    import argparse

    import trainers
    from ragen_envs.agent import backends

    more = replace(findings.QUICK, val_episodes=64)
    config = findings.trainer_config(findings.QUICK, 0, {})
    evaluated, trained = [], []
    monkeypatch.setattr(backends, "make_policy", lambda backend, model, **kw: f"policy of {Path(model).name}")
    monkeypatch.setattr(findings, "evaluate", lambda policy, env, kw, s, seed, chat=None: evaluated.append(policy) or {
        "val_success": 0.5, "val_episodes": s.val_episodes})
    monkeypatch.setattr(trainers, "Trainer", lambda *a, **k: trained.append(a) or pytest.fail("trained again"))
    args = argparse.Namespace(backend="transformers", device=None)
    for name in ("kept", "gone"):
        (tmp_path / name / "run").mkdir(parents=True)
        (tmp_path / name / "result.json").write_text(json.dumps({"cell": name, "retrieval_acc": 0.7,
                                                                 "val_success": 0.25, "val_episodes": 8}))
    final = tmp_path / "kept" / "run" / f"checkpoint-{config.num_iterations}"
    final.mkdir()
    result = findings.run_cell(tmp_path, "kept", SMOKE, "m", config, more, args, 0)
    assert evaluated == [f"policy of {final.name}"] and not trained
    assert result == {"cell": "kept", "retrieval_acc": 0.7, "val_success": 0.5, "val_episodes": 64}
    assert json.loads((tmp_path / "kept" / "result.json").read_text()) == result
    assert json.loads((tmp_path / "kept" / "result-8-episodes.json").read_text())["val_success"] == 0.25
    assert findings.run_cell(tmp_path, "kept", SMOKE, "m", config, more, args, 0) == result  # now read back
    finished_only = argparse.Namespace(**vars(args), finished_only=True)  # no final checkpoint: as it was
    assert findings.run_cell(tmp_path, "gone", SMOKE, "m", config, more, finished_only, 0)["val_episodes"] == 8
    with pytest.raises(pytest.fail.Exception, match="trained again"):  # no final checkpoint: trains
        findings.run_cell(tmp_path, "gone", SMOKE, "m", config, more, args, 0)
    assert (tmp_path / "gone" / "result-8-episodes.json").is_file()


def test_a_cell_another_study_trained_alike_is_copied_not_trained(tmp_path, monkeypatch):
    """``--reuse``: a finished cell of the same model, training config (where it wrote aside, and the KL
    estimator with KL off), seed and held-out episodes is copied with its origin; any other difference trains."""
    import argparse

    import trainers

    monkeypatch.setattr(trainers, "Trainer", lambda *a, **k: pytest.fail("trained"))
    other = tmp_path / "kl-sweep" / "sokoban"
    (other / "kl0-seed0").mkdir(parents=True)
    (other.parent / "config.json").write_text(json.dumps({"model": "m"}))
    config = replace(findings.trainer_config(findings.QUICK, 0, {}), beta=0.0, kl_loss_type="kl")
    stored = {"cell": "kl0-seed0", "seed": 0, "val_success": 0.25, "val_episodes": findings.QUICK.val_episodes,
              "config": replace(config, output_dir="elsewhere", save_steps=99).to_dict()}
    (other / "kl0-seed0" / "result.json").write_text(json.dumps(stored))
    args = argparse.Namespace(backend="transformers", device=None, model="m", reuse=[str(other)])
    here = tmp_path / "entropy-sweep" / "sokoban"
    alike = replace(config, kl_loss_type="low_var_kl")  # unused with beta 0
    result = findings.run_cell(here, "entropy0-seed0", SMOKE, "m", alike, findings.QUICK, args, 0)
    assert result == {**stored, "cell": "entropy0-seed0", "copied_from": "kl-sweep/sokoban/kl0-seed0"}
    assert json.loads((here / "entropy0-seed0" / "result.json").read_text()) == result
    assert findings.metrics_file(here, "entropy0-seed0") == other / "kl0-seed0" / "run" / "metrics.jsonl"
    assert findings.metrics_file(here, "never-run") == here / "never-run" / "run" / "metrics.jsonl"
    for name, cell_config, seed in (("kl", replace(config, beta=0.1), 0), ("seed", config, 1),
                                    ("entropy", replace(config, entropy_coef=0.01), 0)):
        with pytest.raises(pytest.fail.Exception, match="trained"):
            findings.run_cell(here, name, SMOKE, "m", cell_config, findings.QUICK, args, seed)
    with pytest.raises(ValueError, match="trained 'm', this study trains 'other'"):
        findings.run_cell(here, "model", SMOKE, "other", config, findings.QUICK,
                          argparse.Namespace(**{**vars(args), "model": "other"}), 0)


def test_a_stopped_cell_goes_on_from_its_checkpoint_and_keeps_its_earlier_iterations(tmp_path, monkeypatch):
    import argparse

    import trainers

    configs = []

    class Stub:  # writes the iterations the config asks for, as a resumed trainer appends them
        def __init__(self, model, env, config, **kwargs):
            configs.append(config)
            self.policy, self.run = None, Path(config.output_dir)

        def train(self):
            self.run.mkdir(parents=True, exist_ok=True)
            with open(self.run / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"iteration": len(configs), "mi/retrieval_acc": 0.5 * len(configs)}) + "\n")

    monkeypatch.setattr(trainers, "Trainer", Stub)
    monkeypatch.setattr(findings, "evaluate", lambda *a, **k: {"val_success": 0.5})
    args = argparse.Namespace(backend="transformers", device=None)
    config = findings.trainer_config(findings.QUICK, 0, {})
    assert config.save_steps == findings.CELL_SAVE_STEPS and config.save_total_limit == 1

    first = findings.run_cell(tmp_path, "cell", SMOKE, "m", config, findings.QUICK, args, 0)
    assert configs[0].overwrite_output_dir and not configs[0].resume_from_checkpoint and not first["resumed"]
    (tmp_path / "cell" / "result.json").unlink()  # as if stopped after its first checkpoint
    (tmp_path / "cell" / "run" / "checkpoint-1").mkdir()
    second = findings.run_cell(tmp_path, "cell", SMOKE, "m", config, findings.QUICK, args, 0)
    assert configs[1].resume_from_checkpoint == "latest" and not configs[1].overwrite_output_dir
    assert second["resumed"] and second["retrieval_acc"] == pytest.approx(1.0)  # the later half of both


def test_finished_only_summarises_the_finished_cells_and_trains_none(tmp_path, monkeypatch):
    import argparse

    import trainers

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "result.json").write_text(json.dumps({"cell": "a", "val_success": 0.5}))  # episodes unknown
    monkeypatch.setattr(trainers, "Trainer", lambda *a, **k: pytest.fail("--finished-only trained a cell"))
    args = argparse.Namespace(finished_only=True, model="m", learning_rate=None, freeze_layers=None)
    cells = [(name, {"label": name}, findings.QUICK, 0, {}) for name in ("a", "b")]
    assert findings.run_cells(args, tmp_path, "m", cells) == [{"label": "a", "cell": "a", "val_success": 0.5}]


def test_workers_read_the_cells_in_their_own_processes_and_keep_the_order(tmp_path, monkeypatch):
    import argparse

    monkeypatch.setattr(findings, "with_starts", lambda *a: a[4])  # no model here

    for name, value in (("a", 0.5), ("b", 0.25), ("c", 0.75)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps({"cell": name, "val_success": value,
                                                                 "val_episodes": findings.QUICK.val_episodes}))
    cells = [(name, {"label": name}, findings.QUICK, 0, {}) for name in ("a", "b", "c")]
    args = argparse.Namespace(model="m", learning_rate=None, freeze_layers=None, workers=2)
    rows = findings.run_cells(args, tmp_path, "m", cells)
    assert [(r["label"], r["val_success"]) for r in rows] == [("a", 0.5), ("b", 0.25), ("c", 0.75)]
    with pytest.raises(ValueError, match="--workers"):
        findings.run_cells(argparse.Namespace(**{**vars(args), "workers": 0}), tmp_path, "m", cells)


def test_t_interval_widens_with_few_runs_and_needs_two():
    mean, low, high = findings.t_interval([0.1, 0.3])
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(12.71 * 0.1)  # t(1 df) x sd / sqrt(2)
    mean, low, high = findings.t_interval([0.1, 0.3] * 20)
    assert high - mean == pytest.approx((1.96 + 2.4 / 39) * np.std([0.1, 0.3] * 20, ddof=1) / np.sqrt(40))
    assert findings.t_interval([0.5, float("nan")])[0] == 0.5 and math.isnan(findings.t_interval([0.5])[1])


def test_the_slip_sweeps_gain_is_paired_by_seed_and_contrasts_low_with_high_slip():
    import frozenlake_slip_sweep as sweep

    rows = [{"slip": slip, "filter": name, "seed": seed,
             "val_success": 0.3 + seed / 10 + (0.1 if name == "top_p" and slip < 0.8 else 0.0) + slip * seed / 100}
            for seed in range(3) for slip in sweep.SLIPS for name in sweep.FILTERS]
    gains = {g["slip"]: g for g in sweep.gains(rows)}
    assert gains[0.0]["gain"] == pytest.approx(0.1) and gains[0.0]["seeds"] == 3
    assert gains[0.0]["high"] - gains[0.0]["low"] == pytest.approx(0, abs=1e-9)  # seeds differ, gains do not
    assert gains[1.0]["gain"] == pytest.approx(0.0)
    assert gains["low - high"]["gain"] == pytest.approx(0.1)
    del rows[0]  # seed 0 lost its no-filter run at slip 0: that slip, and the contrast, have two seeds
    gains = {g["slip"]: g for g in sweep.gains(rows)}
    assert gains[0.0]["seeds"] == 2 and gains["low - high"]["seeds"] == 2 and gains[0.2]["seeds"] == 3


def test_the_slip_sweeps_curves_come_from_the_run_folders_and_stay_put_without_them(tmp_path):
    import frozenlake_slip_sweep as sweep

    rows = []
    for slip in sweep.SLIPS:
        for name in sweep.FILTERS:
            cell = f"slip{slip}-{name}-seed0"
            (tmp_path / cell / "run").mkdir(parents=True)
            records = [{"iteration": i, "mi/retrieval_acc": 0.8 - slip * i / 10, "rollout/success": 0.5,
                        "loss/kl": 0.01 * i} for i in range(1, 8)]
            records.append({"iteration": 8, "val/success": 0.3})  # a validation-only record
            (tmp_path / cell / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            rows.append({"slip": slip, "filter": name, "seed": 0, "cell": cell})
    sweep.curves(tmp_path, rows)
    lines = (tmp_path / "curves.csv").read_text().splitlines()
    assert len(lines) == 1 + 10 * 7 and lines[0].startswith("slip,filter,seed,iteration,mi/retrieval_acc")
    table = list(csv.DictReader(lines))  # the figures READMEs quote, beside those plotted
    assert float(table[2]["loss/kl"]) == 0.03 and table[2]["mi/mi_est"] == "nan"
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    # each line is named by the settings that differ between lines, not by what all share
    runs = [({"task": "frozenlake", "slip": r["slip"], "seed": 0}, tmp_path / r["cell"] / "run" / "metrics.jsonl")
            for r in rows if r["filter"] == "none"]
    assert findings.curves(tmp_path, runs, "t") == [f"slip {slip}" for slip in sweep.SLIPS]
    assert findings.curves(tmp_path, runs[:1], "t") == ["task frozenlake slip 0.0"]  # one line: all it has
    sweep_rows = [{"kl": v, "kl_loss_type": "low_var_kl", "seed": seed} for v in (0, 0.1) for seed in (0, 1)]
    assert findings.telling(sweep_rows, ["kl", "kl_loss_type"]) == ["kl"]  # the sweep plot's tick names too
    (tmp_path / rows[0]["cell"] / "run" / "metrics.jsonl").unlink()
    (tmp_path / "curves.csv").write_text("kept")
    assert findings.curves(tmp_path, runs, "t") == []
    sweep.curves(tmp_path, rows)
    assert (tmp_path / "curves.csv").read_text() == "kept"


def history(retrieval, entropy, chance=0.125, every=2):
    """Metrics rows as the trainer logs them: MI every ``every`` iterations, none between."""
    rows = []
    for i, (acc, h) in enumerate(zip(retrieval, entropy), start=1):
        row = {"iteration": i, "policy/token_entropy": h}
        if (i - 1) % every == 0:
            row.update({"mi/retrieval_acc": acc, "mi/retrieval_chance": chance, "mi/conditional_entropy": h})
        rows.append(row)
    return rows


def test_template_collapse_is_the_window_at_chance_while_entropy_holds():
    falling = [0.9] * 20 + [0.15] * 20  # to chance (0.125) at iteration 21
    assert findings.collapse_iteration(history(falling, [0.5] * 40)) == 29  # the first window mostly past 21
    # the same fall with the entropy falling too (0.5 -> 0.3, under 0.8x): a narrowing, not the template kind
    assert findings.collapse_iteration(history(falling, [0.5] * 20 + [0.3] * 20)) is None
    # ... which the input-dependence reading (design A's second) counts, entropy aside
    assert findings.collapse_iteration(history(falling, [0.5] * 20 + [0.3] * 20), held=()) == 29
    assert findings.collapse_iteration(history([0.9] * 40, [0.5] * 20 + [0.3] * 20), held=()) is None
    assert findings.collapse_iteration(history(falling, [0.5] * 20 + [0.7] * 20)) == 29  # a rising entropy holds
    assert findings.collapse_iteration(history([0.9] * 40, [0.5] * 40)) is None  # censored at its end
    assert findings.collapse_iteration(history([0.2] * 40, [0.5] * 40)) is None  # at chance from the start
    assert findings.collapse_iteration([{"iteration": 1, "policy/token_entropy": 0.5}]) is None  # no MI rows
    summary = findings.run_summary(history(falling, [0.5] * 40))
    assert (summary["collapse_iteration"], summary["input_loss_iteration"], summary["last_iteration"]) == (29, 29, 40)


def test_the_paired_bootstrap_resamples_seeds_and_boards_of_both_arms_alike():
    better = {0: "1101101101", 1: "1111011011", 2: "1011111101"}
    worse = {0: "0100100100", 1: "0101001001", 2: "0010100100", 3: "1111111111"}  # seed 3: one arm only
    mean, low, high = findings.paired_bootstrap(better, worse)
    assert mean == pytest.approx(np.mean([0.7 - 0.3, 0.8 - 0.4, 0.8 - 0.3])) and 0 < low < mean < high
    same = findings.paired_bootstrap(better, better)
    assert same == (0.0, 0.0, 0.0)  # the same boards: no difference on any draw
    assert np.isnan(findings.paired_bootstrap(better, {9: "1"})[0])


def test_bootstrap_intervals_hold_the_statistic_and_need_enough_runs():
    success = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]  # loosely rising with x
    rows = [{"x": float(i), "val_success": float(y)} for i, y in enumerate(success)]
    rho = collapse_diagnostics.correlation("x")(rows)
    low, high = collapse_diagnostics.bootstrap(collapse_diagnostics.correlation("x"), rows)
    assert 0 < rho < 1 and low <= rho <= high and high - low > 0.1
    assert np.isnan(collapse_diagnostics.bootstrap(collapse_diagnostics.correlation("x"), rows[:2])[0])


def test_with_each_episodes_outcome_the_bootstrap_also_resamples_the_shared_maps():
    a, b = {"val_seed": 10, "val_wins": "0110"}, {"val_seed": 11, "val_wins": "11001"}
    np.testing.assert_array_equal(collapse_diagnostics.shared_maps([a, b]), [[1, 1, 0], [1, 1, 0]])  # seeds 11-13
    assert collapse_diagnostics.shared_maps([a, {"val_success": 0.5}]) is None
    # success rising with x, but by less than 20 maps can tell apart: certain over runs alone, not over maps
    rng = np.random.default_rng(0)
    rows = [{"x": float(i), "val_seed": 0, "val_wins": "".join("1" if w else "0" for w in rng.random(20) < 0.4)}
            for i in range(10)]
    for r in rows:
        r["val_success"] = r["val_wins"].count("1") / 20
    for i, r in enumerate(sorted(rows, key=lambda r: r["val_success"])):
        r["x"] = float(i)
    rho = collapse_diagnostics.correlation("x")
    runs_only = [{k: v for k, v in r.items() if k != "val_wins"} for r in rows]
    assert collapse_diagnostics.bootstrap(rho, runs_only)[0] > 0.7  # 0.82
    low, high = collapse_diagnostics.bootstrap(rho, rows)
    assert low < 0.3 and high > 0.9  # -0.27, 0.98


def test_a_runs_lift_over_its_start_is_resampled_map_by_map():
    rng = np.random.default_rng(2)
    start = rng.random(200) < 0.4  # the untrained model's outcomes on the 200 shared maps
    rows = []
    for _ in range(10):  # each run wins a few maps more than its start, loses none
        wins = start | (rng.random(200) < 0.06)
        rows.append({"val_seed": 0, "val_wins": "".join("1" if w else "0" for w in wins),
                     "val_start_wins": "".join("1" if w else "0" for w in start),
                     "val_success": wins.mean(), "val_start_success": start.mean()})
    lift = collapse_diagnostics.mean_lift(rows)
    low, high = collapse_diagnostics.bootstrap(collapse_diagnostics.mean_lift, rows)
    assert 0.02 < low <= lift <= high < 0.06  # both on the same maps: the maps' own luck cancels
    for i, r in enumerate(rows):
        r["filter"] = "none" if i < 7 else "top_p"
    groups = collapse_diagnostics.by(rows, "filter")
    assert [(k, g["runs"]) for k, g in groups.items()] == [("none", 7), ("top_p", 3)]
    assert groups["none"]["lift"] == pytest.approx(collapse_diagnostics.mean_lift(rows[:7]))
    assert math.isnan(groups["top_p"]["lift_low"])  # 3 runs are too few for an interval
    shifted = [{**r, "val_start_wins": r["val_start_wins"][1:]} for r in rows]
    with pytest.raises(ValueError, match="different maps"):
        collapse_diagnostics.bootstrap(collapse_diagnostics.mean_lift, shifted)


def test_mi_over_entropy_is_the_paired_difference_of_their_correlations():
    rng = np.random.default_rng(1)
    success = rng.random(27)
    # mi follows success; entropy falls with it in one case, is unrelated in the other
    rows = [{"val_success": s, "mi": s + 0.05 * n, "tracks": -s - 0.05 * n, "unrelated": n}
            for s, n in zip(success, rng.random(27))]
    both = collapse_diagnostics.advantage("mi", "tracks")
    assert both(rows) == pytest.approx(0.0)
    low, high = collapse_diagnostics.bootstrap(both, rows)
    assert low <= 0 <= high
    better = collapse_diagnostics.advantage("mi", "unrelated")
    assert better(rows) == pytest.approx(collapse_diagnostics.correlation("mi")(rows)
                                         + collapse_diagnostics.correlation("unrelated")(rows))
    assert collapse_diagnostics.bootstrap(better, rows)[0] > 0.3


def test_a_run_summary_averages_the_later_iterations():
    history = [{"mi/retrieval_acc": 0.2, "filter/kept_ratio": 1.0, "time/update_s": 2.0},
               {"mi/retrieval_acc": 0.6, "filter/kept_ratio": 0.5, "time/update_s": 4.0},
               {"mi/retrieval_acc": 0.8, "filter/kept_ratio": 0.0}]
    summary = findings.run_summary(history)
    assert summary["retrieval_acc"] == pytest.approx(0.7)  # the last half: iterations 2 and 3
    assert summary["kept_ratio"] == pytest.approx(0.5)  # all iterations
    assert summary["update_s"] == pytest.approx(3.0)
    assert math.isnan(summary["mi_est"])  # never logged


@pytest.mark.parametrize("script", ["frozenlake_slip_sweep", "filtering_cost", "collapse_diagnostics"])
def test_a_findings_script_resumes_from_its_cells_and_writes_csv_json_and_png(script, tmp_path, monkeypatch):
    """Every cell already finished: the script reads them back (nothing trains) and writes its outputs."""
    import importlib

    import trainers

    module = importlib.import_module(script)
    monkeypatch.setattr(trainers, "Trainer", lambda *a, **k: pytest.fail("a finished cell was trained again"))
    names = []
    monkeypatch.setattr(findings, "trainer_config", lambda *a, **k: None)
    original = findings.run_cell

    def finished(out, name, *args):
        names.append(name)
        (out / name).mkdir(parents=True, exist_ok=True)
        k = len(names)  # distinct, ordered figures per cell
        keys = ("val_success", "val_random_success", "train_success", "retrieval_acc", "retrieval_chance", "mi_est",
                "mi_est_code", "mi_zscore_ema", "conditional_entropy", "token_entropy", "reply_length", "kept_ratio",
                "wall_s")
        result = {key: 0.1 * k for key in keys}
        result.update({f"{phase}_s": 1.0 + k for phase in ("iteration", "rollout", "mi", "stats", "filter", "update")})
        scale = args[3]
        (out / name / "result.json").write_text(json.dumps({"cell": name, "seed": 0, **result,
                                                            "val_episodes": scale.val_episodes}))
        return original(out, name, *args)

    monkeypatch.setattr(findings, "run_cell", finished)
    monkeypatch.setattr(findings, "with_starts", lambda args, out, model, cells, results, *rest: results)
    monkeypatch.setattr(sys, "argv", [script, "--quick", "--model", "m", "--out", str(tmp_path)])
    module.main()
    assert names and len(names) == len(set(names))
    assert (tmp_path / "results.csv").read_text().count("\n") == len(names) + 1
    assert len(json.loads((tmp_path / "results.json").read_text())) == len(names)
    assert list(tmp_path.glob("*.png")) and json.loads((tmp_path / "config.json").read_text())["quick"]


def test_a_summary_of_finished_cells_keeps_the_sweeps_own_config(tmp_path):
    sweep = findings.parser("").parse_args(["--out", str(tmp_path), "--seeds", "3"])
    findings.results_folder(sweep, "s")
    summary = findings.parser("").parse_args(["--out", str(tmp_path), "--finished-only"])
    findings.results_folder(summary, "s")
    assert json.loads((tmp_path / "config.json").read_text())["seeds"] == 3
    (tmp_path / "config.json").unlink()
    findings.results_folder(summary, "s")  # none to keep: the summary's own
    assert json.loads((tmp_path / "config.json").read_text())["finished_only"]


def test_each_run_is_measured_against_its_untrained_start_on_the_same_episodes(tmp_path, monkeypatch):
    from ragen_envs.agent.backends import PolicyConfig

    built, played = [], []
    monkeypatch.setattr(PolicyConfig, "make", lambda self: built.append(self.model) or "policy")

    def evaluate(policy, env, env_kwargs, s, seed, chat=None):
        played.append((policy, env_kwargs.get("slip"), s.val_episodes, seed))
        return {"val_success": 0.25 + seed / 10, "val_seed": 100 + seed, "val_wins": "0001"[:s.val_episodes]}

    monkeypatch.setattr(findings, "evaluate", evaluate)
    args = findings.parser("").parse_args(["--model", "m"])
    s = replace(findings.QUICK, val_episodes=4)
    cells = [(f"{slip}-{seed}", {}, s, seed, {"env_kwargs": {"slip": slip}} if slip else {})
             for slip in (0, 0.5) for seed in (0, 1)] + [("stale", {}, s, 0, {})]
    results = [{"val_success": 0.5, "val_episodes": 4}] * 4 + [{"val_success": 0.5, "val_episodes": 8}]
    rows = findings.with_starts(args, tmp_path, "m", cells, results)
    assert built == ["m"]  # one model for every start
    assert played == [("policy", None, 4, 0), ("policy", None, 4, 1), ("policy", 0.5, 4, 0), ("policy", 0.5, 4, 1)]
    assert [r["val_lift"] for r in rows[:4]] == pytest.approx([0.25, 0.15, 0.25, 0.15])
    assert rows[0]["val_start_wins"] == "0001" and rows[1]["val_start_success"] == pytest.approx(0.35)
    assert "val_lift" not in rows[4]  # played on other episodes than its start: no lift
    assert sorted(p.name for p in tmp_path.iterdir()) == ["start-seed0", "start-seed1", "start-slip0.5-seed0",
                                                          "start-slip0.5-seed1"]
    findings.with_starts(args, tmp_path, "m", cells, results)
    assert len(played) == 4  # kept
    smaller = [(n, {}, replace(s, val_episodes=2), seed, f) for n, _, _, seed, f in cells[:1]]
    findings.with_starts(args, tmp_path, "m", smaller, [{"val_success": 0.5, "val_episodes": 2}])
    assert played[-1] == ("policy", None, 2, 0)  # other episodes: played again


def test_a_study_of_several_models_trains_and_starts_each_cell_on_its_own(tmp_path, monkeypatch):
    """Cells whose labels name their model train that model and are measured against its own untrained start
    (kept apart by model); a cell without one keeps the study's model and the usual start folder."""
    from ragen_envs.agent.backends import PolicyConfig

    trained, built = [], []

    def run_cell(out, name, env, model, config, s, args, seed, own=False):
        trained.append((name, model, own))
        return {"cell": name, "val_success": 0.5, "val_episodes": s.val_episodes}

    monkeypatch.setattr(findings, "run_cell", run_cell)
    monkeypatch.setattr(PolicyConfig, "make", lambda self: built.append(self.model) or self.model)
    monkeypatch.setattr(findings, "evaluate", lambda policy, env, kwargs, s, seed, chat=None: {
        "val_success": {"org/a": 0.1, "b": 0.2, "m": 0.3}[policy], "val_wins": "0" * s.val_episodes})
    args = findings.parser("").parse_args(["--model", "m"])
    s = replace(findings.QUICK, val_episodes=2)
    cells = [("a-seed0", {"model": "org/a"}, s, 0, {}), ("b-seed0", {"model": "b"}, s, 0, {}),
             ("a-seed1", {"model": "org/a"}, s, 1, {}), ("mine-seed0", {}, s, 0, {})]
    rows = findings.run_cells(args, tmp_path, "m", cells, SMOKE, lambda s, seed, fields: findings.trainer_config(
        s, seed, {}, **fields))
    assert trained == [("a-seed0", "org/a", True), ("b-seed0", "b", True), ("a-seed1", "org/a", True),
                       ("mine-seed0", "m", False)]
    assert [r["val_start_success"] for r in rows] == [0.1, 0.2, 0.1, 0.3]  # each model's own start
    assert [r["model"] for r in rows[:3]] == ["org/a", "b", "org/a"] and "model" not in rows[3]
    assert built == ["org/a", "b", "org/a", "m"]  # one untrained model in memory at a time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["start-b-seed0", "start-org__a-seed0",
                                                          "start-org__a-seed1", "start-seed0"]
    assert json.loads((tmp_path / "start-org__a-seed0" / "result.json").read_text())["model"] == "org/a"
    findings.run_cells(args, tmp_path, "m", cells, SMOKE, lambda s, seed, fields: findings.trainer_config(
        s, seed, {}, **fields))
    assert len(built) == 4  # the starts are kept
    assert findings.model_slug("/abs/path/model") == "abs__path__model"


def test_reuse_copies_a_cell_of_a_study_of_several_models_only_for_the_model_it_trained(tmp_path):
    import argparse

    other = tmp_path / "diff-size" / "sokoban"
    for model in ("a", "b"):
        (other / f"{model}-seed0").mkdir(parents=True)
        (other / f"{model}-seed0" / "result.json").write_text(json.dumps({"model": model, "seed": 0}))
    (other.parent / "config.json").write_text(json.dumps({"model": None, "models": ["a", "b"]}))
    args = argparse.Namespace(model=None, models=["b", "c"], reuse=[str(other)])
    same = lambda cell, stored: True  # noqa: E731
    assert findings.reused(args, tmp_path / "here", "x", same, "b")["copied_from"] == "diff-size/sokoban/b-seed0"
    assert findings.reused(args, tmp_path / "here", "y", same, "c") is None  # no cell of c there
    one = tmp_path / "main-table" / "sokoban"  # a study of one model: its results do not name it
    (one / "PPO-seed0").mkdir(parents=True)
    (one / "PPO-seed0" / "result.json").write_text(json.dumps({"seed": 0}))
    (one.parent / "config.json").write_text(json.dumps({"model": "b"}))
    args.reuse = [str(one)]
    assert findings.reused(args, tmp_path / "here", "z", same, "b")["copied_from"] == "main-table/sokoban/PPO-seed0"
    assert findings.reused(args, tmp_path / "here", "w", same, "c") is None
    with pytest.raises(ValueError, match=r"trained 'b', this study trains \['c', 'd'\]"):
        findings.reused(argparse.Namespace(model=None, models=["c", "d"], reuse=[str(one)]), tmp_path, "v", same)


def test_the_reward_audit_finds_no_policy_earning_without_doing_the_task():
    import reward_audit

    from conftest import USABLE_IDS

    envs = USABLE_IDS
    rows = reward_audit.audit(envs, episodes=4)
    assert {r["env"] for r in rows} == set(envs)
    assert [r for r in rows if r["verdict"].startswith("BUG")] == []
    oracle = {r["env"]: r["success"] for r in rows if r["policy"] == "oracle"}
    assert sum(oracle.values()) / len(oracle) > 0.5  # the table can tell doing the task from not


def test_the_reward_audit_holds_a_study_setting_to_the_same_rule():
    import reward_audit

    # issue 66's design C: +1 on the solve only, on a mix of levels the audit's 5 turns can solve
    from ragen_envs.registry import env_for_task

    setting = {"reward": "success", "solution_lengths": [1, 3]}
    rows = reward_audit.audit([env_for_task("sokoban")], episodes=6, env_kwargs=setting)
    assert [r for r in rows if r["verdict"].startswith("BUG")] == []
    by = {r["policy"]: r for r in rows}
    assert by["oracle"]["reward"] == by["oracle"]["success"] == 1.0  # one reward, for the solve
    random_moves = by["random valid action"]
    assert random_moves["reward"] == random_moves["success"] < 1  # no step penalty: a failure earns 0


def test_the_learning_summary_pools_seeds_and_the_plot_is_written(tmp_path):
    import organism_learning

    def record(seed, successes):
        history = [{"iteration": i * 2, "val/success": s, "val/random_success": 0.2, "val/format_valid": 1.0,
                    "rollout/success": s, "rollout/random_success": 0.2, "mi/retrieval_acc": 0.5,
                    "mi/retrieval_chance": 0.125} for i, s in enumerate(successes)]
        return {"seed": seed, "history": history}

    records = [record(0, [0.2, 0.4]), record(1, [0.3, 0.6])]
    for r in records:  # at the rollouts' temperature: 0.1 lower
        for h in r["history"]:
            h["val/sampled_success"] = h["val/success"] - 0.1
    rows = organism_learning.summarise(records, episodes=100)
    assert [r["iteration"] for r in rows] == [0, 2]
    last = rows[-1]
    assert last["val_success"] == pytest.approx(0.5) and (last["min"], last["max"]) == (0.4, 0.6)
    # the Wilson interval of 200 pooled episodes at 0.5: about +-0.069
    assert last["low"] == pytest.approx(0.431, abs=1e-3) and last["high"] == pytest.approx(0.569, abs=1e-3)
    assert last["sampled_success"] == pytest.approx(0.4) and last["sampled_max"] == pytest.approx(0.5)
    assert last["sampled_low"] < 0.4 < last["sampled_high"] < last["high"]
    organism_learning.plot(tmp_path, records, rows, 100)
    assert (tmp_path / "learning.png").stat().st_size > 0


def test_without_a_model_the_findings_train_the_organism_at_ragens_scale():
    args = findings.parser("").parse_args([])
    s = findings.scale(args)
    assert (s.iterations, s.groups, s.group_size, s.max_turns, s.max_new_tokens) == (40, 8, 16, 5, 400)
    assert (s.val_episodes, s.seeds) == (findings.ORGANISM_EPISODES, findings.ORGANISM_SEEDS)
    quick = findings.scale(findings.parser("").parse_args(["--quick"]))
    assert (quick.iterations, quick.groups, quick.group_size, quick.val_episodes, quick.seeds) == (2, 2, 4, 8, 1)
    from trainers.config import ORGANISM_RL

    assert findings.training(args) == {"learning_rate": ORGANISM_RL["learning_rate"], "freeze_layers": 0}
    given = findings.parser("").parse_args(["--model", "m", "--learning-rate", "1e-4"])
    assert findings.scale(given) == findings.FULL
    assert findings.training(given) == {"learning_rate": 1e-4, "freeze_layers": 20}


def test_an_organism_study_validates_only_where_it_asks(tmp_path):
    args = findings.organism_parser("").parse_args(["--learning-rate", "2e-3"])
    plain = findings.organism_config(args, SMOKE, tmp_path)
    assert plain.eval_steps == 0 and plain.learning_rate == 2e-3  # the preset validates every 10: a study's cost
    assert findings.organism_config(args, SMOKE, tmp_path, eval_steps=5).eval_steps == 5


def test_where_the_trainer_validated_the_same_episodes_play_again_at_the_rollouts_temperature():
    from types import SimpleNamespace

    import organism_learning
    from ragen_envs.agent import RolloutConfig

    asked = []

    def validate(temperature=None):
        asked.append(temperature)
        return {"val/success": temperature / 4, "val/format_valid": 1.0}

    run = RolloutConfig()
    trainer = SimpleNamespace(config=SimpleNamespace(rollout=run), validate=validate)
    callback = organism_learning.AtRolloutTemperature()
    metrics = {"iteration": 3}
    callback.on_iteration_end(trainer, 3, metrics)
    assert metrics == {"iteration": 3} and asked == []  # the trainer did not validate here
    metrics = {"iteration": 4, "val/success": 0.1}
    callback.on_iteration_end(trainer, 4, metrics)
    assert asked == [run.sampling.temperature, 0.0] and run.sampling.temperature != 0.5
    assert metrics["val/success"] == 0.1 and metrics["val/sampled_success"] == run.sampling.temperature / 4
    assert metrics["val/greedy_success"] == 0.0  # greedy: temperature 0


def test_the_lift_is_each_seeds_last_evaluation_minus_its_start_with_a_t_interval():
    import organism_learning

    records = [{"history": [{"val/greedy_success": a}, {"iteration": 1}, {"val/greedy_success": b}]}
               for a, b in ((0.2, 0.3), (0.1, 0.3), (0.2, 0.35))]
    lift = organism_learning.lifts(records)["greedy_success"]
    assert lift["per_seed"] == pytest.approx([0.1, 0.2, 0.15]) and lift["lift"] == pytest.approx(0.15)
    assert lift["low"] == pytest.approx(0.15 - 4.30 * 0.05 / np.sqrt(3))  # t(2 df) x sd / sqrt(3)
    assert "val_success" not in organism_learning.lifts(records)  # not evaluated at T = 0.5 here


def test_the_collapse_script_writes_both_runs_curves_and_plot(tmp_path, monkeypatch):
    import template_collapse

    def fake_run(out, model, env, name, args):
        history = [{"iteration": i, "mi/retrieval_acc": 0.9 - 0.1 * i * (name == "none"), "mi/mi_est": 0.1,
                    "mi/conditional_entropy": 0.3, "policy/token_entropy": 0.5, "rollout/success": 0.3,
                    "mi/retrieval_chance": 0.125, "rollout/random_success": 0.2} for i in range(1, 7)]
        return {"filter": name, "history": history}

    monkeypatch.setattr(template_collapse, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["template_collapse", "--model", "m", "--out", str(tmp_path)])
    template_collapse.main()
    rows = (tmp_path / "curves.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 6 and rows[1].startswith("none,1,0.8")
    assert (tmp_path / "collapse.png").stat().st_size > 0


def test_the_visual_rollout_benchmark_prints_both_runs_and_their_ratio():
    out = subprocess.run([sys.executable, "benchmarks/speed/visual_rollout.py", "--groups", "1", "--group-size", "1",
                          "--max-turns", "2", "--max-new-tokens", "2", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    from ragen_envs.registry import ENVIRONMENTS

    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert not ENVIRONMENTS[rows["text"][1]].visual and rows["text"][2] == "0"
    assert ENVIRONMENTS[rows["visual"][1]].visual and rows["visual"][2] == "2"  # one image a turn
    assert float(rows["visual/text"][1]) > 0


def test_the_env_servers_protocols_hold_under_the_fuzzer():
    # on loopback, small: the session cap across protocols and after reaping, a slow request cut, a huge
    # body refused with 413, hostile arguments answered with 4xx (benchmarks/audits/server_fuzz.py: more)
    pytest.importorskip("uvicorn", reason="the 'server' extra")
    import server_fuzz

    assert server_fuzz.fuzz_server(examples=30, cap=3) == []
