"""The contract of ragen_envs.base, on every env of the catalogue (and a toy open-text task).

A new environment gets all of these by its catalogue line; its own test file covers its rules.
"""

import json
import math
import pickle
import subprocess
import sys

import hashlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragen_envs.agent import ChatEnv, ChatEnvConfig, vision
from ragen_envs.base import INFO_KEYS
from ragen_envs.registry import ENVIRONMENTS
from conftest import env_params
from toy_envs import GUESS_ID

ENV_IDS = [*ENVIRONMENTS, GUESS_ID]
CONTRACT_IDS = env_params(ENV_IDS)

# Never a valid action in any env: they must change nothing.
INVALID_ACTIONS = ["", " ", "\n", "\x00", "\x00Up", None, 3, 1.5, b"Up", ["Up"]]
# Must never raise or hang; an open-text env may take them as (wrong) answers.
HOSTILE_ACTIONS = ["x" * 1_000_000, "Up" * 100_000, "上🙂" * 50, "<answer>1</answer>", "search[" * 1000]


@pytest.fixture(params=CONTRACT_IDS)
def any_env_id(request):
    return request.param


def _text(obs):
    """What an observation says, comparable: its text, or an image's pixels as a hash."""
    if isinstance(obs, np.ndarray):
        return f"image {obs.shape} {hashlib.sha1(obs.tobytes()).hexdigest()}"
    return obs["text"] if isinstance(obs, dict) else obs


def _actions(env):
    """Actions to drive an env generically: its finite set, or a few open-text ones."""
    valid = env.get_wrapper_attr("valid_actions")
    return list(valid) if valid else ["1", "7", "42", "hello", "search[cat]", "click[Buy Now]"]


def _rollout(env_id, seed, steps=30, transition_seed=None, episodes=3):
    """Up to ``steps`` random actions over at most ``episodes`` episodes (a one-step env, such as a
    code run in the sandbox, needs no more than a few to show its determinism), as text."""
    env = gym.make(env_id)
    options = None if transition_seed is None else {"transition_seed": transition_seed}
    obs, _ = env.reset(seed=seed, options=options)
    actions = _actions(env)
    rng = np.random.default_rng(seed)
    out = [_text(obs)]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(actions[rng.integers(len(actions))])
        out.append(f"{_text(obs)}|{reward}|{terminated}|{truncated}|{info['success']}")
        if terminated or truncated:
            episodes -= 1
            if not episodes:
                break
            out.append(_text(env.reset()[0]))
    return out


def test_check_env(any_env_id):
    env = gym.make(any_env_id)
    check_env(env.unwrapped)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)


def test_surface(any_env_id):
    env = gym.make(any_env_id)
    instructions = env.get_wrapper_attr("instructions")
    valid = env.get_wrapper_attr("valid_actions")
    assert isinstance(instructions, str) and instructions.strip()
    assert valid is None or (valid and all(isinstance(a, str) and a for a in valid))
    env.reset(seed=0)
    parse = env.get_wrapper_attr("parse_action")
    for action in valid or []:
        assert parse(action) is not None and parse(action.upper()) is not None


def test_observations_stay_in_space(any_env_id):
    env = gym.make(any_env_id)
    actions = _actions(env)
    rng = np.random.default_rng(0)
    for episode in range(10):
        obs, _ = env.reset(seed=episode)
        for _ in range(20):
            assert env.observation_space.contains(obs)
            obs, reward, terminated, truncated, _ = env.step(actions[rng.integers(len(actions))])
            assert math.isfinite(reward)
            if terminated or truncated:
                break


def test_info_keys_on_reset_and_step(any_env_id):
    env = gym.make(any_env_id)
    _, info = env.reset(seed=0)
    assert set(INFO_KEYS) <= info.keys()
    for action in _actions(env)[:3]:
        _, _, _, _, info = env.step(action)
        assert set(INFO_KEYS) <= info.keys()
        assert all(isinstance(info[k], bool) for k in INFO_KEYS)


@pytest.mark.parametrize("action", INVALID_ACTIONS, ids=lambda a: repr(a)[:12])
def test_invalid_actions_change_nothing(any_env_id, action):
    env = gym.make(any_env_id)
    obs, _ = env.reset(seed=2)
    new_obs, reward, terminated, _, info = env.step(action)
    assert info["action_is_valid"] is False and info["action_is_effective"] is False
    assert reward == 0.0 and not terminated
    assert _text(new_obs) == _text(obs)


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=lambda a: repr(a)[:12])
def test_hostile_actions_never_raise(any_env_id, action):
    env = gym.make(any_env_id)
    env.reset(seed=2)
    obs, reward, _, _, info = env.step(action)
    assert env.observation_space.contains(obs) and math.isfinite(reward) and set(INFO_KEYS) <= info.keys()


def test_invalid_actions_count_towards_truncation(any_env_id):
    env = gym.make(any_env_id)
    env.reset(seed=0)
    limit = env.get_wrapper_attr("max_steps")  # each env's own limit (MetaMathQA's max_attempts)
    assert [env.step("")[3] for _ in range(limit)] == [False] * (limit - 1) + [True]


def test_step_before_reset_says_so(any_env_id):
    with pytest.raises(RuntimeError, match="reset"):
        gym.make(any_env_id).unwrapped.step("x")


@pytest.fixture(scope="module")
def other_process():
    """Every contract env's episodes for seeds 0 and 5, played in one other Python process (a fresh
    interpreter: another hash seed, nothing cached). An env that fails there fails its own test."""
    script = ("import json, sys; sys.path[:0] = ['tests', 'tests/contract']; import ragen_envs; "
              "from test_env_contract import "
              "_rollout_or_error; print(json.dumps({i: [_rollout_or_error(i, s) for s in (0, 5)] "
              f"for i in {ENV_IDS!r}}}))")
    return json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                                     text=True).stdout)


def _rollout_or_error(env_id, seed):
    try:
        return _rollout(env_id, seed)
    except Exception as error:  # e.g. DeepCoder without its sandbox: that env's test is skipped here
        return f"{type(error).__name__}: {error}"


def test_same_seed_same_episode_in_another_process(any_env_id, other_process):
    other = other_process[any_env_id]
    assert other == [_rollout(any_env_id, s) for s in (0, 5)]
    assert other[0] != other[1]


def test_global_random_state_is_not_used(any_env_id):
    import random
    random.seed(1)
    np.random.seed(1)
    first = _rollout(any_env_id, 9)
    random.seed(2)
    np.random.seed(2)
    assert _rollout(any_env_id, 9) == first


def test_transition_seed_keeps_the_start_and_fixes_the_dynamics(any_env_id):
    plain = _rollout(any_env_id, 4, steps=0)
    a, b = _rollout(any_env_id, 4, transition_seed=1), _rollout(any_env_id, 4, transition_seed=1)
    assert a == b and a[0] == plain[0]
    assert _rollout(any_env_id, 4, transition_seed=2)[0] == plain[0]
    with pytest.raises(ValueError, match="transition_seed"):
        gym.make(any_env_id).reset(seed=0, options={"transition_seed": "x"})


def test_an_unknown_reset_option_is_refused_with_the_known_ones(any_env_id):
    env = gym.make(any_env_id)
    known = ["transition_seed", *env.get_wrapper_attr("reset_options")]
    misspelt = known[-1][:-2] + known[-1][-1] + known[-1][-2]  # its last two letters swapped
    with pytest.raises(ValueError, match=f"unknown option '{misspelt}'; did you mean '{known[-1]}'") as error:
        env.reset(seed=0, options={misspelt: 1})
    assert all(k in str(error.value) for k in known)
    env.reset(seed=0, options={"transition_seed": 1})  # a known option still resets


def test_pickled_env_continues_the_same_episode(any_env_id):
    env = gym.make(any_env_id)
    env.reset(seed=6)
    env.step(_actions(env)[0])
    twin = pickle.loads(pickle.dumps(env))
    for action in _actions(env)[:4]:
        a, b = env.step(action), twin.step(action)
        assert _text(a[0]) == _text(b[0]) and a[1:4] == b[1:4]


def test_sync_and_async_vector_envs_agree(any_env_id):
    # Async with Gymnasium's defaults (shared memory): any Unicode must survive it, and stay current.
    vecs = [gym.make_vec(any_env_id, num_envs=3, vectorization_mode=mode) for mode in ("sync", "async")]
    try:
        actions = _actions(vecs[0].envs[0])
        runs = [[], []]
        for out, vec in zip(runs, vecs):
            out.append(tuple(_text(o) for o in vec.reset(seed=11)[0]))
            for t in range(8):
                step = tuple(actions[(t + k) % len(actions)] for k in range(3))
                obs, reward, term, trunc, _ = vec.step(step)
                out.append((tuple(_text(o) for o in obs), reward.tolist(), term.tolist(), trunc.tolist()))
        assert runs[0] == runs[1]
    finally:
        for vec in vecs:
            vec.close()


def _scripted_replies(env):
    valid = env.get_wrapper_attr("valid_actions")
    if valid:
        return [f"<think>try</think><answer>{valid[i % len(valid)]} || {valid[(i + 1) % len(valid)]}</answer>"
                for i in range(6)]
    return [f"<think>try</think><answer>{n}</answer>" for n in ("1", "7", "x", "42", "3", "9")]


def _chat_episode(chat, seed):
    messages = list(chat.reset(seed=seed, transition_seed=5))
    for reply in _scripted_replies(chat.env):
        if chat.done:
            break
        chat.step(reply)
    return vision.to_json(messages + chat.messages[len(messages):], {}), chat.episode_return


class _UserWrapper(gym.Wrapper):
    """A wrapper a user might add; ChatEnv must reach the env's surface through it."""


def test_chat_env_uses_only_the_public_surface(any_env_id):
    config = ChatEnvConfig(max_turns=6)
    direct = _chat_episode(ChatEnv(any_env_id, config), seed=3)
    wrapped_env = _UserWrapper(gym.wrappers.RecordEpisodeStatistics(gym.make(any_env_id)))
    assert direct == _chat_episode(ChatEnv(wrapped_env, config), seed=3)


def test_oracle_actions_are_valid(any_env_id):
    env = gym.make(any_env_id)
    parse = env.get_wrapper_attr("parse_action")
    oracle = env.get_wrapper_attr("oracle_action")
    env.reset(seed=1)
    for _ in range(env.get_wrapper_attr("max_steps")):
        action = oracle()
        if action is None:
            break
        assert parse(action) is not None
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break


def test_terminal_states_are_absorbing(any_env_id):
    env = gym.make(any_env_id)
    oracle = env.get_wrapper_attr("oracle_action")
    for seed in range(10):
        env.reset(seed=seed)
        terminated = truncated = False
        while not (terminated or truncated) and (action := oracle()) is not None:
            obs, _, terminated, truncated, _ = env.unwrapped.step(action)
        if terminated:
            break
    assert terminated, "no oracle episode ended in a terminal state"
    for action in [*_actions(env), ""]:
        after, reward, still, _, info = env.unwrapped.step(action)
        assert _text(after) == _text(obs) and reward == 0.0 and still and not info["action_is_effective"]
        assert info["episode_over"] and not info["action_is_valid"]


def test_nothing_is_paid_or_played_after_truncation(any_env_id):
    # the red team's brute force: keep answering after max_steps (MetaMathQA by counting, Sokoban to +10)
    env = gym.make(any_env_id)
    oracle = env.get_wrapper_attr("oracle_action")
    obs, _ = env.reset(seed=0)
    limit = env.get_wrapper_attr("max_steps")
    for step in range(limit):
        obs, _, _, truncated, info = env.step("")
        assert info["episode_over"] is False
    assert truncated
    for _ in range(3):
        action = oracle()
        after, reward, terminated, still, info = env.unwrapped.step(action if action is not None else "")
        assert reward == 0.0 and still and not terminated and info["episode_over"]
        assert _text(after) == _text(obs) and not info["action_is_effective"] and not info["success"]


def test_ansi_render_is_the_text(any_env_id):
    env = gym.make(any_env_id, render_mode="ansi")
    obs, _ = env.reset(seed=0)
    # an env seen as an image still renders its text form for a terminal
    assert env.render() == (env.unwrapped.text_observation() if isinstance(obs, np.ndarray) else _text(obs))
    plain = gym.make(any_env_id)
    plain.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):  # never silently nothing
        assert plain.unwrapped.render() is None


def test_the_oracles_reasoning_states_every_fact_the_env_checks(any_env_id):
    # LLMEnv.facts are the oracle reasoning's own phrases: the grounding metric scores it 1 on every state
    from ragen_envs.agent.chat_env import grounding

    env = gym.make(any_env_id)
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(3):
            facts, reasoning, action = (env.get_wrapper_attr(name)() for name in
                                        ("facts", "oracle_reasoning", "oracle_action"))
            if not facts or reasoning is None or action is None:
                break
            assert grounding(facts, reasoning) == 1.0, (facts, reasoning)
            if env.step(action)[2]:
                break
