import numpy as np
import pytest

from trainers.filtering import filter_stats, reward_variance, select_groups

# RV (sample variance) per row: 0, 1/3, 4/3, 0; total 5/3.
RETURNS = np.array([[1, 1, 1, 1], [0, 1, 0, 1], [0, 2, 0, 2], [5, 5, 5, 5]], dtype=float)


def test_reward_variance_by_hand():
    np.testing.assert_allclose(reward_variance(RETURNS), [0, 1 / 3, 4 / 3, 0])
    np.testing.assert_allclose(reward_variance(RETURNS, "std"), [0, (1 / 3) ** 0.5, (4 / 3) ** 0.5, 0])


@pytest.mark.parametrize("strategy, value, include_zero, expected", [
    ("top_p", 0.9, True, [1, 2]),  # need 1.5: 4/3 is short, 4/3 + 1/3 reaches it
    ("top_p", 0.8, True, [2]),  # need exactly 4/3: reached within the 1e-9 rounding allowance
    ("top_p", 1.0, True, [1, 2]),  # zero-variance groups add nothing to the mass
    ("top_p", 0.01, True, [2]),  # always at least the top group
    ("top_k", 0.5, True, [1, 2]),  # ceil(0.5 * 4) = 2
    ("top_k", 0.75, True, [0, 1, 2]),  # 3 groups: a tie at 0 goes to the lower index
    ("top_k", 0.75, False, [1, 2]),  # zero-variance groups removed before ranking
    ("top_k", 1.0, True, [0, 1, 2, 3]),
    ("none", 0.9, True, [0, 1, 2, 3]),
    ("none", 0.9, False, [1, 2]),  # DAPO's dynamic sampling
])
def test_select_groups_worked_examples(strategy, value, include_zero, expected):
    kept = select_groups(RETURNS, strategy, value, include_zero=include_zero)
    assert kept.tolist() == expected


def test_std_metric_ranks_and_sums_standard_deviations():
    # std: 0, 0.577, 1.155, 0 (total 1.732): 60% = 1.039 needs only the top group, 70% = 1.212 both.
    assert select_groups(RETURNS, "top_p", 0.6, metric="std").tolist() == [2]
    assert select_groups(RETURNS, "top_p", 0.7, metric="std").tolist() == [1, 2]
    assert select_groups(RETURNS, "top_p", 0.7, metric="variance").tolist() == [2]


def test_all_zero_variance():
    flat = np.ones((4, 3))
    assert select_groups(flat, "top_p", 0.9).tolist() == []  # skipped
    assert select_groups(flat, "top_k", 0.5).tolist() == [0, 1]  # top_k keeps its share regardless
    assert select_groups(flat, "none", include_zero=False).tolist() == []
    stats = filter_stats(flat, select_groups(flat, "top_p", 0.9))
    assert stats["filter/skipped"] == 1.0 and stats["filter/zero_variance_groups"] == 4.0


def _rows_with_variance(rv):
    # G = 2: returns (0, d) have sample variance d^2 / 2.
    return np.array([[0.0, np.sqrt(2 * v)] for v in rv])


def test_top_p_adapts_while_top_k_does_not():
    bimodal = _rows_with_variance([10, 10, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])  # total 20.6
    flat = _rows_with_variance([1.0] * 8)
    assert select_groups(bimodal, "top_p", 0.9).tolist() == [0, 1]  # 20 >= 18.54
    assert len(select_groups(flat, "top_p", 0.9)) == 8  # ceil: 7 groups reach only 7/8
    assert len(select_groups(bimodal, "top_k", 0.25)) == len(select_groups(flat, "top_k", 0.25)) == 2
    assert filter_stats(bimodal, [0, 1])["filter/rv_std_over_mean"] > 1.5
    assert filter_stats(flat, [0])["filter/rv_std_over_mean"] == 0.0


def test_filter_stats_by_hand():
    stats = filter_stats(RETURNS, [1, 2])
    rv = np.array([0, 1 / 3, 4 / 3, 0])
    assert stats["filter/kept_groups"] == 2 and stats["filter/kept_ratio"] == 0.5
    assert stats["filter/zero_variance_groups"] == 2
    assert stats["filter/rv_mean"] == pytest.approx(rv.mean())
    assert stats["filter/rv_std"] == pytest.approx(rv.std())
    assert stats["filter/rv_std_over_mean"] == pytest.approx(rv.std() / rv.mean())
    assert stats["filter/in_group_reward_std"] == pytest.approx(np.sqrt(rv).mean())


@pytest.mark.parametrize("kwargs", [{"strategy": "top_q"}, {"value": 0}, {"value": 1.5}, {"metric": "mad"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        select_groups(RETURNS, **{"strategy": "top_p", **kwargs})


def test_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="G >= 2"):
        select_groups(np.ones((3, 1)))
