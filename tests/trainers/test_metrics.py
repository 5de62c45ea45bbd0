"""Metric names explained once (docs/training.md's table), and a plot a user can read."""

import math
from pathlib import Path

import pytest

from trainers.metrics import METRICS, PANELS, TABLE, MetricsLogger, draw, metric_table, plot_run
from conftest import SMOKE

PAGE = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def test_the_docs_explain_every_metric_of_the_table_and_plot():
    # Regenerate with: python -c "from trainers.metrics import metric_table; print(metric_table())"
    assert metric_table() in PAGE.read_text()
    assert all(len(m.label) <= 8 and m.meaning for m in METRICS)
    panels = {title for title, _, _ in PANELS}
    assert all(m.panel in panels for m in METRICS if m.panel)
    assert len({m.label for m in METRICS}) == len(METRICS)


def test_the_printed_table_uses_the_documented_labels(tmp_path):
    logger = MetricsLogger(tmp_path)
    text = logger.table_row({"iteration": 1, "rollout/success": 0.5})
    header, row = text.splitlines()
    assert header.split() == [m.label for m in TABLE]
    assert row.split()[:2] == ["1", "0.500"] and "-" in row.split()
    assert logger.table_row({"iteration": 2}).count("\n") == 0  # the header only once


def records(n=4, mi=True):
    out = []
    for i in range(1, n + 1):
        r = {"iteration": i, "rollout/success": 0.5, "rollout/format_valid": 0.5, "rollout/random_success": 0.2,
             "policy/token_entropy": 2.0 - i / 10, "filter/rv_mean": 0.1, "filter/rv_std_over_mean": 1.5,
             "filter/kept_ratio": 0.5}
        if mi:
            r.update({"mi/retrieval_acc": 0.9 - i / 10, "mi/retrieval_chance": 0.25, "mi/mi_est": 0.3})
        out.append(r)
    return out


def test_the_plot_has_integer_ticks_labels_a_title_and_says_when_a_panel_is_empty():
    fig = draw(records(mi=False), "my-run\ngrpo on FrozenLake")
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert set(axes) == {title for title, _, _ in PANELS}
    assert fig._suptitle.get_text().startswith("my-run")
    task = axes["Task"]
    assert task.get_xlabel() == "iteration" and task.get_ylabel() == "share of episodes"
    ticks = [t for t in task.get_xticks() if 1 <= t <= 4]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert task.get_ylim() == pytest.approx((-0.05, 1.05))
    success, _, format_valid = task.get_lines()  # success, the random baseline (if logged), format
    # Equal values: success is drawn above format, so it stays visible.
    assert success.get_label() == "success" and success.get_zorder() > format_valid.get_zorder()
    assert [t.get_text() for t in axes["Retrieval"].texts] == ["no data"]
    assert not axes["Entropy (nats/token)"].texts
    fig = draw(records(mi=True), "t")
    retrieval = {ax.get_title(): ax for ax in fig.axes}["Retrieval"]
    assert not retrieval.texts and {line.get_label() for line in retrieval.get_lines()} == {"ret_acc", "chance"}


def test_plot_run_titles_the_figure_with_the_run_settings(tmp_path):
    import json

    logger = MetricsLogger(tmp_path / "run-a")
    for r in records():
        logger.log(r)
    (tmp_path / "run-a" / "config.json").write_text(json.dumps({
        "model": None, "env": {SMOKE: 8}, "algorithm": "dapo", "filter": "top_p",
        "filter_value": 0.9, "learning_rate": 1e-6, "rollout": {"n_groups": 8, "group_size": 16}}))
    from trainers import metrics

    assert metrics._run_title(tmp_path / "run-a") == (
        f"{tmp_path.name}/run-a\ndapo on FrozenLake-v0 x8, P x G = 8 x 16, filter top_p 0.9, lr 1e-06, model default")
    assert plot_run(tmp_path / "run-a").stat().st_size > 10_000
    with pytest.raises(FileNotFoundError):
        plot_run(tmp_path / "empty")
    assert not any(math.isnan(v) for v in records()[0].values())


def test_each_point_shows_its_episodes_and_each_axis_its_own_unit():
    from trainers.metrics import wilson

    rs = records(mi=True)
    for r in rs:
        r.update({"rollout/episodes": 64, "mi/mi_zscore_ema": 2.5})
    rs[0]["mi_code/mi_est"] = 1.0  # one point only: its axis must not zoom onto it
    axes = {ax.get_title(): ax for ax in draw(rs, "t").axes if ax.get_title()}
    task = axes["Task (64 episodes a point)"]
    band = task.collections[0].get_paths()[0].vertices[:, 1]
    low, high = wilson(0.5, 64)
    assert band.min() == pytest.approx(low) and band.max() == pytest.approx(high)
    assert "95 % interval" in [t.get_text() for t in task.get_legend().get_texts()]
    mi = axes["MI (nats/token)"]
    assert "MI_z" not in [line.get_label() for line in mi.get_lines()]  # a z-score is no nats
    assert mi.get_ylim()[0] <= 0 and mi.get_ylim()[1] >= 1.0
    z = axes["MI z-score (EMA)"]
    assert z.get_ylabel() == "z (standard deviations)" and [line.get_label() for line in z.get_lines()] == ["MI_z"]
