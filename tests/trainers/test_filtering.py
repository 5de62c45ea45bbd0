"""The filter against RAGEN's released selection rules (rollout_filter.py), worked out by hand."""

import numpy as np
import pytest

from ragen_envs.diagnose.filtering import (FilterConfig, check, filter_stats, group_scores, per_group, reward_variance,
                                           select, select_groups, select_trajectories)

# Per row: std 0, 0.57735, 1.15470, 0 (sum 1.73205); variance 0, 1/3, 4/3, 0; mean 1, 0.5, 1, 5.
RETURNS = np.array([[1, 1, 1, 1], [0, 1, 0, 1], [0, 2, 0, 2], [5, 5, 5, 5]], dtype=float)
S1, S2 = (1 / 3) ** 0.5, (4 / 3) ** 0.5


def test_scores_by_hand():
    np.testing.assert_allclose(reward_variance(RETURNS), [0, 1 / 3, 4 / 3, 0])
    np.testing.assert_allclose(group_scores(RETURNS), [0, S1, S2, 0])  # the default: std, as the code ranks
    np.testing.assert_allclose(group_scores(RETURNS, "mean"), [1, 0.5, 1, 5])
    np.testing.assert_allclose(group_scores(RETURNS, "sum"), [4, 2, 4, 20])
    np.testing.assert_allclose(per_group([1, 3, 2, 2], 2, "mean"), [2, 2])
    np.testing.assert_allclose(per_group([1, 3, 2, 2], 2, "std"), [2 ** 0.5, 0])


@pytest.mark.parametrize("kwargs, expected", [
    # linear top-p: threshold = rho * 1.73205 - 0.01
    ({"strategy": "top_p", "value": 0.9}, [1, 2]),  # 1.5489: 1.1547 is short, + 0.5774 reaches it
    ({"strategy": "top_p", "value": 0.6}, [2]),  # 1.0292
    ({"strategy": "top_p", "value": 0.672}, [2]),  # 1.1539 <= 1.1547 only thanks to the absolute 0.01
    ({"strategy": "top_p", "value": 0.6725}, [1, 2]),  # 1.1548 > 1.1547
    ({"strategy": "top_p", "value": 1.0}, [0, 1, 2, 3]),  # rho >= 1: every group, zero scores included
    ({"strategy": "top_p", "value": 1.0, "include_zero": False}, [1, 2]),
    ({"strategy": "top_p", "value": 0.8, "metric": "variance"}, [2]),  # 0.8 * 5/3 - 0.01 = 1.3233 <= 4/3
    # softmax top-p: p = 0.1438, 0.2561, 0.4563, 0.1438
    ({"strategy": "top_p", "value": 0.4, "prob_mode": "softmax"}, [2]),
    ({"strategy": "top_p", "value": 0.5, "prob_mode": "softmax"}, [1, 2]),  # 0.4563 + 0.2561 = 0.7124
    ({"strategy": "top_p", "value": 0.95, "prob_mode": "softmax"}, [0, 1, 2, 3]),
    # top-k: max(min(int(rho * P), remaining), 1)
    ({"strategy": "top_k", "value": 0.5}, [1, 2]),  # int(2.0)
    ({"strategy": "top_k", "value": 0.74}, [1, 2]),  # int(2.96) = 2, not ceil's 3
    ({"strategy": "top_k", "value": 0.75}, [0, 1, 2]),  # a tie at 0 goes to the lower index
    ({"strategy": "top_k", "value": 0.2}, [2]),  # int(0.8) = 0, then at least one
    ({"strategy": "top_k", "value": 0.75, "include_zero": False}, [1, 2]),  # min(3, 2 remaining)
    ({"strategy": "top_k", "value": 0.5, "order": "smallest"}, [0, 3]),  # the ablation: lowest first
    ({"strategy": "top_k", "value": 0.25, "metric": "mean"}, [3]),
    ({"strategy": "top_k_abs", "value": 3}, [0, 1, 2]),
    ({"strategy": "min_p", "value": 0.5}, [1, 2]),  # >= 0.5 * 1.1547
    ({"strategy": "min_p", "value": 0.6}, [2]),
    ({"strategy": "none"}, [0, 1, 2, 3]),
    ({"strategy": "none", "include_zero": False}, [1, 2]),  # DAPO's dynamic sampling
])
def test_selection_worked_examples(kwargs, expected):
    assert select_groups(RETURNS, **kwargs).tolist() == expected


def test_top_k_of_the_papers_setting_filters():
    scores = np.arange(1.0, 9.0)  # P = 8
    assert select(scores, "top_k", 0.9).tolist() == list(range(1, 8))  # int(7.2) = 7 groups, not all 8


def test_a_batch_without_signal_is_skipped():
    flat = np.ones((4, 3))
    assert select_groups(flat, "top_p", 0.9).tolist() == []  # threshold -0.01 is met by no group at all
    assert select_groups(flat, "top_p", 1.0).tolist() == [0, 1, 2, 3]
    assert select_groups(flat, "top_k", 0.5).tolist() == [0, 1]
    assert select_groups(flat, "none", include_zero=False).tolist() == []
    stats = filter_stats(flat, select_groups(flat, "top_p", 0.9))
    assert stats["filter/skipped"] == 1.0 and stats["filter/zero_variance_groups"] == 4.0


def test_linear_top_p_with_signed_scores():
    # Scores that can be negative (metric "mean"): the sum sets the threshold, and the walk stops at
    # the first score <= 0. [0.5, -1, 1]: threshold 0.9 * 0.5 - 0.01 = 0.44, met by the 1 alone.
    assert select([0.5, -1.0, 1.0], "top_p", 0.9).tolist() == [2]
    # All negative: the threshold (-2.71) is met before any group is taken, so nothing is kept.
    assert select([-1.0, -2.0], "top_p", 0.9).tolist() == []
    # Zero-score groups add nothing and are never taken.
    assert select([1.0, 0.0, 1.0], "top_p", 0.9).tolist() == [0, 2]


def test_filter_stats_by_hand():
    stats = filter_stats(RETURNS, [1, 2])
    rv = np.array([0, 1 / 3, 4 / 3, 0])
    assert stats["filter/kept_groups"] == 2 and stats["filter/kept_ratio"] == 0.5
    assert stats["filter/zero_variance_groups"] == 2
    assert stats["filter/rv_mean"] == pytest.approx(rv.mean())
    assert stats["filter/rv_std_over_mean"] == pytest.approx(rv.std() / rv.mean())
    assert stats["filter/in_group_reward_std"] == pytest.approx(np.sqrt(rv).mean())


@pytest.mark.parametrize("kwargs", [{"strategy": "top_q"}, {"value": 0}, {"strategy": "top_k", "value": 1.5},
                                    {"strategy": "top_k_abs", "value": 0.5}, {"prob_mode": "gumbel"},
                                    {"order": "middle"}, {"metric": "mad"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        select_groups(RETURNS, **{"strategy": "top_p", **kwargs})


def test_needs_two_samples_per_group():
    with pytest.raises(ValueError, match="G >= 2"):
        select_groups(np.ones((3, 1)))


def test_group_scores_from_lengths_and_token_entropies():
    import torch

    from ragen_envs.agent.trajectory import Trajectory, Turn
    from trainers.batch import Layout, OldPass, trajectory_samples
    from trainers.filtering import scores_for

    def traj(group, index, n):
        turn = Turn(prompt_ids=[1], response_ids=[5] * n, logprobs=[0.0] * n, response="", reasoning=None,
                    actions=[], reward=0, format_ok=True, finish_reason="stop")
        return Trajectory("x", group, group, [], [turn], episode_return=0.0)

    trajs = [traj(0, 0, 2), traj(0, 1, 4), traj(1, 2, 3), traj(1, 3, 3)]
    assert scores_for("length", np.zeros((2, 2)), trajs).tolist() == [3, 3]
    layout = Layout.of([s for i, t in enumerate(trajs) for s in trajectory_samples(t, i)], size=2, pad_id=0)
    # token entropy 1 on trajectory 0's tokens, 3 on 1's, 2 on the others
    stats = [OldPass(logp=None, entropy=torch.tensor([[1, 1, 0, 0], [3, 3, 3, 3]], dtype=torch.float), values=None),
             OldPass(logp=None, entropy=torch.full((2, 3), 2.0), values=None)]
    assert scores_for("entropy", np.zeros((2, 2)), trajs, layout, stats).tolist() == [2.0, 2.0]
    assert scores_for("entropy_std", np.zeros((2, 2)), trajs, layout, stats).tolist() == pytest.approx([2 ** 0.5, 0])
    assert scores_for("std", np.array([[1.0, 3.0], [2.0, 2.0]])).tolist() == pytest.approx([2 ** 0.5, 0])


def test_skip_keeps_one_quartile_at_a_time():
    scores = [0.1, 0.8, 0.3, 0.0, 0.6, 0.2, 0.7, 0.4]  # ranked: 1, 6, 4, 7, 2, 5, 0, 3
    quartiles = [select(scores, "top_k", 0.25, skip=q * 0.25).tolist() for q in range(4)]
    assert quartiles == [[1, 6], [4, 7], [2, 5], [0, 3]]
    assert select(scores, "top_k_abs", 3, skip=0.75).tolist() == [0, 3]  # only two are left
    # without the zero: 1, 6, 4, 7 skipped (int(0.5 * 8), P counting every group, as k does), then 2, 5
    assert select(scores, "top_k", 0.25, skip=0.5, include_zero=False).tolist() == [2, 5]
    with pytest.raises(ValueError, match="takes no skip"):
        check("top_p", 0.9, skip=0.25)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        check("top_k", 0.25, skip=1.0)


def test_the_trajectory_level_filter_ranks_inside_each_group():
    returns = np.array([[0, 0, 0, 4], [1, 1, 1, 1], [3, 0, 1, 0]], dtype=float)
    # |R - mean|: row 0 (mean 1): 1, 1, 1, 3 (sum 6); row 1: all 0; row 2 (mean 1): 2, 1, 0, 1 (sum 4)
    keep = select_trajectories(returns, "top_p", 0.6)  # thresholds 3.59 (3 + 1) and 2.39 (2 + 1); 0 keeps none
    assert keep.astype(int).tolist() == [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    keep = select_trajectories(returns, "top_k", 0.5, include_zero=False)  # 2 each, zero deviations dropped
    assert keep.astype(int).tolist() == [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0]]
    squared = select_trajectories(returns, "top_p", 0.6, metric="variance")  # row 0: 1, 1, 1, 9 (9 >= 7.19)
    assert squared[0].astype(int).tolist() == [0, 0, 0, 1]
    with pytest.raises(ValueError, match="std or variance"):
        select_trajectories(returns, metric="mean")


def test_the_settings_whole_select_as_one_by_one():
    assert select_groups(RETURNS, FilterConfig("top_p", 0.9)).tolist() == [1, 2]
    assert select_groups(RETURNS, FilterConfig("top_k", 0.25, metric="mean")).tolist() == [3]
    assert select([0.1, 0.8, 0.3, 0.0], FilterConfig("top_k", 0.25, skip=0.5)).tolist() == [0]
    returns = np.array([[0, 0, 0, 4], [3, 0, 1, 0]], dtype=float)
    keep = select_trajectories(returns, FilterConfig("top_k", 0.5, include_zero=False, level="trajectory"))
    assert keep.tolist() == select_trajectories(returns, "top_k", 0.5, include_zero=False).tolist()
    with pytest.raises(TypeError, match=r"also as \['value'\]"):
        select_groups(RETURNS, FilterConfig("top_p"), 0.5)


def test_filter_config_is_checked_and_is_the_trainers():
    from dataclasses import FrozenInstanceError

    from trainers import TrainerConfig

    for kwargs in ({"strategy": "top_q"}, {"strategy": "top_k", "value": 1.5}, {"metric": "mad"},
                   {"level": "trajectory", "metric": "mean"}, {"strategy": "top_p", "skip": 0.25}):
        with pytest.raises(ValueError):
            FilterConfig(**kwargs)
    with pytest.raises(FrozenInstanceError):
        FilterConfig().value = 0.5
    cfg = TrainerConfig(filter="top_k", filter_value=0.25, filter_prob_mode="softmax", filter_metric="variance",
                        filter_order="smallest", include_zero=False, filter_level="trajectory", filter_skip=0.5)
    assert cfg.filtering == FilterConfig("top_k", 0.25, "softmax", "variance", "smallest", False, "trajectory", 0.5)
    assert TrainerConfig().filtering == FilterConfig()  # the same defaults: no filter
    with pytest.raises(ValueError, match="takes no skip"):
        TrainerConfig(filter="top_p", filter_skip=0.25)


def test_the_random_control_keeps_as_many_groups_as_its_rule_at_random():
    scores = np.array([0.0, 0.1, 3.0, 2.5, 0.0, 0.2, 2.9, 0.0])
    rule = FilterConfig("top_p", 0.9)
    control = FilterConfig("top_p", 0.9, control="random")
    kept = select(scores, rule)
    draws = [tuple(select(scores, control, rng=np.random.default_rng(seed))) for seed in range(20)]
    assert {len(d) for d in draws} == {len(kept)}  # the rule's count, every time
    assert len(set(draws)) > 5 and any(set(d) - set(kept) for d in draws)  # which groups: random
    assert draws[3] == tuple(select(scores, control, rng=np.random.default_rng(3)))  # a seed repeats its draw
    assert set().union(*draws) - {0, 4, 7}  # zero-score groups can be drawn too: the whole batch
    with pytest.raises(ValueError, match="pass rng"):
        select(scores, control)
    with pytest.raises(ValueError, match="level 'prompt'"):
        FilterConfig("top_p", 0.9, level="trajectory", control="random")
    with pytest.raises(ValueError, match="control must be one of"):
        FilterConfig(control="shuffle")


def test_the_trainer_config_carries_the_control_and_scales_the_critic_with_the_actor():
    from trainers import TrainerConfig
    from trainers.config import CRITIC_LR_RATIO

    cfg = TrainerConfig(filter="top_k", filter_value=0.5, filter_control="random")
    assert cfg.filtering == FilterConfig("top_k", 0.5, control="random")
    organism = TrainerConfig.from_preset("organism")
    assert organism.critic_lr == CRITIC_LR_RATIO * organism.learning_rate == pytest.approx(1e-2)  # was 1e-5
    assert TrainerConfig(learning_rate=2e-3).critic_lr == pytest.approx(2e-2)
    assert TrainerConfig(learning_rate=2e-3, critic_learning_rate=1e-4).critic_lr == 1e-4  # set: kept
