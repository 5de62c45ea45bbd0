"""The text tasks end to end: an oracle agent that answers through ChatEnv (prompt, <answer> parsing,
env step, reward) solves every episode."""

import pytest

from ragen_envs import TextEnv
from ragen_envs.agent import ChatEnv, ChatEnvConfig
from ragen_envs.registry import ENVIRONMENTS, load_class
from conftest import env_params

TEXT_IDS = [e.id for e in ENVIRONMENTS.values() if issubclass(load_class(e), TextEnv)]


def test_the_catalogue_holds_text_tasks():
    assert len(TEXT_IDS) >= 2


@pytest.mark.parametrize("env_id", env_params(TEXT_IDS))
def test_an_oracle_agent_succeeds_through_chatenv(env_id):
    # WebShop may page through results; an entry's test_kwargs keep a long task (a puzzle) short
    chat = ChatEnv(env_id, ChatEnvConfig(max_turns=15), **ENVIRONMENTS[env_id].test_kwargs)
    oracle = chat.env.get_wrapper_attr("oracle_action")
    results = []
    for seed in range(25):
        messages = chat.reset(seed=seed)
        assert "Observation:" in messages[1]["content"]
        while not chat.done:
            record = chat.step(f"<think>the reference answer</think><answer>{oracle()}</answer>")
            assert record.format_ok and record.actions  # the whole answer reached the env as one action
        results.append((chat.success, chat.episode_return))
    assert all(success for success, _ in results), results
    # no format penalty on the way (a stochastic task, such as a bandit, may pay less than its best)
    assert all(r >= 0 for _, r in results) and sum(r for _, r in results) > 0


@pytest.mark.parametrize("env_id", env_params(TEXT_IDS))
def test_the_oracles_reasoning_follows_the_state(env_id):
    import gymnasium as gym

    env = gym.make(env_id)
    firsts = []
    for seed in range(16):  # a bandit's held-out split has 8 pairs of arm names: 8 draws repeat some
        env.reset(seed=seed)
        reasoning = env.unwrapped.oracle_reasoning()
        assert reasoning and env.unwrapped.oracle_action() is not None
        firsts.append(reasoning)
    assert len(set(firsts)) >= 6  # a warm start on these does not teach one template
