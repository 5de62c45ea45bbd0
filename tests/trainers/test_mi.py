import math

import numpy as np
import pytest

from ragen_envs.diagnose import MIZScoreEMA, cross_loglik, mi_metrics

# P = 2 prompts, G = 1 sample each; lengths 2 and 1 tokens.
L = np.array([[[-2.0, -4.0]], [[-3.0, -1.0]]])
N = np.array([[2], [1]])


def test_hand_computed_batch():
    m = mi_metrics(L, N)
    # matched per token: -2/2, -1/1; marginal: (logsumexp(row) - log 2) / |Z|
    marginal = [(-2 + math.log(1 + math.exp(-2)) - math.log(2)) / 2, -1 + math.log(1 + math.exp(-2)) - math.log(2)]
    assert m["mi_est"] == pytest.approx(-1 - np.mean(marginal))
    assert m["mi_est"] == pytest.approx(0.4246643771)
    assert m["mi_seq_est"] == pytest.approx(0.5662191695)
    assert m["conditional_entropy"] == pytest.approx(1.0)
    assert m["reasoning_entropy"] == pytest.approx(-np.mean(marginal))
    assert m["retrieval_acc"] == 1.0 and m["retrieval_chance"] == 0.5
    assert m["mi_zscore"] == pytest.approx(2.9789554602)


def test_identity_is_exact():
    rng = np.random.default_rng(0)
    loglik = rng.normal(-40, 5, size=(6, 4, 6))
    lengths = rng.integers(1, 30, size=(6, 4))
    m = mi_metrics(loglik, lengths)
    assert m["reasoning_entropy"] == pytest.approx(m["mi_est"] + m["conditional_entropy"], abs=1e-12)
    assert m["mi_seq_est"] <= math.log(6) + 1e-12


def test_template_collapse_scores_chance_and_zero_mi_with_high_entropy():
    # Z independent of X: every prompt gives each reasoning the same likelihood.
    rng = np.random.default_rng(1)
    P, G = 8, 4
    per_reasoning = rng.normal(-60, 3, size=(P, G, 1))
    loglik = np.repeat(per_reasoning, P, axis=2)
    m = mi_metrics(loglik, np.full((P, G), 20))
    assert m["retrieval_acc"] == pytest.approx(1 / P)  # ties broken uniformly: exactly chance
    assert m["recall_at_2"] == pytest.approx(2 / P) and m["recall_at_8"] == pytest.approx(1.0)
    assert m["mi_est"] == pytest.approx(0.0, abs=1e-12) and m["mi_zscore"] == pytest.approx(0.0, abs=1e-9)
    assert m["conditional_entropy"] > 2.5  # entropy looks healthy


def test_noisy_independence_is_near_chance():
    rng = np.random.default_rng(2)
    P, G = 8, 64
    m = mi_metrics(rng.normal(-50, 1, size=(P, G, P)), np.full((P, G), 10))
    assert abs(m["retrieval_acc"] - 1 / P) < 0.05
    assert abs(m["mi_est"]) < 0.05


def test_input_determined_reasoning():
    P, G = 8, 2
    loglik = np.full((P, G, P), -100.0)
    for i in range(P):
        loglik[i, :, i] = -1.0
    m = mi_metrics(loglik, np.ones((P, G)))
    assert m["retrieval_acc"] == 1.0
    assert m["mi_seq_est"] == pytest.approx(math.log(P), abs=1e-6)  # the upper bound


def test_ties_count_fractionally():
    # Row (0,0): one column strictly above the own one, one tied with it, two below.
    loglik = np.zeros((4, 1, 4))
    loglik[0, 0] = [-2.0, -1.0, -2.0, -3.0]
    for i in range(1, 4):
        loglik[i, 0, i] = 5.0  # other rows: clear hits
    m = mi_metrics(loglik, np.ones((4, 1)))
    assert m["retrieval_acc"] == pytest.approx((0 + 3) / 4)  # (1 - 1) / 2 = 0
    assert m["recall_at_2"] == pytest.approx((0.5 + 3) / 4)  # (2 - 1) / 2
    assert m["recall_at_4"] == pytest.approx(1.0)


def test_empty_reasoning_is_left_out():
    lengths = np.array([[2, 0], [1, 0]])
    loglik = np.concatenate([L, np.full((2, 1, 2), 123.0)], axis=1)  # junk where length is 0
    assert mi_metrics(loglik, lengths) == pytest.approx(mi_metrics(L, N))
    with pytest.raises(ValueError):
        mi_metrics(L, np.zeros((2, 1)))


def test_ema_variant():
    ema = MIZScoreEMA(decay=0.9, eps=1e-3)
    first = ema.update(L, N)
    assert first == pytest.approx(mi_metrics(L, N)["mi_zscore"])
    sigma1 = ema.sigma
    loglik2 = L * 2
    ema.update(loglik2, N)
    marginal2 = (np.array([np.logaddexp(-4, -8), np.logaddexp(-6, -2)]) - math.log(2)) / np.array([2, 1])
    assert ema.sigma == pytest.approx(0.9 * sigma1 + 0.1 * marginal2.std())


class CountingPolicy:
    """Scores a continuation as -(sum of its ids) / 100 - (sum of the prompt ids) / 1000."""

    def __init__(self):
        self.calls = []

    def score(self, prompt, conts):
        self.calls.append(tuple(prompt))
        return [np.array([-(t / 100) - sum(prompt) / 1000 / max(len(c), 1) for t in c]) for c in conts]

    def reset_cache(self):
        pass


def test_cross_loglik_merges_identical_prompts():
    policy = CountingPolicy()
    prompts = [[1, 2], [3], [1, 2]]
    reasonings = [[[5], [6, 7]], [[8], [9]], [[10], [11]]]
    loglik, lengths = cross_loglik(policy, prompts, reasonings)
    assert len(policy.calls) == 2  # one pass per distinct prompt
    assert loglik.shape == (2, 4, 2) and lengths.tolist() == [[1, 2, 1, 1], [1, 1, 0, 0]]
    assert loglik[0, 1, 1] == pytest.approx(-0.13 - 0.003)


def test_cross_scoring_on_a_tiny_model_equals_teacher_forcing(tiny_policy):
    import torch

    prompts = [tiny_policy.encode_chat([{"role": "user", "content": f"state {i}"}]) for i in range(3)]
    rng = np.random.default_rng(0)
    reasonings = [[rng.integers(50, 4000, size=n).tolist() for n in (3, 5)] for _ in range(3)]
    loglik, lengths = cross_loglik(tiny_policy, prompts, reasonings)
    for i in range(3):
        for k in range(2):
            for j in range(3):
                z = reasonings[i][k]
                ids = torch.tensor([prompts[j] + z])
                with torch.no_grad():
                    logp = torch.log_softmax(tiny_policy.model(ids).logits[0, len(prompts[j]) - 1:-1], -1)
                direct = logp.gather(-1, torch.tensor(z)[:, None]).sum().item()
                assert loglik[i, k, j] == pytest.approx(direct, abs=1e-3)
    assert lengths.tolist() == [[3, 5]] * 3


def test_the_released_codes_variant_by_hand():
    from ragen_envs.diagnose import mi_metrics_code

    m = mi_metrics_code(L, N)
    # per token first: row 0 -> (-1, -2), row 1 -> (-3, -1); matched -1 and -1
    marginal = [-1 + math.log(1 + math.exp(-1)) - math.log(2), -1 + math.log(1 + math.exp(-2)) - math.log(2)]
    assert m["mi_est"] == pytest.approx(-1 - np.mean(marginal))
    assert m["mi_est"] == pytest.approx(0.4730520, abs=1e-6)  # the paper's formula gives 0.4247 here
    assert m["conditional_entropy"] == pytest.approx(1.0)
    assert m["reasoning_entropy"] == pytest.approx(m["mi_est"] + m["conditional_entropy"])
    assert m["marginal_std"] == pytest.approx(np.std(marginal))


def test_the_two_families_part_when_lengths_vary():
    from ragen_envs.diagnose import mi_metrics_code

    # Every token is 0.5 nats likelier under its own prompt (of 4): per token, the code's form gives
    # log 4 - log(1 + 3 e^-0.5) = 0.3497 whatever the length; the paper's log-mean-exp of whole-sequence
    # sums saturates at (log 4) / |Z| for long reasonings (here 50 to 150 tokens).
    rng = np.random.default_rng(3)
    P, G = 4, 8
    lengths = rng.integers(50, 150, size=(P, G))
    per_token = np.full((P, G, P), -2.0)
    per_token[np.arange(P), :, np.arange(P)] += 0.5
    loglik = per_token * lengths[..., None]
    paper, code = mi_metrics(loglik, lengths)["mi_est"], mi_metrics_code(loglik, lengths)["mi_est"]
    assert code == pytest.approx(math.log(4) - math.log(1 + 3 * math.exp(-0.5)))
    assert code > 5 * paper > 0 and paper == pytest.approx(np.mean(math.log(4) / lengths), rel=1e-3)


def test_chance_at_each_k_and_the_sequence_level_forms():
    m = mi_metrics(L, N)
    assert m["retrieval_above_chance"] == pytest.approx(0.5)
    assert m["recall_chance_at_2"] == m["recall_chance_at_8"] == 1.0  # P = 2
    assert m["conditional_entropy_seq"] == pytest.approx(1.5)  # -(-2 - 1) / 2
    assert m["marginal_std_seq"] >= 0 and "mi_zscore_seq" in m


def test_cross_loglik_scores_a_repeated_reasoning_once():
    policy = CountingPolicy()
    scored = []
    original = policy.score
    policy.score = lambda prompt, conts: scored.append(len(conts)) or original(prompt, conts)
    prompts = [[1, 2], [3], [4]]
    reasonings = [[[5], [6, 7]], [[5], [9]], [[6, 7], [5]]]  # drawn with replacement: repeats
    loglik, lengths = cross_loglik(policy, prompts, reasonings)
    assert scored == [3, 3, 3]  # 6 entries, 3 distinct reasonings, one pass per prompt
    expected, _ = cross_loglik(CountingPolicy(), prompts, reasonings)
    assert loglik[0, 0, 2] == loglik[1, 0, 2] == loglik[2, 1, 2]  # the same reasoning, the same score
    np.testing.assert_allclose(loglik, expected)


def _traj(group, reasonings):
    from types import SimpleNamespace

    turns = [SimpleNamespace(reasoning_ids=z, prompt_ids=[group, k], reasoning_prompt_ids=[group, k, 0])
             for k, z in enumerate(reasonings)]
    return SimpleNamespace(group=group, turns=turns)


def test_which_pairs_each_scope_scores():
    import random

    from ragen_envs.diagnose import mi

    trajs = [_traj(0, [[1], [2]]), _traj(0, [[]]), _traj(1, [[3, 3]]), _traj(2, [])]
    assert mi.reasoning_stats(trajs) == {"valid_thinking_rate": 0.75, "reasoning_tokens": 4 / 3,
                                         "empty_reasoning_rate": 1 / 3}
    by_group = mi.first_turn_pairs(trajs, 0, random.Random(0))  # first turns with reasoning, by group
    assert {g: [t.reasoning_ids for t in turns] for g, turns in by_group.items()} == {0: [[1]], 1: [[3, 3]]}
    assert sum(map(len, mi.first_turn_pairs(trajs, 1, random.Random(0)).values())) == 1  # at most `limit`
    pairs = mi.trajectory_pairs(trajs, 50, random.Random(0))
    # at most as many draws as turns with reasoning (3); a drawn trajectory without reasoning wastes its draw
    assert 1 <= len(pairs) <= 3 and all(z in ([1], [2], [3, 3]) for _, z in pairs)
    assert all(prompt[-1] == 0 for prompt, _ in pairs)  # the prompt up to the reasoning
