"""The gradient probe: buckets by reward std, each loss term's gradient, and a run left exactly as it was."""

import json

import pytest
import torch

from trainers import Trainer
from trainers import gradient_probe as gp
from trainers.metrics import plot_gradients

from tests.numerics import GRAD_RTOL, relative_difference
from tests.trainers.test_trainer import SeededReplies, config, make_model
from conftest import SMOKE


def test_quantile_buckets_follow_ragens_split():
    stds = [0.5, 0.0, 0.3, 0.0, 0.9, 0.1, 0.7, 0.3]
    split = gp.buckets(stds, "quantile", 3)
    # sorted by std, ties in index order: 1 3 | 5 2 | 7 0 6 4 (8 // 3 = 2 a bucket, the remainder in the last)
    assert {k: v.tolist() for k, v in split.items()} == {
        "all": list(range(8)), "bucket_1": [1, 3], "bucket_2": [5, 2], "bucket_3": [7, 0, 6, 4]}
    assert list(gp.buckets([0.2, 0.1], "quantile", 6)) == ["all", "bucket_1", "bucket_2"]  # fewer groups
    fixed = gp.buckets([0.5, 1.0, 4.99, 7.0, 0.0], "fixed_rv")
    assert {k: v.tolist() for k, v in fixed.items()} == {
        "all": [0, 1, 2, 3, 4], "bucket_1": [0, 4], "bucket_2": [1], "bucket_5": [2], "bucket_6": [3]}
    with pytest.raises(ValueError, match="quantile"):
        gp.buckets(stds, "median")


def test_the_schedule_is_ragens():
    assert [i + 1 for i in range(120) if gp.due(i, 50)] == [1, 51, 101]
    assert not any(gp.due(i, 0) for i in range(10))


def _trainer(tokenizer, tmp_path, n_groups=4, **kw):
    cfg = config(tmp_path, n_groups=n_groups, filter="none", mi_every=0, **kw)  # MI: not what is tested here
    return Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))


def _batch(trainer, equal_group=None):
    """One rollout batch ready for the probe; ``equal_group``: that group's returns all made 1.0."""
    metrics = {}
    trajectories = trainer._rollout(metrics)
    if equal_group is not None:
        g = trainer.config.rollout.group_size
        for t in trajectories[equal_group * g:(equal_group + 1) * g]:
            t.episode_return = 1.0
    batch = trainer._prepare(trajectories, metrics)
    return batch, trainer._advantages(batch, metrics)


def test_a_group_of_equal_rewards_gives_exactly_no_task_gradient(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path, gradient_analysis_num_buckets=4)  # a bucket per group
    batch, advantages = _batch(trainer, equal_group=2)
    metrics = trainer._probe(batch, advantages)
    assert metrics["grad_norm/bucket_1/reward_std_max"] == 0 and metrics["grad_norm/bucket_1/group_count"] == 1
    assert metrics["grad_norm/bucket_1/task"] == 0.0  # exactly
    assert metrics["grad_norm/bucket_1/entropy"] > 0  # the regulariser still pulls
    assert all(metrics[f"grad_norm/bucket_{b}/task"] > 0 for b in (2, 3, 4))
    assert metrics["grad_norm/all/sample_count"] == sum(metrics[f"grad_norm/bucket_{b}/sample_count"]
                                                        for b in range(1, 5))


def test_the_terms_gradients_add_up_to_the_totals(tokenizer, tmp_path, monkeypatch):
    trainer = _trainer(tokenizer, tmp_path, beta=0.1, entropy_coef=0.05, gradient_analysis_num_buckets=2)
    trainer.train()  # one step: the policy has left its reference, so the KL term has a gradient
    batch, advantages = _batch(trainer)
    seen = []
    norm = torch.nn.utils.clip_grad_norm_

    def recorded(params, max_norm, *args, **kwargs):
        params = list(params)
        seen.append(torch.cat([p.grad.reshape(-1).double() for p in params if p.grad is not None]))
        return norm(params, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recorded)
    metrics = trainer._probe(batch, advantages)
    assert list(gp.terms(trainer.config)) == ["task", "entropy", "kl", "total"]
    assert len(seen) == 3 * 4  # all, bucket_1, bucket_2; four terms each
    for b, name in enumerate(["all", "bucket_1", "bucket_2"]):
        task, entropy, kl, total = seen[4 * b:4 * b + 4]
        assert min(task.norm(), entropy.norm(), kl.norm()) > 0
        assert relative_difference(total, task + entropy + kl) <= GRAD_RTOL, name  # float32 rounding only
        assert metrics[f"grad_norm/{name}/kl"] == pytest.approx(float(kl.norm()), rel=GRAD_RTOL)


def test_the_probe_changes_nothing_and_a_run_with_it_trains_exactly_like_one_without(tokenizer, tmp_path):
    runs = {}
    for name, probe in [("off", {}), ("training batch", {"gradient_analysis_every": 1}),
                        ("own batch", {"gradient_analysis_every": 1, "gradient_analysis_env_groups": 3,
                                       "gradient_analysis_group_size": 2})]:
        trainer = _trainer(tokenizer, tmp_path / name.replace(" ", "-"), num_iterations=2, n_groups=3, **probe)
        history = trainer.train()
        runs[name] = (trainer, history)
    off, _ = runs["off"]
    for name in ("training batch", "own batch"):
        trainer, history = runs[name]
        assert "grad_norm/all/task" in history[0] and "grad_norm/all/task" in history[1]
        for key, value in off.model.state_dict().items():
            assert torch.equal(value, trainer.model.state_dict()[key]), (name, key)
        for a, b in zip(off.optimizer.state_dict()["state"].values(), trainer.optimizer.state_dict()["state"].values()):
            assert all(torch.equal(a[k], b[k]) for k in a), name
        same = {k: v for k, v in runs["off"][1][1].items() if not k.startswith(("time/", "grad_norm/"))}
        assert same == {k: v for k, v in history[1].items() if k in same}, name
    # the own batch: 3 groups of 2, one sample per trajectory here
    assert runs["own batch"][1][0]["grad_norm/all/sample_count"] == 6
    assert runs["training batch"][1][0]["grad_norm/all/sample_count"] == 12


def test_the_probes_own_batch_is_filtered_as_the_run_filters_or_probed_whole(tokenizer, tmp_path):
    counts = {}
    for whole in (False, True):
        cfg = config(tmp_path / str(whole), n_groups=2, filter="top_k_abs", filter_value=1, mi_every=0,
                     gradient_analysis_every=1, gradient_analysis_env_groups=6, gradient_analysis_group_size=2,
                     gradient_analysis_filter=not whole)
        trainer = Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                          rollout_policy=SeededReplies(tokenizer))
        counts[whole] = trainer.train()[0]["grad_norm/all/group_count"]
    assert counts == {False: 1, True: 6}  # the filter keeps one group; whole, all six, zero-variance ones too
    with pytest.raises(ValueError, match="gradient_analysis_env_groups"):
        config(tmp_path, gradient_analysis_filter=False)  # the training batch is what the filter kept


def test_a_probe_alone_leaves_the_weights_and_the_run_folder_as_they_were(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path, gradient_analysis_every=0, exit_after_gradient_analysis=True)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    history = trainer.train()
    assert len(history) == 1 and history[0]["trainer/exited_after_gradient_analysis"] == 1.0
    assert history[0]["grad_norm/all/task"] > 0 and "loss/grad_norm" not in history[0]  # no update
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    assert all(p.grad is None for p in trainer.model.parameters())
    assert trainer.optimizer.state_dict()["state"] == {} and trainer.iteration == 0
    run = tmp_path / "run"
    assert not list(run.glob("checkpoint-*")) and not (run / "metrics.jsonl").exists()  # the run's record untouched
    assert not (run / "rollouts").exists()  # nor episodes saved as if an iteration had run
    rows = [json.loads(line) for line in (run / "gradient_probe.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["grad_norm/all/task"] == history[0]["grad_norm/all/task"]
    assert rows[0]["iteration"] == 1  # the iteration these weights would begin
    # the plot command draws it, and names what is missing
    from ragen_envs.cli import main

    assert main(["plot", str(tmp_path / "run"), "--gradients", "--scale", "per_token"]) == 0
    assert (tmp_path / "run" / "gradients.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="no gradient probe at iteration 5"):
        plot_gradients(tmp_path / "run", [5])
    (run / "gradient_probe.jsonl").unlink()
    (run / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "loss/policy": 0.1}) + "\n")
    with pytest.raises(FileNotFoundError, match="--gradient-analysis-every"):
        plot_gradients(tmp_path / "run")


def test_a_checkpoint_is_probed_on_its_own_batch_and_its_run_left_as_it_was(tokenizer, tmp_path):
    trained = _trainer(tokenizer, tmp_path)
    trained.train()
    run = tmp_path / "run"
    before = {name: (run / name).read_bytes() for name in ("metrics.jsonl", "config.json")}
    # settings of the probe alone are no change to the run's: no --allow-changes needed
    probe = _trainer(tokenizer, tmp_path, resume_from_checkpoint="latest", exit_after_gradient_analysis=True,
                     gradient_analysis_env_groups=2, gradient_analysis_group_size=3)
    metrics = probe.train()[0]
    assert all(torch.equal(v, trained.model.state_dict()[k]) for k, v in probe.model.state_dict().items())
    assert metrics["iteration"] == 2 and metrics["grad_norm/all/sample_count"] == 6
    assert "rollout/success" not in metrics  # the training batch, not needed, was not rolled out
    assert {name: (run / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]


def test_the_probe_keeps_the_rng_streams():
    torch.manual_seed(3)
    with gp.rng_kept():
        torch.rand(5)
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(1))


def test_bad_probe_settings_are_refused():
    from trainers.config import TrainerConfig

    for kwargs, match in [({"gradient_analysis_every": -1}, "gradient_analysis_every"),
                          ({"gradient_analysis_bucket_mode": "median"}, "gradient_analysis_bucket_mode"),
                          ({"gradient_analysis_group_size": 1}, "two samples"),
                          ({"gradient_analysis_num_buckets": 0}, "gradient_analysis_num_buckets")]:
        with pytest.raises(ValueError, match=match):
            TrainerConfig(**kwargs)
    assert TrainerConfig().gradient_analysis_every == 0  # off unless asked: default runs do not change
