"""ragen_envs.integrations.openrlhf against OpenRLHF itself (0.11.2, installed with --no-deps in the
venv `make test-frameworks` builds, as OpenRLHF documents for machines where flash-attn does not
build): our agent file goes through OpenRLHF's own --agent_func_path loader (vllm_engine's
_load_agent_executor; vLLM stubbed only so that module imports, as OpenRLHF's own tests stub it),
its MultiTurnAgentExecutor plays the episode against a scripted engine, and its SamplesGenerator
turns the result into the Experience PPO trains on."""

import asyncio
import json
import sys
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest

from ragen_envs.agent import chat_encoding
from episodes import ENV, PREFILL, local_episode, require, scripted_generations

require("openrlhf")


@pytest.fixture
def openrlhf_modules(monkeypatch):
    """OpenRLHF's loader and samples generator, imported with vLLM stubbed (no CPU build of it here)."""
    for name in ("vllm", "vllm.inputs", "vllm.utils"):
        monkeypatch.setitem(sys.modules, name, MagicMock())
    for name in [m for m in sys.modules if m.startswith("openrlhf.trainer")]:
        monkeypatch.delitem(sys.modules, name)
    from openrlhf.trainer.ppo_utils import samples_generator
    from openrlhf.trainer.ray import vllm_engine

    return vllm_engine, samples_generator


class ScriptedEngine:
    """vLLM's generate as OpenRLHF's executor calls it: token ids in, a RequestOutput-like answer out."""

    def __init__(self, tokenizer, generations):
        self.tokenizer, self.generations, self.prompts = tokenizer, generations, []

    async def generate(self, token_ids, sampling_params, multi_modal_data=None):
        self.prompts.append(list(token_ids))
        text = self.generations[len(self.prompts) - 1]
        ids = chat_encoding.tokenize(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        logprobs = [{t: SimpleNamespace(logprob=-0.5 - 0.01 * k)} for k, t in enumerate(ids)]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason="stop",
                                                        logprobs=logprobs)])


def test_openrlhf_loads_our_agent_and_plays_the_episode(openrlhf_modules, tokenizer, tmp_path):
    from ragen_envs.agent.default_model import default_model_path
    from ragen_envs.integrations.openrlhf import dataset_rows

    vllm_engine, samples_generator = openrlhf_modules
    agent_file = tmp_path / "agent_func.py"
    agent_file.write_text("from ragen_envs.integrations.openrlhf import agent_executor\n"
                          f"AgentExecutor = agent_executor({str(default_model_path())!r})\n")
    executor = vllm_engine._load_agent_executor(str(agent_file))

    row = dataset_rows(ENV, 3, tokenizer)[2]
    assert json.loads(row["label"]) == {"env_id": ENV, "seed": 2} and row["prompt"].endswith(PREFILL)
    generations = scripted_generations(2)
    engine = ScriptedEngine(tokenizer, generations)
    params = SimpleNamespace(max_tokens=None, logprobs=1)  # vLLM's SamplingParams, as OpenRLHF's tests stub it
    out = asyncio.run(executor.execute(row["prompt"], row["label"], params, 4096, tokenizer, engine))

    chat = local_episode(2, generations)
    assert chat.success and len(engine.prompts) == len(generations) == len(out["action_ranges"])
    assert out["reward"] == pytest.approx(chat.episode_return) and out["scores"].item() == 1.0
    # What OpenRLHF assembled is the chat the env held, token for token, prefill included.
    rendered = chat_encoding.render(tokenizer, chat.messages, add_generation_prompt=False)
    assert tokenizer.decode(out["observation_tokens"]) == rendered.rstrip("\n")
    for prompt in engine.prompts:  # every prompt ends with the prefill, as this project's runner prompts
        assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n" + PREFILL)

    experience = samples_generator.SamplesGenerator._process_response_into_experience(None, out, max_len=4096)
    assert experience.rewards.item() == pytest.approx(chat.episode_return)  # what PPO trains on
    assert experience.scores.item() == 1.0 and experience.info["success"].item() == 1.0
    sequence = experience.sequences[0].tolist()
    mask = [0] + experience.action_mask[0].tolist()  # OpenRLHF's mask starts at the second token
    generated = [t for t, m in zip(sequence, mask) if m]
    assert generated == [t for text in generations
                         for t in chat_encoding.tokenize(tokenizer, text) + [tokenizer.eos_token_id]]
    logprobs = [0.0] + experience.rollout_log_probs[0].tolist()
    assert [lp for lp, m in zip(logprobs, mask) if m] == pytest.approx(
        [-0.5 - 0.01 * k for text in generations for k in range(len(chat_encoding.tokenize(tokenizer, text)) + 1)])
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
