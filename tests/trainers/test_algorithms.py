import math
from dataclasses import replace

import pytest
import torch

from trainers import algorithms as alg


def test_group_advantages_by_hand():
    returns = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    grpo = alg.group_advantages(returns, groups, "group")
    torch.testing.assert_close(grpo, torch.tensor([-1, 0, 1, 0, 0, 0]) / (1 + 1e-6))  # std of 1,2,3 is 1
    torch.testing.assert_close(alg.group_advantages(returns, groups, "none"),
                               torch.tensor([-1.0, 0, 1, 0, 0, 0]))
    batch_std = returns.std()
    torch.testing.assert_close(alg.group_advantages(returns, groups, "batch"),
                               torch.tensor([-1.0, 0, 1, 0, 0, 0]) / (batch_std + 1e-6))


def test_gae_skips_masked_tokens_by_hand():
    values = torch.tensor([[9.0, 0.5, 0.6, 9.0, 0.7]])
    rewards = torch.tensor([[0.0, 0, 0, 0, 1]])
    mask = torch.tensor([[0, 1, 1, 0, 1]])
    adv, ret = alg.gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # t4: 1 - 0.7 = 0.3; t3 masked (carried); t2: 0.9*0.7 - 0.6 + 0.72*0.3 = 0.246;
    # t1: 0.9*0.6 - 0.5 + 0.72*0.246 = 0.21712; t0 masked.
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.21712, 0.246, 0.0, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, 0.71712, 0.846, 0.0, 1.0]]))


def test_gae_with_gamma_lambda_one_is_return_minus_value():
    values = torch.tensor([[0.2, 0.4, 0.0, 0.1]])
    adv, _ = alg.gae(torch.tensor([[0.0, 0, 0, 2]]), values, torch.tensor([[1, 1, 0, 1]]))
    torch.testing.assert_close(adv, torch.tensor([[1.8, 1.6, 0.0, 1.9]]))


def test_whiten():
    x = torch.tensor([[1.0, 2.0, 100.0, 3.0]])
    mask = torch.tensor([[1, 1, 0, 1]])
    w = alg.whiten(x, mask)
    sel = w[mask.bool()]
    assert w[0, 2] == 0 and abs(sel.mean()) < 1e-6 and abs(sel.std(unbiased=False) - 1) < 1e-5


@pytest.mark.parametrize("ratio, adv, expected", [
    (1.5, 1.0, -1.28),  # clipped at 1 + eps_high
    (1.5, -1.0, 1.5),  # pessimistic side keeps the unclipped value
    (0.5, 1.0, -0.5),
    (0.5, -1.0, 0.8),  # clipped at 1 - eps_low
    (1.1, 2.0, -2.2),  # inside the trust region
])
def test_clipped_policy_loss_by_hand(ratio, adv, expected):
    loss, _ = alg.clipped_policy_loss(torch.tensor([math.log(ratio)]), torch.tensor([0.0]),
                                      torch.tensor([adv]), eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_aggregation_by_hand_and_micro_batches_add_up():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    norm = alg.Normalizer(sequences=2, tokens=4, max_length=5)
    assert alg.aggregate(per_token, mask, "grpo", norm).item() == pytest.approx((2 + 4) / 2)
    assert alg.aggregate(per_token, mask, "dapo", norm).item() == pytest.approx(10 / 4)
    assert alg.aggregate(per_token, mask, "bnpo", norm).item() == pytest.approx(10 / 4)
    assert alg.aggregate(per_token, mask, "dr_grpo", norm).item() == pytest.approx(10 / (2 * 5))
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        whole = alg.aggregate(per_token, mask, loss_type, norm)
        parts = sum(alg.aggregate(per_token[i:i + 1], mask[i:i + 1], loss_type, norm) for i in range(2))
        assert parts.item() == pytest.approx(whole.item())
    with pytest.raises(ValueError):
        alg.aggregate(per_token, mask, "sum", norm)


def test_kl_estimates_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert alg.kl_estimate(logp, ref).item() == pytest.approx(0.5 - math.log(0.5) - 1)  # k3: r - log r - 1
    assert alg.kl_estimate(torch.tensor([0.3]), torch.tensor([0.3])).item() == 0
    assert alg.kl_estimate(logp, ref, "kl").item() == pytest.approx(math.log(2))  # k1: log pi - log ref
    assert alg.kl_estimate(ref, logp, "kl").item() == pytest.approx(-math.log(2))  # k1 can be negative, k3 not
    assert alg.kl_estimate(ref, logp).item() > 0
    assert alg.kl_estimate(logp, ref, "abs").item() == alg.kl_estimate(ref, logp, "abs").item() == \
        pytest.approx(math.log(2))  # verl's abs: |log pi - log ref|
    assert alg.kl_estimate(logp, ref, "mse").item() == pytest.approx(0.5 * math.log(2) ** 2)  # k2
    assert alg.kl_estimate(torch.tensor([-30.0]), torch.tensor([0.0])).item() == 10  # k3 clamped, as verl


def test_the_adaptive_kl_coefficient_by_hand():
    # verl's AdaptiveKLController: the error clipped to +-0.2, scaled by the batch over the horizon
    assert alg.adaptive_kl_coef(0.1, 0.5, 0.1, 10000, 256) == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    assert alg.adaptive_kl_coef(0.1, 0.09, 0.1, 100, 50) == pytest.approx(0.1 * (1 - 0.1 * 0.5))
    assert alg.adaptive_kl_coef(0.1, 0.0, 0.1, 100, 100) == pytest.approx(0.08)


def test_clipped_value_loss_by_hand():
    loss = alg.clipped_value_loss(torch.tensor([1.5]), torch.tensor([1.0]), torch.tensor([2.0]), clip=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.8 ** 2)  # the clipped prediction 1.2 is worse
    loss = alg.clipped_value_loss(torch.tensor([1.5]), torch.tensor([1.0]), torch.tensor([1.0]), clip=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.5 ** 2)


@pytest.mark.parametrize("ratio, adv, expected", [
    (10.0, -1.0, 3.0),   # -min(10 * -1, 1.28 * -1) = 10, capped at -3 * -1 = 3 (verl's clip_ratio_c)
    (2.0, -1.0, 2.0),    # below the cap: the ordinary clipped loss
    (10.0, 1.0, -1.28),  # positive advantages are never dual-clipped
])
def test_dual_clip_by_hand(ratio, adv, expected):
    logp = torch.tensor([[math.log(ratio)]])
    loss, _ = alg.clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), 0.2, 0.28, dual_clip=3.0)
    assert loss.item() == pytest.approx(expected)


def test_seq_mean_token_sum_by_hand():
    # Two sequences with 3 and 1 generated tokens: (1 + 2 + 3 + 4) / 2 sequences, whatever the lengths.
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    norm = alg.Normalizer(sequences=2, tokens=4, max_length=3)
    assert alg.aggregate(per_token, mask, "seq_sum", norm).item() == pytest.approx(5.0)
    assert alg.aggregate(per_token, mask, "grpo", norm).item() == pytest.approx((2.0 + 4.0) / 2)


@pytest.mark.parametrize("algorithm, advantage, loss_type, scale", [
    ("ppo", "gae", "dapo", "none"), ("dapo", "gae", "dapo", "none"),
    ("grpo", "group", "grpo", "group"), ("drgrpo", "group", "seq_sum", "none")])
def test_algorithm_defaults_follow_ragens_main_table(algorithm, advantage, loss_type, scale):
    from trainers import TrainerConfig

    cfg = TrainerConfig(algorithm=algorithm)
    assert (cfg.advantage, cfg.loss_type, cfg.scale_rewards) == (advantage, loss_type, scale)
    assert (cfg.epsilon, cfg.epsilon_high, cfg.dual_clip, cfg.beta, cfg.entropy_coef) == (0.2, 0.28, 3.0, 0.0, 0.001)
    assert (cfg.learning_rate, cfg.critic_lr, cfg.critic) == (1e-6, 1e-5, "separate")
    assert TrainerConfig(algorithm=algorithm, advantage="group").advantage == "group"  # each is an option


def test_the_total_loss_is_its_parts_composed():
    from trainers.config import TrainerConfig

    torch.manual_seed(0)
    shape = (2, 5)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.float)
    logp, old, ref = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    entropy, adv = torch.rand(shape), torch.randn(shape)
    values, old_values, returns = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    norm = alg.Normalizer(sequences=2, tokens=int(mask.sum()), max_length=5)
    cfg = TrainerConfig(algorithm="ppo", beta=0.1, entropy_coef=0.01)
    loss, parts = alg.total_loss(cfg, mask, norm, logp, entropy, old, adv, ref, values, old_values, returns)
    policy = alg.aggregate(alg.clipped_policy_loss(logp, old, adv, cfg.epsilon, cfg.epsilon_high, cfg.dual_clip)[0],
                           mask, cfg.loss_type, norm)
    kl = alg.aggregate(alg.kl_estimate(logp, ref), mask, cfg.loss_type, norm)
    ent = alg.aggregate(entropy, mask, cfg.loss_type, norm)
    value = alg.aggregate(alg.clipped_value_loss(values, old_values, returns, cfg.cliprange_value), mask, "dapo", norm)
    assert loss.item() == pytest.approx((policy + 0.1 * kl - 0.01 * ent + cfg.vf_coef * value).item(), rel=1e-6)
    assert parts["loss/kl"] == pytest.approx(kl.item()) and parts["loss/value"] == pytest.approx(value.item())
    no_critic, parts = alg.total_loss(TrainerConfig(), mask, norm, logp, entropy, old, adv)
    assert "loss/value" not in parts and "loss/kl" not in parts
    k1 = replace(cfg, kl_loss_type="kl")  # RAGEN's top-p and KL sweeps keep verl's plain estimate
    _, parts = alg.total_loss(k1, mask, norm, logp, entropy, old, adv, ref, values, old_values, returns)
    assert parts["loss/kl"] == pytest.approx(alg.aggregate(logp - ref, mask, cfg.loss_type, norm).item())


def test_greedy_sampling_scores_at_temperature_one_as_the_backends_do(tiny_model):
    from trainers.scoring import TokenScorer

    # a temperature of 1e-6 would turn the log-probs into near-one-hot ones the sampler never reported
    assert TokenScorer(tiny_model, None, 0.0).temperature == 1.0
    assert TokenScorer(tiny_model, None, 0.7).temperature == 0.7
