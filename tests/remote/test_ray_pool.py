"""The Ray pool of env workers, on a local Ray instance: the local episode for a seed, sessions spread
over the pool's actors, the runner taking it by id, and the env's own errors."""

from dataclasses import replace

import gymnasium as gym
import pytest

ray = pytest.importorskip("ray", reason="the 'ray' extra")

from ragen_envs.agent import RolloutConfig, RolloutRunner  # noqa: E402
from ragen_envs.remote.ray_pool import RayEnv  # noqa: E402
from ragen_envs.registry import RAY_ID  # noqa: E402
from conftest import DEFAULT, SMOKE, ScriptedPolicy  # noqa: E402
from tests.remote.test_server import REPLIES, play, same  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="ragen_envs")
    yield
    ray.shutdown()


@pytest.mark.parametrize("env_id", [SMOKE, DEFAULT])
def test_a_ray_env_plays_the_local_episode(env_id):
    env, local = RayEnv(env_id, workers=2, pool="episodes"), gym.make(env_id)
    assert env.observation_space == local.observation_space
    assert env.valid_actions == local.get_wrapper_attr("valid_actions")
    for seed in (0, 9):
        assert same(play(env, seed), play(local, seed))
    assert env.oracle_reasoning() == local.get_wrapper_attr("oracle_reasoning")()
    env.close()


def test_sessions_spread_over_the_pool():
    from ragen_envs.remote.ray_pool import pool_actors

    envs = [RayEnv(SMOKE, workers=2, pool="spread") for _ in range(4)]
    assert sorted(ray.get([a.sessions.remote() for a in pool_actors(2, "spread")])) == [2, 2]
    for env in envs:
        env.close()
    assert ray.get([a.sessions.remote() for a in pool_actors(2, "spread")]) == [0, 0]


def test_the_runner_takes_a_ray_env_by_id(tokenizer):
    config = RolloutConfig(n_groups=2, group_size=2, seed=4)
    kwargs = {"env_id": SMOKE, "workers": 2, "pool": "runner"}
    remote = RolloutRunner(RAY_ID, ScriptedPolicy(tokenizer, REPLIES), replace(config, env_kwargs=kwargs))
    local = RolloutRunner(SMOKE, ScriptedPolicy(tokenizer, REPLIES), config)
    got, expected = remote.collect(), local.collect()
    assert [t.messages for t in got] == [t.messages for t in expected]
    assert [[turn.reward for turn in t.turns] for t in got] == [[turn.reward for turn in t.turns] for t in expected]


def test_env_errors_come_back_as_themselves():
    env = RayEnv(SMOKE, workers=1, pool="errors")
    with pytest.raises(ValueError, match="transition_seed"):
        env.reset(seed=0, options={"transition_seed": -1})
    with pytest.raises(ValueError, match="slip"):
        RayEnv(SMOKE, workers=1, pool="errors", slip=3.0)
    with pytest.raises(ValueError, match="workers"):
        RayEnv(SMOKE, workers=0)
    env.close()
