"""Reward-variance statistics of groups and the filter preview, worked out by hand."""

import numpy as np
import pytest

from ragen_envs.diagnose.filtering import FilterConfig, select_groups
from ragen_envs.diagnose.rewards import LOW_RV_RATIO, filter_preview, group_returns, reward_stats

# Four groups of 4, ids in order of first appearance 7, 3, 9, 1, episodes interleaved as rollouts may log them.
# Rows: 7: [0, 1, 0, 1] (RV 1/3, std S1); 3: [1, 1, 1, 1] (0); 9: [0, 2, 0, 2] (4/3, S2 = 2 S1); 1: [5] * 4 (0).
IDS = [7, 3, 7, 9, 3, 1, 7, 3, 9, 1, 7, 3, 9, 1, 9, 1]
RETURNS = [0, 1, 1, 0, 1, 5, 0, 1, 2, 5, 1, 1, 0, 5, 2, 5]
S1 = (1 / 3) ** 0.5


def test_groups_in_order_of_first_appearance():
    table = group_returns(RETURNS, IDS)
    assert table.tolist() == [[0, 1, 0, 1], [1, 1, 1, 1], [0, 2, 0, 2], [5, 5, 5, 5]]
    assert group_returns(np.array([1.0, 2.0, 3.0, 4.0]), np.array(["b", "b", "a", "a"])).tolist() == [[1, 2], [3, 4]]


def test_reward_stats_by_hand():
    stats = reward_stats(RETURNS, IDS)
    assert stats["groups"] == 4 and stats["group_size"] == 4 and stats["group_ids"] == [7, 3, 9, 1]
    assert stats["reward_std"] == pytest.approx([S1, 0, 2 * S1, 0])
    # sorted stds 0, 0, S1, 2 S1; linear interpolation at positions 0, 0.75, 1.5, 2.25, 3
    assert list(stats["reward_std_quantiles"]) == [0, 25, 50, 75, 100]
    assert list(stats["reward_std_quantiles"].values()) == pytest.approx([0, 0, S1 / 2, 1.25 * S1, 2 * S1])
    assert stats["zero_variance_share"] == 0.5
    # RV 1/3, 0, 4/3, 0: mean 5/12; deviations -1/12, -5/12, 11/12, -5/12 -> variance 172/144 / 4 = 43/144
    assert stats["rv_mean"] == pytest.approx(5 / 12)
    assert stats["rv_std"] == pytest.approx(43 ** 0.5 / 12)
    assert stats["rv_std_over_mean"] == pytest.approx(43 ** 0.5 / 5)  # 1.31
    assert stats["filter_predicted_to_help"] is True and "predicted to help" in stats["reading"]


def test_flat_reward_variance_predicts_no_benefit():
    # every group has RV 1/2: Std(RV) 0, so the ratio 0 <= 0.33
    stats = reward_stats([0, 1, 1, 0, 3, 4], [0, 0, 1, 1, 2, 2])
    assert stats["rv_mean"] == pytest.approx(0.5) and stats["rv_std_over_mean"] == pytest.approx(0)
    assert stats["filter_predicted_to_help"] is False and "not predicted" in stats["reading"]
    assert stats["zero_variance_share"] == 0.0
    nothing = reward_stats([1, 1, 2, 2], [0, 0, 1, 1])  # no variance anywhere: the ratio is 0 by convention
    assert nothing["zero_variance_share"] == 1.0 and nothing["rv_std_over_mean"] == 0.0
    assert nothing["filter_predicted_to_help"] is False and "no signal" in nothing["reading"]
    assert LOW_RV_RATIO == 0.33


def test_filter_preview_of_the_default_rules():
    rows = {row["rule"]: row for row in filter_preview(RETURNS, IDS)}
    assert list(rows) == ["top_p 0.9 linear", "top_p 0.9 softmax", "top_k 0.25", "min_p 0.5"]
    # linear: threshold 0.9 * 3 S1 - 0.01 = 1.5489, reached by 2 S1 + S1
    assert rows["top_p 0.9 linear"]["kept"] == [7, 9] and rows["top_p 0.9 linear"]["kept_share"] == 0.5
    assert rows["top_p 0.9 linear"]["rv_share"] == pytest.approx(1.0)
    # softmax p 0.2561, 0.1438, 0.4563, 0.1438: best first 0.4563, 0.7124, 0.8562 < 0.9, so all four
    assert rows["top_p 0.9 softmax"]["kept"] == [7, 3, 9, 1] and rows["top_p 0.9 softmax"]["kept_share"] == 1.0
    # top-k: int(0.25 * 4) = 1 group, the best; its RV 4/3 of 5/3
    assert rows["top_k 0.25"]["kept"] == [9] and rows["top_k 0.25"]["rv_share"] == pytest.approx(0.8)
    assert rows["min_p 0.5"]["kept"] == [7, 9]  # std >= 0.5 * 2 S1
    assert rows["top_k 0.25"]["filtering"] == FilterConfig("top_k", 0.25)


def test_filter_preview_of_one_rule_and_of_a_batch_without_variance():
    [row] = filter_preview(RETURNS, IDS, FilterConfig("none", include_zero=False))
    assert row["rule"] == "none without zero" and row["kept"] == [7, 9]
    [row] = filter_preview([1, 1, 2, 2], [0, 0, 1, 1], FilterConfig("top_p", 0.9))
    assert row["kept"] == [] and row["kept_share"] == 0 and row["rv_share"] == 0.0  # the trainer skips it
    with pytest.raises(ValueError, match="prompt-level"):
        filter_preview(RETURNS, IDS, FilterConfig("top_p", 0.5, level="trajectory"))
    with pytest.raises(ValueError, match="reward metric"):
        filter_preview(RETURNS, IDS, FilterConfig("top_p", 0.5, metric="entropy"))


@pytest.mark.parametrize("settings", [
    {},  # no filter
    {"filter": "top_p", "filter_value": 0.9},
    {"filter": "top_p", "filter_value": 0.9, "filter_prob_mode": "softmax"},
    {"filter": "top_k", "filter_value": 0.25, "filter_skip": 0.5},
    {"filter": "min_p", "filter_value": 0.5, "filter_metric": "variance", "include_zero": False},
    {"filter": "top_k_abs", "filter_value": 3, "filter_order": "smallest"},
])
def test_filter_preview_keeps_what_the_trainer_keeps(settings):
    from trainers import TrainerConfig

    cfg = TrainerConfig(**settings)
    rng = np.random.default_rng(0)
    table = rng.integers(0, 3, size=(8, 4)).astype(float)
    table[2] = 1.0  # one group without variance
    [row] = filter_preview(table.ravel(), np.repeat(np.arange(8), 4), cfg.filtering)
    trainer = select_groups(table, cfg.filter, cfg.filter_value, cfg.filter_metric, cfg.include_zero,
                            cfg.filter_prob_mode, cfg.filter_order, cfg.filter_skip)
    assert row["kept"] == trainer.tolist()


def test_groups_of_unequal_size_or_of_one_sample_are_refused():
    with pytest.raises(ValueError, match=r"2 returns: groups \[1\]; 3 returns: groups \[0\]"):
        group_returns([1, 2, 3, 4, 5], [0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="one sample has no reward variance"):
        reward_stats([1.0, 2.0, 3.0], [0, 1, 2])
    with pytest.raises(ValueError, match="one group id per return"):
        reward_stats([1.0, 2.0], [0, 0, 0])
    with pytest.raises(ValueError, match="flat"):
        reward_stats([[1.0, 2.0]], [0, 0])
