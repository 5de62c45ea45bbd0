"""The adapters into SkyRL-gym (its real package), verifiers, rLLM, verl and OpenRLHF.

verifiers, rLLM, verl and OpenRLHF do not install next to this project's stack here (verifiers pins an
older `mcp` than openenv-core; rLLM is not on the package index; verl and OpenRLHF need Ray, vLLM and
GPUs). For them these tests install a faithful reading of the interface each adapter is written
against (module `fakes` below: the base classes, and a driver that calls them in the order and with
the arguments the framework does) and play real episodes through it. Where the real package is
installed, the tests use it instead of the reading.
"""

import asyncio
import importlib
import json
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from ragen_envs.agent import ChatEnv
from ragen_envs.agent import chat_encoding
from conftest import SMOKE

ENV = SMOKE


def oracle_reply(chat: ChatEnv) -> str:
    action = chat.env.get_wrapper_attr("oracle_action")()
    return f"<think>the oracle says {action}</think><answer>{action}</answer>"


def local_episode(seed: int, replies) -> tuple[list[float], bool]:
    """The same replies played on a local ChatEnv: per-turn rewards and success."""
    chat = ChatEnv(ENV)
    chat.reset(seed=seed)
    rewards = []
    for reply in replies:
        rewards.append(chat.step(reply).reward)
        if chat.done:
            break
    return rewards, chat.success


def scripted_replies(seed: int) -> list[str]:
    """An invalid reply, then the oracle's moves: the episode a test plays through each adapter."""
    chat = ChatEnv(ENV)
    chat.reset(seed=seed)
    replies = ["no format"]
    chat.step(replies[0])
    while not chat.done:
        replies.append(oracle_reply(chat))
        chat.step(replies[-1])
    return replies


def install(name: str, module: types.ModuleType, monkeypatch) -> None:
    """Put a faithful reading of a framework's module in place, unless the real one imports."""
    try:
        importlib.import_module(name)
        return
    except ImportError:
        pass
    parts = name.split(".")
    for i in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    monkeypatch.setitem(sys.modules, name, module)


def fresh(adapter: str):
    sys.modules.pop(adapter, None)
    return importlib.import_module(adapter)


# -- SkyRL-gym (the real package) ------------------------------------------------------------------

def test_skyrl_env_plays_the_episode():
    pytest.importorskip("skyrl_gym", reason="the 'skyrl' extra")
    import skyrl_gym

    skyrl = fresh("ragen_envs.integrations.skyrl")
    row = skyrl.dataset_rows(ENV, 3)[2]
    env = skyrl_gym.make("ragen", env_config={}, extras=row)
    prompt, meta = env.init(row["prompt"])
    assert prompt == row["prompt"] and meta["seed"] == 2
    replies = scripted_replies(2)
    outputs = [env.step(reply) for reply in replies]
    assert [o["reward"] for o in outputs] == local_episode(2, replies)[0]
    assert outputs[-1]["done"] and outputs[-1]["observations"] == [] and env.get_metrics()["success"] == 1.0
    assert outputs[0]["observations"][0]["role"] == "user" and not outputs[0]["done"]


# -- verifiers (classic MultiTurnEnv) ----------------------------------------------------------------

def verifiers_reading() -> types.ModuleType:
    vf = types.ModuleType("verifiers")

    class Rubric:
        def __init__(self, funcs=None, weights=None, parser=None):
            self.funcs, self.weights = list(funcs or []), list(weights or [1.0] * len(funcs or []))

        async def score(self, state):
            values = [f(state=state, prompt=state["prompt"], completion=state["completion"], answer=state["answer"],
                        info=state["info"]) for f in self.funcs]
            return sum(w * v for w, v in zip(self.weights, values)), values

    class MultiTurnEnv:
        def __init__(self, dataset=None, rubric=None, max_turns=-1, **kwargs):
            self.dataset, self.rubric, self.max_turns = dataset, rubric, max_turns

        async def setup_state(self, state, **kwargs):
            return state

        async def rollout(self, row, model_reply) -> dict:
            """The classic loop: model turn, then env_response, until a stop condition holds."""
            state = {"prompt": row["prompt"], "answer": row["answer"], "info": row["info"], "trajectory": []}
            state = await self.setup_state(state) or state
            messages = list(row["prompt"])
            while True:
                messages.append({"role": "assistant", "content": model_reply(messages)})
                state["trajectory"].append(messages[-1])
                if 0 < self.max_turns <= len(state["trajectory"]):
                    break
                response = await self.env_response(messages, state)
                if state.get("final_env_response") is not None:
                    break
                messages += response
            state["completion"] = messages[len(row["prompt"]):]
            return state

    vf.Rubric, vf.MultiTurnEnv = Rubric, MultiTurnEnv
    return vf


def test_verifiers_environment_plays_the_episode(monkeypatch):
    install("verifiers", verifiers_reading(), monkeypatch)
    vf_env = fresh("ragen_envs.integrations.verifiers").load_environment(ENV, num_examples=4)
    row = vf_env.dataset[3]
    assert row["info"]["seed"] == 3 and row["prompt"] == ChatEnv(ENV).reset(seed=3)
    replies = iter(scripted_replies(3))
    state = asyncio.run(vf_env.rollout(row, lambda messages: next(replies)))
    total, (episode_return, success) = asyncio.run(vf_env.rubric.score(state))
    expected, expected_success = local_episode(3, scripted_replies(3))
    assert episode_return == pytest.approx(sum(expected)) and total == pytest.approx(sum(expected))
    assert success == float(expected_success) == 1.0
    assert state["completion"][1]["role"] == "user"  # the env's answer to the invalid reply


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


def test_rllm_env_plays_the_episode(monkeypatch):
    install("rllm.environments.base.base_env", rllm_reading(), monkeypatch)
    rllm = fresh("ragen_envs.integrations.rllm")
    env = rllm.RagenEnv.from_dict({"env_id": ENV, "seed": 5, "chat": {"max_turns": 8}})
    observation, info = env.reset()
    assert "Turn 1" in observation and "frozen lake" in info["instructions"].lower()
    replies, rewards = scripted_replies(5), []
    for reply in replies:
        observation, reward, done, info = env.step(reply)
        rewards.append(reward)
    assert done and info["success"] and observation == ""
    assert rewards == local_episode(5, replies)[0] and rllm.RagenEnv.is_multithread_safe()


# -- verl ------------------------------------------------------------------------------------------------

@dataclass
class TokenOutput:
    token_ids: list
    log_probs: list | None = None


def verl_reading() -> types.ModuleType:
    module = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    registry = {}

    class AgentLoopMetrics(dict):
        pass

    @dataclass
    class AgentLoopOutput:
        prompt_ids: list
        response_ids: list
        response_mask: list
        metrics: Any
        response_logprobs: list | None = None
        reward_score: float | None = None
        num_turns: int = 0
        extra_fields: dict = field(default_factory=dict)

    class AgentLoopBase:
        def __init__(self, trainer_config, server_manager, tokenizer, processor=None, **kwargs):
            self.config = trainer_config
            self.rollout_config = trainer_config.actor_rollout_ref.rollout
            self.server_manager, self.tokenizer = server_manager, tokenizer

    def register(name):
        def decorator(cls):
            registry[name] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
            return cls
        return decorator

    module.AgentLoopBase, module.AgentLoopOutput, module.AgentLoopMetrics = AgentLoopBase, AgentLoopOutput, \
        AgentLoopMetrics
    module.register, module.registry = register, registry
    return module


class OracleServer:
    """An inference server that answers each prompt with the scripted reply for its turn, plus EOS."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        text = self.replies[len(self.prompts) - 1]
        ids = chat_encoding.tokenize(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        return TokenOutput(ids, [-0.5] * len(ids))


def test_verl_agent_loop_plays_the_episode(monkeypatch, tokenizer):
    reading = verl_reading()
    install("verl.experimental.agent_loop.agent_loop", reading, monkeypatch)
    verl = fresh("ragen_envs.integrations.verl")
    row = verl.dataset_rows(ENV, 2)[1]
    assert row["agent_name"] == "ragen_agent" and row["extra_info"] == {"env_id": ENV, "seed": 1}
    replies = scripted_replies(1)
    server = OracleServer(tokenizer, replies)
    config = types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(
        rollout=types.SimpleNamespace(response_length=2048)))
    loop = verl.RagenAgentLoop(config, server, tokenizer)
    out = asyncio.run(loop.run({"temperature": 1.0}, **row))
    expected, _ = local_episode(1, replies)
    assert out.reward_score == pytest.approx(sum(expected)) and out.extra_fields["success"]
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # Each server prompt is the previous one plus reply and env tokens: one token sequence.
    assert server.prompts[-1] == (out.prompt_ids + out.response_ids)[:len(server.prompts[-1])]
    generated = [t for t, m in zip(out.response_ids, out.response_mask) if m]
    assert tokenizer.decode(generated).count("<answer>") == sum(r.count("<answer>") for r in replies)
    env_text = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if not m])
    assert "user" in env_text and "the oracle says" not in env_text
    assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if not m)
    if hasattr(reading, "registry"):
        assert "ragen_agent" in reading.registry


# -- OpenRLHF --------------------------------------------------------------------------------------------

def openrlhf_reading() -> types.ModuleType:
    module = types.ModuleType("openrlhf.utils.agent")

    class AgentInstanceBase:
        def __init__(self, *args, **kwargs):
            pass

        async def reset(self, states, **kwargs):
            return states

        async def step(self, states, **kwargs):
            raise NotImplementedError

    class MultiTurnAgentExecutor:
        """The protocol: one instance per prompt; reset; then generate, step, and append reply and feedback."""

        def __init__(self, agent_instance_cls):
            assert issubclass(agent_instance_cls, AgentInstanceBase)
            self.agent_instance_cls = agent_instance_cls

        async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine):
            agent = self.agent_instance_cls()
            text = (await agent.reset({"observation": prompt, "label": label}))["observation"]
            tokens = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
            ranges, total = [], 0.0
            while True:
                action_tokens, action_text = await llm_engine.generate(tokens, sampling_params)
                ranges.append((len(tokens), len(tokens) + len(action_tokens)))
                result = await agent.step({"observation_text": text, "action_text": action_text, "label": label,
                                           "sampling_params": sampling_params})
                total += result["rewards"].item()
                feedback = result["environment_feedback"]
                text = text + action_text + feedback
                tokens = tokens + action_tokens + hf_tokenizer(feedback, add_special_tokens=False)["input_ids"]
                if result["done"]:
                    break
            return {"reward": total, "scores": result.get("scores"), "observation_tokens": tokens,
                    "action_ranges": ranges}

    module.AgentInstanceBase, module.MultiTurnAgentExecutor = AgentInstanceBase, MultiTurnAgentExecutor
    return module


def test_openrlhf_agent_plays_the_episode(monkeypatch, tokenizer):
    install("openrlhf.utils.agent", openrlhf_reading(), monkeypatch)
    openrlhf = fresh("ragen_envs.integrations.openrlhf")
    row = openrlhf.dataset_rows(ENV, 3, tokenizer)[2]
    assert json.loads(row["label"]) == {"env_id": ENV, "seed": 2}
    replies = scripted_replies(2)

    class Engine:
        calls = 0

        async def generate(self, tokens, sampling_params):
            text = replies[self.calls]
            self.calls += 1
            return chat_encoding.tokenize(tokenizer, text) + [tokenizer.eos_token_id], text

    executor = openrlhf.agent_executor(tokenizer)()
    out = asyncio.run(executor.execute(row["prompt"], row["label"], None, 4096, tokenizer, Engine()))
    expected, _ = local_episode(2, replies)
    assert out["reward"] == pytest.approx(sum(expected)) and len(out["action_ranges"]) == len(replies)
    # What OpenRLHF assembled is the chat the env held, token for token.
    chat = ChatEnv(ENV)
    chat.reset(seed=2)
    for reply in replies:
        chat.step(reply)
    rendered = chat_encoding.render(tokenizer, chat.messages, add_generation_prompt=False)
    assert tokenizer.decode(out["observation_tokens"]) == rendered.rstrip("\n")


# -- every adapter names what to install ---------------------------------------------------------------

@pytest.mark.parametrize("adapter, framework, extra", [
    ("trl", "trl", "ragen-envs[trl]"), ("skyrl", "skyrl_gym", "ragen-envs[skyrl]"),
    ("verifiers", "verifiers", "pip install verifiers"), ("rllm", "rllm", "rLLM"),
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
    assert len(seed_rows(SMOKE, 2)) == 2
