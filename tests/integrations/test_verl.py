"""ragen_envs.integrations.verl against verl itself (0.9.1, in the venv `make test-frameworks` builds):
the dataset rows go through verl's RLHFDataset and collate_fn into a DataProto, and verl's
AgentLoopWorker, configured by its own ppo_trainer.yaml, runs our agent loop on it. No Ray, no GPU:
only the LLM server is scripted (an object with LLMServerClient.generate's signature that returns
verl's TokenOutput), answering each turn with the episode's scripted generation."""

import asyncio
from pathlib import Path

import pytest

from ragen_envs.agent import chat_encoding
from episodes import ENV, PREFILL, local_episode, require, scripted_generations

verl = require("verl")


class ScriptedServer:
    """LLMServerClient.generate's signature; each call answers with the next scripted generation + EOS."""

    def __init__(self, tokenizer, generations: dict[int, list[str]], first_prompts: dict[int, list[int]]):
        from verl.workers.rollout.replica import TokenOutput

        self.TokenOutput, self.tokenizer, self.generations = TokenOutput, tokenizer, generations
        self.first_prompts = first_prompts  # an episode is known by its first prompt, which names its board
        self.prompts: dict[int, list[list[int]]] = {seed: [] for seed in generations}

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict, image_data=None,
                       video_data=None, audio_data=None, mm_processor_kwargs=None, **kwargs):
        seed = next(s for s, first in self.first_prompts.items() if prompt_ids[:len(first)] == first)
        self.prompts[seed].append(list(prompt_ids))
        text = self.generations[seed][len(self.prompts[seed]) - 1]
        ids = chat_encoding.tokenize(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        return self.TokenOutput(token_ids=ids, log_probs=[-0.25 - 0.01 * i for i in range(len(ids))],
                                stop_reason="completed")


@pytest.fixture(scope="module")
def verl_config():
    from hydra import compose, initialize_config_dir

    from ragen_envs.agent.default_model import default_model_path

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={default_model_path()}", "actor_rollout_ref.rollout.name=vllm",
            "data.max_prompt_length=1024", "data.max_response_length=2048"])


@pytest.mark.parametrize("prefill_think", [True, False], ids=["prefilled", "no-prefill"])
def test_verl_agent_loop_worker_plays_the_episodes(verl_config, tmp_path, monkeypatch, prefill_think):
    import datasets
    from torch.utils.data import DataLoader
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import ragen_envs.integrations.verl as ragen_verl  # registers "ragen_agent"
    from ragen_envs.agent import ChatEnvConfig

    # The prefill follows the loop's ChatEnvConfig, as RolloutRunner's follows its config; without it
    # the model writes the opening <think> itself.
    monkeypatch.setattr(ragen_verl.RagenAgentLoop, "chat_config", ChatEnvConfig(prefill_think=prefill_think))
    prefill = PREFILL if prefill_think else ""

    rows = ragen_verl.dataset_rows(ENV, 3)[1:]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    worker = AgentLoopWorker(verl_config, llm_client=None)
    tokenizer = worker.tokenizer
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, verl_config.data)
    batch = DataProto.from_single_dict(next(iter(DataLoader(dataset, batch_size=2, collate_fn=collate_fn))))
    generations = {seed: [PREFILL[len(prefill):] + g for g in scripted_generations(seed)] for seed in (1, 2)}
    first_prompts = {seed: chat_encoding.encode_chat(tokenizer, local_episode(seed, []).messages)
                     + chat_encoding.tokenize(tokenizer, prefill) for seed in (1, 2)}
    worker.llm_client = server = ScriptedServer(tokenizer, generations, first_prompts)
    out = asyncio.run(worker.generate_sequences(batch))

    prompt_width = out.batch["prompts"].shape[1]
    for i, seed in enumerate((1, 2)):
        chat = local_episode(seed, generations[seed], prefill)
        assert chat.success and server.prompts[seed], "the scripted episode is won through verl's worker"
        attention = out.batch["attention_mask"][i]
        prompt = out.batch["prompts"][i][attention[:prompt_width].bool()].tolist()
        n = int(attention[prompt_width:].sum())
        response = out.batch["responses"][i][:n].tolist()
        mask = out.batch["response_mask"][i][:n].tolist()
        logprobs = out.batch["rollout_log_probs"][i][:n].tolist()
        # The reward: the episode's return, in rm_scores at the last response token and nowhere else.
        rm = out.batch["rm_scores"][i]
        assert rm[n - 1].item() == pytest.approx(chat.episode_return) and rm.abs().sum().item() == pytest.approx(
            abs(chat.episode_return))
        assert out.non_tensor_batch["success"][i] is True
        # verl counts user and assistant messages, not the system prompt.
        assert out.non_tensor_batch["__num_turns__"][i] == len(chat.messages) - 1 == 2 * len(generations[seed])
        # The first prompt is the env's, ending with the prefill (if any), as this project's runner prompts.
        assert prompt == first_prompts[seed]
        # Each server prompt is the sequence so far: prompt, replies and env tokens, one token sequence.
        for p in server.prompts[seed]:
            assert p == (prompt + response)[:len(p)]
        # Mask 1 exactly on the generated tokens, with their log-probs; env tokens 0 and 0.0.
        generated = [t for t, m in zip(response, mask) if m]
        expected = [t for text in generations[seed]
                    for t in chat_encoding.tokenize(tokenizer, text) + [tokenizer.eos_token_id]]
        assert generated == expected
        sampled = [lp for lp, m in zip(logprobs, mask) if m]
        assert sampled == pytest.approx([-0.25 - 0.01 * k for text in generations[seed]
                                         for k in range(len(chat_encoding.tokenize(tokenizer, text)) + 1)])
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
        env_text = tokenizer.decode([t for t, m in zip(response, mask) if not m])
        # every env message ends in the generation prompt and the prefill, which the next reply continues
        first = [chat_encoding.render(tokenizer, chat.messages[:2], g) for g in (False, True)]
        opening = first[1][len(first[0]):] + prefill
        assert env_text.count(opening) == len(generations[seed]) - 1 and "the oracle says" not in env_text
