"""RAGEN's reward and advantage options (config/base.yaml), each worked from its code: the numbers
here are what RAGEN's functions give on the same inputs, by hand."""

import csv
from dataclasses import replace

import numpy as np
import pytest
import torch

from ragen_envs.agent.trajectory import Trajectory, Turn
from ragen_envs.diagnose.filtering import reward_variance
from trainers import Trainer, TrainerConfig
from trainers import algorithms as alg
from trainers.batch import Layout, collate, trajectory_samples
from trainers.metrics import GROUP_RV_FILE
from trainers.rewards import normalized

from conftest import SMOKE
from tests.trainers.test_trainer import SeededReplies, config, make_model


def prepared(tokenizer, tmp_path, **options):
    """A trainer with ``options``, its first batch prepared (the same batch whatever the options:
    SeededReplies replays), and the kept samples' advantages."""
    cfg = config(tmp_path, n_groups=4, group_size=4, mi_every=0, save_strategy="no", overwrite_output_dir=True,
                 **options)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    metrics = {}
    batch = trainer._prepare(trainer._rollout(metrics), metrics)
    return trainer, batch, trainer._advantages(batch, metrics), metrics


def first_values(advantages):
    """Each sample's advantage on its first generated token (group advantages are one per sample)."""
    return {i: float(a[a != 0][0]) if (a != 0).any() else 0.0 for i, (a, _) in advantages.items()}


# -- soft_advantage_reweight, filter_loss_scaling, grpo_advantage_length_weight, zero_task_advantage ------
def test_each_advantage_option_scales_as_ragens_code(tokenizer, tmp_path):
    _, base_batch, base, _ = prepared(tokenizer, tmp_path, filter="top_k", filter_value=0.5)
    plain = first_values(base)
    assert any(plain.values())
    samples, kept = base_batch.layout.samples, base_batch.kept
    # soft: x group std (torch.std, ddof 1) / (the largest kept group's + 1e-6)
    stds = base_batch.returns.std(axis=1, ddof=1)
    _, _, soft, metrics = prepared(tokenizer, tmp_path, filter="top_k", filter_value=0.5, soft_advantage_reweight=True)
    for i, value in first_values(soft).items():
        assert value == pytest.approx(plain[i] * stds[samples[i].group] / (stds[kept].max() + 1e-6), rel=1e-6)
    assert metrics["advantage/soft_reweight_max"] == pytest.approx(1.0, abs=1e-5)
    # filter_loss_scaling: x kept groups / all groups (linear), or its square root
    ratio = len(kept) / 4
    assert ratio == 0.5
    for mode, factor in (("linear", ratio), ("sqrt", ratio ** 0.5)):
        scaled = first_values(prepared(tokenizer, tmp_path, filter="top_k", filter_value=0.5,
                                       filter_loss_scaling=mode)[2])
        assert scaled == pytest.approx({i: v * factor for i, v in plain.items()})
    # length weight: / ((generated tokens + 1e-6) / their mean over the kept samples)
    lengths = {i: float(base_batch.layout.mask(i).sum()) for i in base_batch.chosen}
    assert len(set(lengths.values())) > 1
    mean = np.mean(list(lengths.values()))
    weighted = first_values(prepared(tokenizer, tmp_path, filter="top_k", filter_value=0.5,
                                     grpo_advantage_length_weight=True)[2])
    assert weighted == pytest.approx({i: v / ((lengths[i] + 1e-6) / mean) for i, v in plain.items()})
    # zero_task_advantage: every advantage 0
    zero = prepared(tokenizer, tmp_path, filter="top_k", filter_value=0.5, zero_task_advantage=True)[2]
    assert all(not a.any() for a, _ in zero.values())


def test_zero_task_advantage_leaves_only_the_entropy_term(tokenizer, tmp_path):
    trainer, batch, advantages, _ = prepared(tokenizer, tmp_path, zero_task_advantage=True, entropy_coef=0.0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer._update(batch.layout, batch.stats, batch.chosen, advantages)
    assert metrics["loss/policy"] == 0.0 and metrics["loss/grad_norm"] == 0.0
    # AdamW with weight decay 0 and a zero gradient leaves every weight as it was
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_options_ragens_code_refuses_are_errors():
    with pytest.raises(ValueError, match="group advantages"):
        TrainerConfig(algorithm="ppo", soft_advantage_reweight=True)
    with pytest.raises(ValueError, match="group advantages"):
        TrainerConfig(algorithm="ppo", grpo_advantage_length_weight=True)
    with pytest.raises(ValueError, match="bi_level_gae"):
        TrainerConfig(algorithm="grpo", bi_level_gae=True)
    with pytest.raises(ValueError, match="turn scores"):
        TrainerConfig(use_turn_scores=True, reward_normalization_method="mean_std")
    with pytest.raises(ValueError, match="filter_loss_scaling"):
        TrainerConfig(filter_loss_scaling="square")
    with pytest.raises(ValueError, match="high_level_gamma"):
        TrainerConfig(algorithm="ppo", bi_level_gae=True, high_level_gamma=1.5)


# -- reward_normalization ---------------------------------------------------------------------------
def test_reward_normalization_as_ragens_normalize_episode_rewards():
    returns = np.array([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 4.0, 0.0, 4.0]])
    envs = ["a", "a", "b"]
    assert np.array_equal(normalized(returns, envs, "state", "identity"), returns)
    # state, mean_std: per group (x - mean) / (std ddof 1 + 1e-6); a flat group is all 0
    std0 = np.std([1, 0, 0, 0], ddof=1)
    out = normalized(returns, envs, "state", "mean_std")
    assert out[0] == pytest.approx([0.75 / (std0 + 1e-6), -0.25 / (std0 + 1e-6), -0.25 / (std0 + 1e-6),
                                    -0.25 / (std0 + 1e-6)])
    assert np.array_equal(out[1], np.zeros(4))
    assert out[2] == pytest.approx(np.array([-2.0, 2.0, -2.0, 2.0]) / (np.std([0, 4, 0, 4], ddof=1) + 1e-6))
    # asym_clip: mean_std clipped to [-1, 3]
    assert normalized(returns, envs, "state", "asym_clip") == pytest.approx(np.clip(out, -1, 3))
    skewed = np.array([[10.0] + [0.0] * 19])  # the outlier's z-score, 19 / sqrt(20), is past 3
    clipped = normalized(skewed, ["a"], "state", "asym_clip")
    assert clipped.max() == 3.0 and clipped.min() == pytest.approx(-0.5 / (np.std(skewed, ddof=1) + 1e-6))
    # mean: x - mean; batch: over all 12; inductive: per env (groups 0-1 are env a, group 2 env b)
    assert normalized(returns, envs, "state", "mean")[0] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert normalized(returns, envs, "batch", "mean").sum() == pytest.approx(0.0)
    assert normalized(returns, envs, "batch", "mean")[1][0] == pytest.approx(2.0 - returns.mean())
    inductive = normalized(returns, envs, "inductive", "mean")
    assert inductive[:2].sum() == pytest.approx(0.0) and inductive[2] == pytest.approx([-2, 2, -2, 2])
    with pytest.raises(ValueError, match="grouping"):
        normalized(returns, envs, "episode", "mean")


def test_the_filter_and_advantages_see_normalised_returns(tokenizer, tmp_path):
    _, raw, _, _ = prepared(tokenizer, tmp_path)
    _, norm, advantages, _ = prepared(tokenizer, tmp_path, reward_normalization_method="mean")
    assert np.allclose(norm.returns, raw.returns - raw.returns.mean(axis=1, keepdims=True))
    assert {s.episode_return for s in norm.layout.samples} <= set(norm.returns.reshape(-1).tolist())
    assert np.allclose(reward_variance(norm.returns), reward_variance(raw.returns))


# -- use_turn_scores and bi_level_gae ---------------------------------------------------------------
def _turn(prompt, response, reward):
    return Turn(prompt_ids=prompt, response_ids=response, logprobs=[0.0] * len(response), response="",
                reasoning=None, actions=[], reward=reward, format_ok=True, finish_reason="stop")


def test_turn_scores_put_each_turns_reward_on_its_last_token():
    first = _turn([1, 2], [3, 4], 0.5)
    second = _turn([1, 2, 3, 4, 9], [5, 6, 7], -0.25)  # extends the first: one segment
    traj = Trajectory("x", 0, 0, [], [first, second], episode_return=0.25)
    summed = collate(trajectory_samples(traj, 0), pad_id=0)
    assert summed.rewards[0].tolist() == [0, 0, 0, 0, 0, 0, 0.25]  # targets: ids[1:]
    turns = collate(trajectory_samples(traj, 0, turn_scores=True), pad_id=0)
    assert turns.rewards[0].tolist() == [0, 0, 0.5, 0, 0, 0, -0.25]
    assert float(turns.rewards.sum()) == traj.episode_return


def test_bi_level_gae_on_ragens_own_example():
    # core_algos.py's __main__: rewards at tokens 4 and 9, values 0.1 ... 1.0, gamma = lam = 1, high 0.95.
    # Turn level: A9 = 1 - 1.0 = 0; A4 = 1 + 0.95 * 1.0 - 0.5 = 1.45, so G4 = 1.95, G9 = 1.0. Token level:
    # within each turn the values' steps of 0.1 accumulate back from its end.
    rewards = torch.tensor([[0, 0, 0, 0, 1, 0, 0, 0, 0, 1.0]])
    values = torch.arange(1, 11, dtype=torch.float32)[None] / 10
    adv, ret = alg.bi_level_gae(rewards, values, torch.ones(1, 10), 1.0, 1.0, 0.95)
    assert adv[0].tolist() == pytest.approx([1.85, 1.75, 1.65, 1.55, 1.45, 0.4, 0.3, 0.2, 0.1, 0.0])
    assert ret[0].tolist() == pytest.approx([1.95] * 5 + [1.0] * 5)
    # the reward at the end alone (use_turn_scores off): token GAE, masked positions skipped alike
    last = torch.zeros(1, 10)
    last[0, 8] = 1.0
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0, 1, 0.0]])
    for a, b in zip(alg.bi_level_gae(last, values, mask, 0.9, 0.8, 0.5), alg.gae(last, values, mask, 0.9, 0.8)):
        assert torch.allclose(a, b)
    # no reward at all (RAGEN raises there): token GAE, terminal value 0
    zero = torch.zeros(1, 10)
    assert torch.allclose(alg.bi_level_gae(zero, values, mask, 1.0, 1.0)[0], alg.gae(zero, values, mask)[0])


def test_ppo_trains_with_turn_scores_and_bi_level_gae(tokenizer, tmp_path):
    _, batch, plain, _ = prepared(tokenizer, tmp_path, algorithm="ppo")
    _, _, bi, _ = prepared(tokenizer, tmp_path, algorithm="ppo", use_turn_scores=True, bi_level_gae=True,
                           high_level_gamma=0.5)
    assert plain.keys() == bi.keys()
    multi = [i for i in plain if len(batch.layout.samples[i].ids) and sum(
        1 for k in range(1, len(batch.layout.mask(i))) if batch.layout.mask(i)[k] < batch.layout.mask(i)[k - 1]) > 1]
    assert multi  # some sample holds several turns, where the two GAEs differ
    assert any(not torch.allclose(plain[i][0], bi[i][0]) for i in multi)
    cfg = config(tmp_path / "b", algorithm="ppo", use_turn_scores=True, bi_level_gae=True, mi_every=0,
                 save_strategy="no")
    metrics = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                      rollout_policy=SeededReplies(tokenizer)).train()
    assert np.isfinite(metrics[-1]["loss/value"])


# -- log_group_rv_table ----------------------------------------------------------------------------
def test_group_rv_table_has_a_row_per_group_and_iteration(tokenizer, tmp_path):
    cfg = config(tmp_path, num_iterations=2, n_groups=3, filter="top_k", filter_value=0.34, mi_every=0,
                 save_strategy="no", log_group_rv_table=True)
    history = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                      rollout_policy=SeededReplies(tokenizer)).train()
    with (tmp_path / "run" / GROUP_RV_FILE).open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [1, 1, 1, 2, 2, 2]
    assert [int(r["group"]) for r in rows] == [0, 1, 2] * 2
    for n, record in enumerate(history, start=1):
        mine = [r for r in rows if int(r["iteration"]) == n]
        assert sum(int(r["kept"]) for r in mine) == record["filter/kept_groups"]
        kept_std = [float(r["reward_std"]) for r in mine if int(r["kept"])]
        assert min(kept_std) >= max([float(r["reward_std"]) for r in mine if not int(r["kept"])] or [0.0])


def test_group_rv_table_off_by_default(tokenizer, tmp_path):
    Trainer(make_model(tokenizer), SMOKE, config(tmp_path, mi_every=0, save_strategy="no"), tokenizer=tokenizer,
            rollout_policy=SeededReplies(tokenizer)).train()
    assert not (tmp_path / "run" / GROUP_RV_FILE).exists()


# -- context_window_mode ---------------------------------------------------------------------------
class Unsure(SeededReplies):
    """Always the reply without an action: every episode runs its turns out."""

    def generate(self, prompts, sampling):
        return [super(Unsure, self).generate([prompt], replace(sampling, seed=3))[0]
                for prompt in prompts]


@pytest.mark.parametrize("mode", ["limited_multi_turn", "single_turn"])
def test_a_windowed_prompt_shows_the_last_turns_and_trains_each_turn_alone(mode, tokenizer, tmp_path):
    from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig

    from conftest import SMOKE_KWARGS

    def rollout(window_mode, k):
        rollout_config = RolloutConfig(n_groups=1, group_size=2, chat=ChatEnvConfig(max_turns=4),
                                       sampling=SamplingConfig(max_new_tokens=24), env_kwargs=dict(SMOKE_KWARGS),
                                       context_window_mode=window_mode, max_context_window=k)
        return RolloutRunner(SMOKE, Unsure(tokenizer), rollout_config).collect()

    full = rollout("full", -1)
    windowed = rollout(mode, 2)
    long = [n for n, t in enumerate(full) if t.num_turns >= 3]
    assert long == [0, 1]  # a reply without an action never ends the episode
    for n in long:
        f, w = full[n], windowed[n]
        assert [t.actions for t in f.turns] == [t.actions for t in w.turns]  # the same episode
        assert len(f.segments()) == 1
        # limited: from turn 3 on the prompt leaves turn 1 out, so turns 2, 3, ... each start a sequence;
        # single_turn: from turn 2 on, turns before are text in the one user message
        assert len(w.segments()) == w.num_turns - (mode == "limited_multi_turn")
        third = tokenizer.decode(w.turns[2].prompt_ids)
        assert "Turn 1:" not in third and "Turn 2:" in third and "Turn 3:" in third
        chat = tokenizer.decode(f.turns[2].prompt_ids)
        assert chat.count("<|im_start|>user") == 3
        assert third.count("<|im_start|>user") == (2 if mode == "limited_multi_turn" else 1)
    if mode == "limited_multi_turn":  # a window of every turn is the whole chat
        assert [t.prompt_ids for t in rollout(mode, -1)[long[0]].turns] == [t.prompt_ids for t in full[long[0]].turns]


def test_context_window_settings_are_checked():
    from ragen_envs.agent import RolloutConfig

    with pytest.raises(ValueError, match="max_context_window"):
        RolloutConfig(max_context_window=0)
    with pytest.raises(ValueError, match="context_window_mode"):
        RolloutConfig(context_window_mode="sliding")


def test_layout_keeps_rewards_in_order_of_samples():
    # a windowed trajectory (two segments) with turn scores: each segment carries its own turns' rewards
    first, second = _turn([1, 2], [3], 1.0), _turn([7, 8], [4, 5], 2.0)
    traj = Trajectory("x", 0, 0, [], [first, second], episode_return=3.0)
    layout = Layout.of(trajectory_samples(traj, 0, turn_scores=True), size=2, pad_id=0)
    assert [float(layout.rewards(i).sum()) for i in range(2)] == [1.0, 2.0]


# -- enable_think=False: no-think RL -----------------------------------------------------------------
def test_no_think_rl_prefills_the_answer_and_skips_mi(tokenizer, tmp_path):
    from ragen_envs.agent import ChatEnvConfig

    cfg = config(tmp_path, algorithm="grpo", mi_every=1, save_strategy="no")
    data = cfg.to_dict()
    data["rollout"]["chat"] = {"max_turns": 2, "enable_think": False}
    cfg = TrainerConfig.from_dict(data)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    metrics = trainer.train()[-1]
    assert not any(key.startswith("mi") for key in metrics) and "loss/policy" in metrics
    assert tokenizer.decode(trainer.runner.collect()[0].turns[0].prompt_ids).endswith("assistant\n<answer>")
    assert "<think>" not in trainer.runner.collect()[0].messages[0]["content"]
    assert ChatEnvConfig(enable_think=False).prefill == "<answer>" and ChatEnvConfig().prefill == "<think>"
    assert ChatEnvConfig(prefill_think=False).prefill == ""


# -- verl's in-reward KL (algorithm.use_kl_in_reward, kl_penalty, kl_ctrl) ---------------------------------
def test_the_in_reward_kl_is_taken_off_the_rewards_logged_and_steered(tokenizer, tmp_path):
    cfg = config(tmp_path, n_groups=4, group_size=4, mi_every=0, save_strategy="no", overwrite_output_dir=True,
                 use_kl_in_reward=True, kl_ctrl_coef=0.5, kl_ctrl_type="adaptive", kl_ctrl_target=0.01,
                 kl_ctrl_horizon=100)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    assert trainer.ref_scorer is not None and cfg.beta == 0  # the penalty needs the reference, the KL loss off
    with torch.no_grad():  # the policy moves away from its reference, the initial model
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    metrics = {}
    batch = trainer._prepare(trainer._rollout(metrics), metrics)
    layout, probe = batch.layout, {}
    trainer._advantages(batch, probe)  # the gradient probe's call: logs, does not steer
    assert trainer.rl.kl_coef == 0.5
    advantages = trainer._advantages(batch, metrics, steer=True)
    kl = {i: alg.kl_estimate(layout.stat(batch.stats, "logp", i), layout.stat(batch.stats, "ref_logp", i), "kl")
          * layout.mask(i) for i in batch.chosen}
    current = np.mean([float(kl[i].sum() / layout.mask(i).sum()) for i in batch.chosen])
    assert metrics["kl/reward_kl"] == pytest.approx(current, rel=1e-5) and metrics["kl/reward_coef"] == 0.5
    assert abs(current / 0.01 - 1) > 0.2  # far from the target: verl's rule moves the coefficient by its cap
    step = 0.2 * len(batch.chosen) / 100
    assert trainer.rl.kl_coef == pytest.approx(0.5 * (1 + step if current > 0.01 else 1 - step))
    by_hand = alg.advantages(layout, batch.chosen, "group", penalty={i: 0.5 * kl[i] for i in batch.chosen})
    plain = alg.advantages(layout, batch.chosen, "group")
    assert all(torch.allclose(advantages[i].advantages, by_hand[i].advantages, atol=1e-6) for i in batch.chosen)
    assert not all(torch.allclose(advantages[i].advantages, plain[i].advantages) for i in batch.chosen)


def test_the_in_reward_kl_is_off_by_default_and_refused_with_bi_level_gae(tokenizer, tmp_path):
    off = TrainerConfig()
    assert (off.use_kl_in_reward, off.kl_penalty, off.kl_ctrl_type, off.kl_ctrl_coef) == (False, "kl", "fixed", 0.0)
    assert TrainerConfig.inert(off.to_dict()) >= {"kl_penalty", "kl_ctrl_type", "kl_ctrl_target", "kl_ctrl_horizon"}
    with pytest.raises(ValueError, match="bi_level_gae"):
        TrainerConfig(algorithm="ppo", bi_level_gae=True, use_kl_in_reward=True)
    trainer = prepared(tokenizer, tmp_path, use_kl_in_reward=True)[0]  # on, but with coefficient 0: nothing to take
    assert trainer.ref_scorer is None
