"""A run folder diagnosed offline equals what the trainer logged while it ran, where the folder holds the
weights that sampled each step; a step scored by older weights says so."""

import json

import pytest

from ragen_envs.diagnose.runs import diagnose_run, plan
from ragen_envs.agent.backends.transformers import TransformersPolicy
from tests.trainers.test_trainer import SeededReplies, config, make_model
from trainers import Trainer
from conftest import SMOKE

SCOPES = ("mi/", "mi_code/", "mi_traj/", "mi_traj_code/")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer):
    """Three iterations from a saved tiny model: rollouts every iteration, checkpoint-2 and checkpoint-3."""
    root = tmp_path_factory.mktemp("diagnosed")
    start = root / "start"
    make_model(tokenizer).save_pretrained(start)
    tokenizer.save_pretrained(start)
    cfg = config(root, num_iterations=3, mi_every=1, save_steps=2, save_rollouts_steps=1)
    Trainer(str(start), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer)).train()
    run = root / "run"
    logged = {m["iteration"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    return run, start, logged


def test_each_step_is_scored_by_the_checkpoint_before_it(trained):
    run, _, _ = trained
    assert [(s.iteration, s.checkpoint and s.checkpoint.name, s.lag) for s in plan(run)] == \
        [(1, None, None), (2, None, None), (3, "checkpoint-2", 0)]


def test_the_diagnosis_equals_the_trainers_logged_proxies_where_the_weights_are_the_samplers(trained):
    run, start, logged = trained
    loads = []

    def load(model):
        loads.append(model)
        return TransformersPolicy(model, device="cpu")

    rows = {row["step"]: row for row in diagnose_run(run, load)["rows"]}
    assert loads == [str(start), str(run / "checkpoint-2")]  # the run's own start, then the checkpoint
    for step in (1, 3):  # the sampling weights (the start; checkpoint-2 with its MI EMAs)
        keys = [k for k in logged[step] if k.startswith(SCOPES)]
        assert len(keys) > 20 and "mi/retrieval_acc" in keys and "mi_traj_code/mi_zscore_ema" in keys
        assert {k: rows[step][k] for k in keys} == pytest.approx({k: logged[step][k] for k in keys}, rel=1e-5)
    # iteration 2 was sampled after one update, scored by the start weights: not what was logged
    assert rows[2]["scorer_lag"] is None and "fallback" in rows[2]["scorer_note"]
    assert rows[2]["mi/mi_est"] != pytest.approx(logged[2]["mi/mi_est"], rel=1e-5)
