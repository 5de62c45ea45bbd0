"""The trainer end to end on a tiny model and real envs."""

import json

import numpy as np
import pytest
import torch

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
from ragen_envs.agent.backends.base import Generation, Policy
from ragen_envs.agent.trajectory import Trajectory, Turn
from ragen_envs.diagnose.filtering import select_trajectories
from trainers import Trainer, TrainerConfig
from trainers import algorithms as alg
from trainers.batch import Layout, OldPass, collate, minibatches, trajectory_samples, update_steps
from trainers.metrics import METRICS

from tests.numerics import assert_same_gradients, record_gradients
from conftest import DEFAULT, SMOKE, SMOKE_KWARGS

REPLIES = ["<think>the goal is right</think><answer>Right</answer>",
           "<think>maybe down then left</think><answer>Down || Left</answer>",
           "<think>up</think><answer>Up || Up</answer>",
           "I am not sure."]


class SeededReplies(Policy):
    """Rollout policy for tests: reply (seed + index) mod 4 of REPLIES, so samples of one group differ
    and a resumed run replays the same rollouts."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.max_context = 4096

    def generate(self, prompts, sampling):
        out = []
        for i, prompt in enumerate(prompts):
            text = REPLIES[(sampling.seed + i) % len(REPLIES)]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(text, self.prompt_ids(prompt), ids, [-1.0] * len(ids), "stop"))
        return out

    def score(self, prompt_ids, continuations):
        raise NotImplementedError


def make_model(tokenizer, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=4096, tie_word_embeddings=True))


def config(tmp_path, n_groups=3, group_size=4, max_new_tokens=24, env_kwargs=None, **kw):
    rollout = RolloutConfig(n_groups=n_groups, group_size=group_size, chat=ChatEnvConfig(max_turns=2),
                            sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                            env_kwargs=dict(SMOKE_KWARGS) if env_kwargs is None else env_kwargs)
    # plot=False: drawing metrics.png takes longer than an iteration here; one test draws it
    base = dict(num_iterations=1, learning_rate=1e-2, output_dir=str(tmp_path / "run"), mixed_precision="no",
                micro_batch_size=4, rollout=rollout, plot=False)
    base.update(kw)
    return TrainerConfig(**base)


EXPECTED_KEYS = {
    "rollout/success", "rollout/return_mean", "rollout/format_valid", "rollout/turns", "rollout/response_length",
    "policy/token_entropy", "mi/retrieval_acc", "mi/retrieval_chance", "mi/recall_at_2", "mi/mi_est",
    "mi/mi_seq_est", "mi/mi_zscore", "mi/mi_zscore_ema", "mi/conditional_entropy", "mi/reasoning_entropy",
    "mi/empty_reasoning_rate", "mi_traj/retrieval_acc", "mi_code/mi_est", "mi_code/mi_zscore_ema",
    "mi_traj_code/mi_est", "mi/valid_thinking_rate", "mi/reasoning_tokens", "mi/recall_above_chance_at_2",
    "filter/kept_groups", "filter/kept_ratio", "filter/zero_variance_groups", "filter/rv_mean", "filter/rv_std",
    "filter/rv_std_over_mean",
    "filter/in_group_reward_std", "loss/policy", "loss/entropy", "loss/grad_norm", "loss/clip_frac",
    "time/rollout_s", "time/mi_s", "time/mi_share", "time/update_s",
}


@pytest.mark.parametrize("algorithm", ["ppo", "grpo", "dapo", "drgrpo"])
def test_one_iteration_changes_the_weights_and_logs_every_metric(algorithm, tokenizer, tmp_path):
    model = make_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = config(tmp_path, algorithm=algorithm, filter="top_p", plot=algorithm == "grpo")
    trainer = Trainer(model, SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    metrics = trainer.train()[0]
    assert EXPECTED_KEYS <= metrics.keys(), EXPECTED_KEYS - metrics.keys()
    # KL is off by default, as in RAGEN's runs; validation too (its own test below)
    documented = {m.key for m in METRICS if m.key != "loss/kl" and not m.key.startswith("val/")}
    assert documented <= metrics.keys(), documented - metrics.keys()  # docs/training.md explains real names
    assert metrics["filter/kept_groups"] >= 1 and metrics["filter/skipped"] == 0
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed
    # RAGEN's main-table settings: PPO and DAPO learn a critic (GAE), GRPO and Dr. GRPO do not; KL off.
    assert ("loss/value" in metrics) == (algorithm in ("ppo", "dapo"))
    assert trainer.config.beta == 0 and trainer.config.epsilon_high == 0.28 and "loss/kl" not in metrics
    assert (trainer.critic_trunk is not None) == (algorithm in ("ppo", "dapo"))
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["iteration"] == 1
    assert (run / "metrics.csv").read_text().startswith("iteration,")
    assert (run / "checkpoint-1" / "trainer_state.json").is_file()
    assert (run / "metrics.png").is_file() == (trainer.plot_path is not None) == (algorithm == "grpo")


def test_skipped_batch_leaves_weights_alone(tokenizer, tmp_path):
    model = make_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # The tiny model's own replies are never valid: every return is the same, the total RV is 0.
    metrics = Trainer(model, SMOKE, config(tmp_path, filter="top_p", max_new_tokens=6),
                      tokenizer=tokenizer).train()[0]
    assert metrics["filter/skipped"] == 1 and metrics["filter/kept_groups"] == 0
    assert "loss/policy" not in metrics
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_only_kept_groups_are_trained(tokenizer, tmp_path, monkeypatch):
    trainer = Trainer(make_model(tokenizer), SMOKE,
                      config(tmp_path, filter="top_k", filter_value=0.33), tokenizer=tokenizer,
                      rollout_policy=SeededReplies(tokenizer))
    seen = []
    original = trainer._update
    monkeypatch.setattr(trainer, "_update", lambda layout, stats, chosen, advantages: seen.append(
        {layout.samples[i].group for i in chosen}) or original(layout, stats, chosen, advantages))
    metrics = trainer.train()[0]
    assert metrics["filter/kept_groups"] == 1 and len(seen) == 1 and len(seen[0]) == 1


def test_own_rollouts_with_an_entropy_bonus_update_the_model(tokenizer, tmp_path):
    model = make_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = config(tmp_path, entropy_coef=0.1, max_new_tokens=8, env_kwargs={}, n_groups=2, group_size=2)
    metrics = Trainer(model, DEFAULT, cfg, tokenizer=tokenizer).train()[0]
    assert metrics["mi/empty_reasoning_rate"] == 1.0  # a random model writes no <think> blocks
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(tokenizer, tmp_path):
    def run(directory, iterations, resume=None):
        cfg = config(directory, algorithm="ppo", num_iterations=iterations, save_steps=1,
                     resume_from_checkpoint=resume, filter="top_p", beta=0.01)
        return Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                       rollout_policy=SeededReplies(tokenizer)).train()

    def strip(records):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]

    # The same computation twice (the checkpoint holds the exact weights, optimizer state, seeds and
    # EMAs), so the second iteration's metrics agree to rounding.
    full = run(tmp_path / "a", 2)
    run(tmp_path / "b", 1)
    resumed = run(tmp_path / "b", 2, resume="latest")
    assert len(resumed) == 1
    for a, b in zip(strip(full[1:]), strip(resumed)):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    lines = (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]


def test_validation_plays_held_out_episodes_and_leaves_the_run_as_it_was(tokenizer, tmp_path):
    class Recorded(SeededReplies):
        def generate(self, prompts, sampling):
            self.calls.append((len(prompts), sampling.temperature))
            return super().generate(prompts, sampling)

    runs, policies = {}, {}
    for steps in (0, 2):
        policies[steps] = policy = Recorded(tokenizer)
        policy.calls = []
        cfg = config(tmp_path / str(steps), num_iterations=3, eval_steps=steps, eval_episodes=5, eval_temperature=0.7,
                     plot=steps > 0)
        runs[steps] = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=policy).train()
    plain, validated = runs[0], runs[2]
    # before the first iteration, every eval_steps-th and the last
    assert [h["iteration"] for h in validated] == [0, 1, 2, 3]
    assert ["val/success" in h for h in validated] == [True, False, True, True]
    assert set(validated[0]) == {"iteration", "val/success", "val/random_success", "val/format_valid", "val/episodes",
                                 "time/eval_s"}
    assert validated[2]["val/episodes"] == 5 and 0 <= validated[2]["val/random_success"] <= 1
    # its episodes (one a seed) at eval_temperature; the training rollouts (12 a turn) at theirs
    assert {t for n, t in policies[2].calls if n <= 5} == {0.7} and {t for n, t in policies[0].calls} == {1.0}
    # it takes nothing from the run: the same rollouts and updates as without it
    for a, b in zip(plain, validated[1:]):
        for key in a:
            if not key.startswith("time/"):
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
    lines = (tmp_path / "2" / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [0, 1, 2, 3]
    assert (tmp_path / "2" / "run" / "metrics.png").stat().st_size > 0
    # held-out means never trained on: 3 groups x 3 iterations from seed 0 reach seed 5; a mix validates
    # eval_episodes per env, one env after another
    from dataclasses import replace

    from trainers.base import check_held_out

    mixed = config(tmp_path / "m", eval_steps=1, eval_seed=0, eval_episodes=4)
    mixed = replace(mixed, rollout=replace(mixed.rollout, seed=6))
    check_held_out(mixed, groups=2, envs=1, world=1)  # validation 0-3, training 6-7
    with pytest.raises(ValueError, match="validation env seeds 0-7 .* overlap the training seeds 6-7"):
        check_held_out(mixed, groups=2, envs=2, world=1)
    with pytest.raises(ValueError, match="validation env seeds 5-9 .* overlap the training seeds 0-8"):
        Trainer(make_model(tokenizer), SMOKE, config(tmp_path / "x", num_iterations=3, eval_steps=1, eval_seed=5,
                                                     eval_episodes=5), tokenizer=tokenizer)
    Trainer(make_model(tokenizer), SMOKE, config(tmp_path / "y", num_iterations=3, eval_steps=1, eval_seed=9),
            tokenizer=tokenizer)


def test_sequences_mask_only_generated_tokens():
    turns = [Turn(prompt_ids=[1, 2, 3], response_ids=[10, 11], logprobs=[0, 0], response="", reasoning=None,
                  actions=[], reward=0, format_ok=False, finish_reason="stop"),
             Turn(prompt_ids=[1, 2, 3, 10, 11, 4, 5], response_ids=[12], logprobs=[0], response="",
                  reasoning=None, actions=[], reward=0, format_ok=False, finish_reason="stop"),
             Turn(prompt_ids=[1, 7], response_ids=[13, 14], logprobs=[0, 0], response="", reasoning=None,
                  actions=[], reward=0, format_ok=False, finish_reason="stop", messages_dropped=2)]
    traj = Trajectory("x", group=0, seed=0, messages=[], turns=turns, episode_return=2.5)
    samples = trajectory_samples(traj, 0)
    assert [s.ids for s in samples] == [[1, 2, 3, 10, 11, 4, 5, 12], [1, 7, 13, 14]]
    assert samples[0].generated == [0, 0, 0, 1, 1, 0, 0, 1] and samples[1].generated == [0, 0, 1, 1]
    batch = collate(samples, pad_id=0)
    assert batch.mask.tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 1, 1, 0, 0, 0, 0]]
    assert batch.rewards.tolist()[0] == [0] * 7  # the reward goes on the last segment only
    assert batch.rewards.tolist()[1] == [0, 0, 2.5, 0, 0, 0, 0]


@pytest.mark.parametrize("kwargs", [{"algorithm": "a2c"}, {"filter": "top"}, {"filter_value": 0},
                                    {"rollout": RolloutConfig(group_size=1)}, {"loss_type": "sum"},
                                    {"mixed_precision": "fp8"}])
def test_bad_config_values(kwargs):
    with pytest.raises(ValueError):
        TrainerConfig(**kwargs)


def _turn(prompt, response):
    return Turn(prompt_ids=prompt, response_ids=response, logprobs=[0] * len(response), response="",
                reasoning=None, actions=[], reward=0, format_ok=True, finish_reason="stop")


def test_group_advantages_are_per_trajectory_across_segments():
    split = Trajectory("x", 0, 0, [], [_turn([1, 2], [3]), _turn([9], [4, 5])], episode_return=1.0)  # 2 segments
    trajs = [split, Trajectory("x", 0, 0, [], [_turn([1, 2], [6])], episode_return=3.0),
             Trajectory("x", 1, 1, [], [_turn([7], [8])], episode_return=2.0),
             Trajectory("x", 1, 1, [], [_turn([7], [8, 8])], episode_return=2.0)]
    samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, i)]
    assert len(samples) == 5
    layout = Layout.of(samples, size=4, pad_id=0)
    adv = alg.advantages(layout, list(range(5)), "group")
    expected = [-2 ** -0.5, -2 ** -0.5, 2 ** -0.5, 0.0, 0.0]  # group 0: (1, 3) -> -/+ 1/sqrt(2); group 1 equal
    for i, value in enumerate(expected):
        mask = layout.mask(i).bool()
        values = adv[i][0][mask]
        assert len(values) >= 1 and torch.allclose(values, torch.tensor(value), atol=1e-5)
        assert (adv[i][0][~mask] == 0).all()


def test_the_in_reward_kl_comes_off_the_token_rewards_or_the_group_returns():
    trajs = [Trajectory("x", 0, 0, [], [_turn([1, 2], [3, 4])], episode_return=1.0),
             Trajectory("x", 0, 0, [], [_turn([1, 2], [6, 7])], episode_return=1.0)]
    layout = Layout.of([s for i, t in enumerate(trajs) for s in trajectory_samples(t, i)], size=2, pad_id=0)
    penalty = {i: 0.25 * layout.mask(i) for i in range(2)}
    penalty[1] = penalty[1] * 3  # the second sample strays three times as far from the reference
    group = alg.advantages(layout, [0, 1], "group", penalty=penalty)  # returns 1 - 0.5 and 1 - 1.5
    first = [float(group[i].advantages[layout.mask(i).bool()][0]) for i in range(2)]
    assert first[0] > 0 > first[1]
    assert alg.advantages(layout, [0, 1], "group")[0].advantages.abs().sum() == 0  # equal returns without it
    values = [OldPass(logp=None, entropy=None, values=torch.zeros_like(layout.batches[0].mask, dtype=torch.float))]
    gae = alg.advantages(layout, [0, 1], "gae", values, penalty=penalty)
    plain = alg.advantages(layout, [0, 1], "gae", values)
    for i, taken in ((0, 0.25), (1, 0.75)):  # V = 0, gamma = lambda = 1: a token's return is what is left after it
        mask = layout.mask(i).bool()
        assert torch.allclose(gae[i].returns[mask], plain[i].returns[mask] - taken * torch.tensor([2.0, 1.0]))


def test_the_run_stops_after_iterations_in_a_row_that_keep_nothing(tokenizer, tmp_path, capsys):
    # The tiny model's own replies are never valid: every group's returns are equal, nothing is kept.
    cfg = config(tmp_path, filter="top_p", num_iterations=5, filter_empty_stop=2, max_new_tokens=6, eval_steps=4,
                 eval_episodes=2)
    history = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer).train()
    assert [m["filter/empty_streak"] for m in history[1:]] == [1.0, 2.0]
    assert "stopping early" in capsys.readouterr().out
    # validated at the start and where the run stopped (its last iteration, though no multiple of eval_steps)
    assert ["val/success" in m for m in history] == [True, False, True]


@pytest.mark.parametrize("metric", ["entropy", "entropy_std", "length", "mean"])
def test_the_filter_ranks_by_other_scores(metric, tokenizer, tmp_path):
    cfg = config(tmp_path, filter="top_k", filter_value=0.34, filter_metric=metric)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                      rollout_policy=SeededReplies(tokenizer))
    metrics = trainer.train()[0]
    assert metrics["filter/kept_groups"] == 1  # int(0.34 * 3)


def test_the_trajectory_level_filter_trains_on_its_kept_trajectories(tokenizer, tmp_path):
    cfg = config(tmp_path, filter="top_k", filter_value=0.5, filter_level="trajectory", include_zero=False)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    metrics: dict = {}
    batch = trainer._prepare(trainer.runner.collect(), metrics)
    keep = select_trajectories(batch.returns, "top_k", 0.5, include_zero=False)
    assert keep.sum() > 0 and not keep.all(axis=1).any()  # some kept, none of a group whole (G = 4, k = 2)
    trained = {batch.layout.samples[i].trajectory for i in batch.chosen}
    assert trained == set(np.flatnonzero(keep.reshape(-1)).tolist())
    assert batch.kept.tolist() == np.flatnonzero(keep.any(axis=1)).tolist()
    assert metrics["filter/kept_trajectory_ratio"] == keep.mean()


def test_the_trajectory_level_filter_needs_a_spread_metric(tmp_path):
    with pytest.raises(ValueError, match="std or variance"):
        config(tmp_path, filter="top_p", filter_level="trajectory", filter_metric="mean")


def test_mi_follows_ragens_schedule(tokenizer, tmp_path):
    trainer = Trainer(make_model(tokenizer), SMOKE, config(tmp_path, mi_every=5),
                      tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    due = []
    for iteration in range(12):
        trainer.iteration = iteration
        due.append(trainer.mi_due())
    assert [i + 1 for i, d in enumerate(due) if d] == [1, 5, 10]  # the first, then every 5th


def test_a_fixed_minibatch_means_fewer_steps_when_fewer_groups_are_kept(tokenizer, tmp_path):
    # 3 groups x 4 samples, 4 sequences per step: keeping 3, 2 or 1 groups takes 3, 2 or 1 steps.
    updates = []
    for value in (1.0, 0.67, 0.34):
        cfg = config(tmp_path / str(value), filter="top_k", filter_value=value, mini_batch_size=4,
                     filter_metric="mean")
        trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                          rollout_policy=SeededReplies(tokenizer))
        updates.append(trainer.train()[0]["loss/updates"])
    assert updates == [3.0, 2.0, 1.0]


def test_a_kept_batch_is_padded_with_copies_or_trimmed():
    chunks = minibatches([10, 11, 12, 13, 14], 4, 1, "copy", torch.Generator().manual_seed(0))
    flat = np.concatenate(chunks).tolist()
    assert [len(c) for c in chunks] == [4, 4] and flat[:5] == [10, 11, 12, 13, 14]
    assert set(flat[5:]) <= {10, 11, 12, 13, 14} and len(set(flat[5:])) == 3  # copies, none twice
    assert update_steps(5, 4, 1, "copy") == 2 and update_steps(5, 4, 1, "delete") == 1
    assert [c.tolist() for c in minibatches([10, 11, 12, 13, 14], 4, 1, "delete", torch.Generator())] == \
        [[10, 11, 12, 13]]
    assert [len(c) for c in minibatches([1, 2, 3, 4, 5], None, 2, "copy", torch.Generator())] == [3, 2]
    assert update_steps(5, None, 2, "copy") == 2


@pytest.mark.parametrize("backprop", [False, True])
def test_a_shared_critic_trains_the_trunk_only_when_asked(backprop, tokenizer, tmp_path):
    model = make_model(tokenizer)
    cfg = config(tmp_path, algorithm="ppo", critic="shared", critic_backprop=backprop)
    trainer = Trainer(model, SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    assert trainer.critic_trunk is None
    batch = collate(trajectory_samples(trainer.runner.collect()[0], 0)[:1], tokenizer.pad_token_id)
    logp, entropy, values = trainer._token_outputs(trainer.scorer, batch)
    values.sum().backward()
    trunk_grad = [p.grad for p in model.base_model.parameters() if p.grad is not None]
    assert bool(trunk_grad) == backprop  # detached unless critic_backprop


def test_gae_carries_a_later_segments_reward_and_values_back():
    # One trajectory cut by the context cap into 2 segments: generated tokens [3] and then [4, 5].
    split = Trajectory("x", 0, 0, [], [_turn([1, 2], [3]), _turn([9], [4, 5])], episode_return=1.0)
    layout = Layout.of(trajectory_samples(split, 0), size=2, pad_id=0)
    mask = layout.batches[0].mask
    values = torch.zeros_like(mask, dtype=torch.float)
    values[mask.bool()] = torch.tensor([0.5, 0.25, 0.75])  # V at tokens 3, 4, 5 (generation order)
    adv = alg.advantages(layout, [0, 1], "gae", [OldPass(logp=None, entropy=None, values=values)], gamma=1.0, lam=1.0)
    returns = torch.cat([adv[0][1][mask[0].bool()], adv[1][1][mask[1].bool()]])
    # gamma = lambda = 1: every token's return is the episode's 1.0, the first segment's included
    # (cut off, it would have returned 0).
    assert torch.allclose(returns, torch.ones(3))


class SeededRepliesWithEntropy(SeededReplies):
    """SeededReplies that also reports per-token sampling entropies, as the transformers backend does."""

    def generate(self, prompts, sampling):
        gens = super().generate(prompts, sampling)
        for gen in gens:
            gen.entropies = [0.5] * len(gen.token_ids)
        return gens


def _trained(tokenizer, tmp_path, force_pass, **kw):
    """One iteration; returns its metrics, how many no-grad passes ran, and each step's gradients."""
    trainer = Trainer(make_model(tokenizer), SMOKE,
                      config(tmp_path / str(force_pass), filter="none", mini_batch_size=64, **kw),
                      tokenizer=tokenizer, rollout_policy=SeededRepliesWithEntropy(tokenizer))
    passes = []
    original = trainer._old_stats
    trainer._old_stats = lambda batch: passes.append(1) or original(batch)
    if force_pass:
        trainer._needs_old_pass = lambda kept: True
    gradients = record_gradients(trainer.optimizer)
    metrics = trainer.train()[0]
    return metrics, len(passes), gradients


def test_an_on_policy_update_skips_the_no_grad_pass_and_trains_the_same(tokenizer, tmp_path):
    skipped, passes, skipped_grads = _trained(tokenizer, tmp_path, force_pass=False)
    assert passes == 0 and skipped["loss/updates"] == 1 and skipped["policy/token_entropy"] == 0.5
    computed, passes, computed_grads = _trained(tokenizer, tmp_path, force_pass=True)
    assert passes > 0
    # The same step: the old log-probs are the current ones either way, so the ratio is 1 (up to
    # rounding) and nothing is clipped. Compared as gradients, not as weights after AdamW (numerics.py).
    assert_same_gradients(skipped_grads, computed_grads)
    assert skipped["loss/clip_frac"] == computed["loss/clip_frac"] == 0
    assert abs(skipped["loss/approx_kl"]) < 1e-6 and abs(computed["loss/approx_kl"]) < 1e-6
    # two epochs are off-policy in the second: the pass is needed
    assert _trained(tokenizer, tmp_path / "epochs", force_pass=False, ppo_epochs=2)[1] > 0


class SomeBoardsAlike(SeededReplies):
    """SeededReplies, except that prompts of an even token sum all get one reply: a whole group of them
    plays alike, so its advantages are 0."""

    def generate(self, prompts, sampling):
        gens = super().generate(prompts, sampling)
        for gen in gens:
            if sum(gen.prompt_ids) % 2 == 0:
                ids = self.tokenizer(REPLIES[0], add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                gen.text, gen.token_ids, gen.logprobs = REPLIES[0], ids, [-1.0] * len(ids)
        return gens


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_samples_with_zero_advantage_skip_the_passes_only_where_their_gradient_is_zero(entropy_coef, tokenizer,
                                                                                       tmp_path):
    def trained(skip):
        trainer = Trainer(make_model(tokenizer), SMOKE,
                          config(tmp_path / str(skip), n_groups=6, filter="none", mini_batch_size=64,
                                 micro_batch_size=1, entropy_coef=entropy_coef),
                          tokenizer=tokenizer, rollout_policy=SomeBoardsAlike(tokenizer))
        if not skip:
            trainer._task_term_only = lambda terms: False
        rows, original = [], trainer._micro_loss
        trainer._micro_loss = lambda indices, *a, **k: rows.append(len(indices)) or original(indices, *a, **k)
        gradients = record_gradients(trainer.optimizer)
        metrics = trainer.train()[0]
        return len(rows), gradients, metrics

    ran, gradients, metrics = trained(skip=True)
    everything, all_gradients, _ = trained(skip=False)
    assert 0 < metrics["filter/in_group_reward_std"]  # some groups differ ...
    if entropy_coef:  # the entropy bonus has a gradient on every sample
        assert ran == everything
    else:
        assert 0 < ran < everything  # ... and some do not: theirs are left out
    assert_same_gradients(gradients, all_gradients)


def test_frozen_bottom_layers_stay_as_they_were(tokenizer, tmp_path):
    model = make_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    Trainer(model, SMOKE, config(tmp_path, filter="none", freeze_layers=1), tokenizer=tokenizer,
            rollout_policy=SeededReplies(tokenizer)).train()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("model.layers.1.") or k == "model.norm.weight" for k in changed), changed
    with pytest.raises(ValueError, match="2 decoder layers"):
        Trainer(make_model(tokenizer), SMOKE, config(tmp_path / "x", freeze_layers=3),
                tokenizer=tokenizer)


def test_the_critics_values_stay_fp32_under_bf16_autocast(tokenizer, tmp_path):
    # A CPU with native bf16 (or a GPU) takes bf16 by default; the value head's output came back bf16
    # and could not be written into the fp32 values.
    model = make_model(tokenizer)
    cfg = config(tmp_path, algorithm="ppo", critic="shared", mixed_precision="bf16")
    trainer = Trainer(model, SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    batch = collate(trajectory_samples(trainer.runner.collect()[0], 0)[:1], tokenizer.pad_token_id)
    logp, entropy, values = trainer._token_outputs(trainer.scorer, batch)
    assert values.dtype == torch.float32 and torch.isfinite(values).all()


def test_the_bar_moves_inside_long_phases(tokenizer, tmp_path, monkeypatch):
    # the update's minibatches, the no-grad pass's micro-batches and MI's prompt columns are each shown
    # as done/total with an estimate of the time left (a bar once stood at phase=update for 16 minutes)
    shown = []

    def bar(total, unit, desc=None):
        update = lambda iteration, **postfix: shown.append(postfix)  # noqa: E731
        update.print = print
        return update

    monkeypatch.setattr("trainers.run.progress.bar", bar)
    monkeypatch.setattr("trainers.run.PROGRESS_EVERY_S", 0)  # every step shown (the tiny model's are fast)
    cfg = config(tmp_path, filter="top_p", mini_batch_size=4, ppo_epochs=2, filter_metric="entropy",
                 gradient_analysis_every=1)
    trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    trainer.train()

    def steps(phase):
        return [s["step"] for s in shown if s["phase"] == phase]

    updates = steps("update: minibatch")
    total = int(updates[0].split("/")[1])
    assert total >= 2 and updates == [f"{k}/{total}" for k in range(total)]  # ppo_epochs x minibatches
    assert all("left" in s for s in shown if s["phase"] == "update: minibatch" and s["step"] != f"0/{total}")
    micro = steps("no-grad pass: micro-batch")
    assert micro and micro[0].startswith("0/") and len(micro) == int(micro[0].split("/")[1])
    probed = steps("gradient probe: all, task term, micro-batch")  # the probe's passes too
    assert probed and probed == [f"{k}/{len(probed)}" for k in range(len(probed))]
    columns = steps("MI scoring: first turn column")
    assert columns and len(columns) == int(columns[0].split("/")[1]) >= 2
    # by default fast steps are shown at most every PROGRESS_EVERY_S, so a log file is not flooded
    monkeypatch.setattr("trainers.run.PROGRESS_EVERY_S", 3600)
    trainer._bar, shown[:] = bar(1, "it"), []
    for done in range(3):
        trainer._progress("a phase", done, 3)
    assert [s["step"] for s in shown] == ["0/3"]
