"""The adapters into SkyRL-gym (its real package) and rLLM (a reading of its interface); what every
adapter says without its framework. verl, OpenRLHF and verifiers are tested against their real
packages in test_verl.py, test_openrlhf.py, test_verifiers.py and test_verifiers_v1.py, each in the
venv `make test-frameworks` builds; TRL in test_trl.py.

rLLM is not on this machine's package index, so its adapter is tested against a faithful reading of
the interface it is written against (``rllm_reading`` below: ``BaseEnv``), put in place of the module
whether or not rLLM is installed: the only stand-in left.
"""

import importlib
import sys
import types

import pytest

from episodes import ENV, PREFILL, local_episode, require, scripted_generations


def fresh(adapter: str):
    sys.modules.pop(adapter, None)
    return importlib.import_module(adapter)


# -- SkyRL-gym (the real package) ------------------------------------------------------------------

@pytest.mark.parametrize("prefilled", [False, True], ids=["reply-after-prefill", "reply-with-its-own-think"])
def test_skyrl_env_plays_the_episode(prefilled):
    skyrl_gym = require("skyrl_gym")  # the 'skyrl' extra: installed in .venv

    skyrl = fresh("ragen_envs.integrations.skyrl")
    row = skyrl.dataset_rows(ENV, 3)[2]
    env = skyrl_gym.make("ragen", env_config={}, extras=row)
    prompt, meta = env.init(row["prompt"])
    assert prompt == row["prompt"] and meta["seed"] == 2
    generations = scripted_generations(2)
    outputs = [env.step((PREFILL if prefilled else "") + text) for text in generations]
    chat = local_episode(2, generations)
    assert [o["reward"] for o in outputs] == [t.reward for t in chat.turns]
    assert outputs[-1]["done"] and outputs[-1]["observations"] == [] and env.get_metrics() == {
        "success": 1.0, "episode_return": pytest.approx(chat.episode_return), "turns": len(generations)}
    assert outputs[0]["observations"] == [chat.messages[3]] and not outputs[0]["done"]


# -- rLLM ----------------------------------------------------------------------------------------------

def rllm_reading() -> types.ModuleType:
    module = types.ModuleType("rllm.environments.base.base_env")

    class BaseEnv:
        def reset(self):
            raise NotImplementedError

        def step(self, action):
            raise NotImplementedError

        def close(self):
            pass

        @staticmethod
        def from_dict(info):
            raise NotImplementedError

        @staticmethod
        def is_multithread_safe():
            return False

    module.BaseEnv = BaseEnv
    return module


def test_rllm_env_plays_the_episode_against_a_reading_of_its_interface(monkeypatch):
    """A stand-in: rLLM does not install here (not on the package index)."""
    name = "rllm.environments.base.base_env"
    parts = name.split(".")
    for i in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    monkeypatch.setitem(sys.modules, name, rllm_reading())
    monkeypatch.setitem(sys.modules, "ragen_envs.integrations.rllm", None)  # dropped again afterwards
    rllm = fresh("ragen_envs.integrations.rllm")
    env = rllm.RagenEnv.from_dict({"env_id": ENV, "seed": 5})
    observation, info = env.reset()
    assert "Turn 1" in observation and "frozen lake" in info["instructions"].lower()
    generations, rewards = scripted_generations(5), []
    for text in generations:
        observation, reward, done, info = env.step(text)
        rewards.append(reward)
    chat = local_episode(5, generations)
    assert done and info["success"] and observation == ""
    assert rewards == [t.reward for t in chat.turns] and rllm.RagenEnv.is_multithread_safe()


# -- every adapter names what to install ---------------------------------------------------------------

@pytest.mark.parametrize("adapter, framework, extra", [
    ("trl", "trl", "ragen-envs[trl]"), ("skyrl", "skyrl_gym", "ragen-envs[skyrl]"),
    ("verifiers", "verifiers", "pip install 'verifiers<0.4'"), ("verifiers_v1", "verifiers", "pip install verifiers"),
    ("rllm", "rllm", "rLLM"),
    ("verl", "verl", "pip install verl"), ("openrlhf", "openrlhf", "pip install openrlhf")])
def test_an_adapter_without_its_framework_says_what_to_install(adapter, framework, extra, monkeypatch):
    for name in list(sys.modules):
        if name == framework or name.startswith(framework + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, framework, None)  # importing it fails, as when it is not installed
    monkeypatch.delitem(sys.modules, f"ragen_envs.integrations.{adapter}", raising=False)
    with pytest.raises(ImportError, match=extra.replace("[", r"\[").replace("]", r"\]")):
        importlib.import_module(f"ragen_envs.integrations.{adapter}")


def test_the_adapters_refuse_a_visual_env_in_one_line():
    from ragen_envs.integrations.common import seed_rows
    from ragen_envs.registry import ENVIRONMENTS

    visual = next(e.id for e in ENVIRONMENTS.values() if e.visual)
    with pytest.raises(ValueError, match="shows images; the framework adapters take text envs"):
        seed_rows(visual, 2)
    assert len(seed_rows(ENV, 2)) == 2


@pytest.mark.parametrize("cut", [False, True])
def test_an_episode_played_in_tokens_is_the_local_one_and_stops_at_its_limit(tokenizer, cut):
    """verl's and AReaL's adapters play through ``common.play_in_tokens`` (their framework tests check the
    output formats): the episode is the local one, the lists align with the tokens, the limit holds."""
    import asyncio

    from ragen_envs.agent import ChatEnv, chat_encoding
    from ragen_envs.integrations.common import play_in_tokens

    generations = scripted_generations(3)
    encoded = [tokenizer(g, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for g in generations]
    replies = iter(encoded)
    chat = ChatEnv(ENV)
    prompt = chat_encoding.encode_chat(tokenizer, chat.reset(seed=3)) + chat_encoding.tokenize(tokenizer, PREFILL)

    async def generate(ids):
        reply = next(replies)
        return reply, [-0.5] * len(reply), None

    limit = len(prompt) + len(encoded[0]) + 3 if cut else 10**6  # cut: 3 env tokens after the first reply
    played = asyncio.run(play_in_tokens(chat, tokenizer, prompt, limit, generate))
    after = len(played.ids) - played.prompt_length
    assert played.ids[:len(prompt)] == prompt and len(played.mask) == len(played.logprobs) == after
    assert played.versions == [-1] * after  # none reported
    assert [lp for m, lp in zip(played.mask, played.logprobs) if m] == [-0.5] * sum(played.mask)
    assert not any(lp for m, lp in zip(played.mask, played.logprobs) if not m)
    if cut:
        assert len(played.ids) == limit and played.mask == [1] * len(encoded[0]) + [0] * 3
        return
    local = local_episode(3, generations)
    assert chat.success and chat.episode_return == local.episode_return and len(chat.turns) == len(generations)
    assert sum(played.mask) == sum(map(len, encoded)) and played.ids[-len(encoded[-1]):] == encoded[-1]
