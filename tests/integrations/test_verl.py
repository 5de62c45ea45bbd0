"""ragen_envs.integrations.verl against verl itself (0.9.1, in the venv `make test-frameworks` builds):
the dataset rows go through verl's RLHFDataset and collate_fn into a DataProto, and verl's
AgentLoopWorker, configured by its own ppo_trainer.yaml, runs our agent loop on it. No Ray, no GPU:
only the LLM server is scripted (an object with LLMServerClient.generate's signature that returns
verl's TokenOutput), answering each turn with the episode's scripted generation. The diagnosis on verl
(ragen_envs.integrations.verl_diagnose, ragen_envs.diagnose.read_verl) is tested on such a batch: its
log-probs through verl's own log-prob pass, its dump written by verl's own dump method."""

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from ragen_envs.agent import ChatEnv, chat_encoding
from episodes import ENV, PREFILL, local_episode, oracle_generation, require, scripted_generations

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


# -- the diagnosis on verl's DataProto and verl's rollout dumps (ragen_envs.integrations.verl_diagnose,
# ragen_envs.diagnose.read_verl) --------------------------------------------------------------------------
SEEDS = (1, 2)
# The G = 3 samples of a board: the oracle throughout; an invalid first move, then the oracle; an unformatted
# first reply (no reasoning), then the oracle. Returns 1, 0.9 and 0.9: the group's rewards vary.
OPENINGS = (None, "I am not sure which way to go</think><answer>Jump</answer>", "no format")


def oracle_script(seed: int, opening: str | None) -> list[str]:
    """An episode's generations: ``opening`` (if any), then the oracle's moves until it ends."""
    chat = ChatEnv(ENV)
    chat.reset(seed=seed)
    script = [] if opening is None else [opening]
    for text in script:
        chat.step(PREFILL + text)
    while not chat.done:
        script.append(oracle_generation(chat))
        chat.step(PREFILL + script[-1])
    return script


class GroupServer:
    """LLMServerClient.generate for groups of samples of one board: an episode's first call takes the next
    unused script of its board, later calls go on with the script whose first reply the prompt holds."""

    def __init__(self, tokenizer, scripts: dict[int, list[list[str]]], first_prompts: dict[int, list[int]]):
        from verl.workers.rollout.replica import TokenOutput

        self.TokenOutput, self.tokenizer = TokenOutput, tokenizer
        self.scripts, self.first_prompts = scripts, first_prompts
        self.taken = {seed: 0 for seed in scripts}
        self.calls: dict[tuple[int, int], int] = {}

    def ids(self, text: str) -> list[int]:
        return chat_encoding.tokenize(self.tokenizer, text) + [self.tokenizer.eos_token_id]

    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict, **kwargs):
        seed = next(s for s, first in self.first_prompts.items() if prompt_ids[:len(first)] == first)
        after = prompt_ids[len(self.first_prompts[seed]):]
        if not after:
            variant, self.taken[seed] = self.taken[seed], self.taken[seed] + 1
        else:
            variant = next(v for v, script in enumerate(self.scripts[seed])
                           if after[:len(self.ids(script[0]))] == self.ids(script[0]))
        n = self.calls[seed, variant] = self.calls.get((seed, variant), 0) + 1
        ids = self.ids(self.scripts[seed][variant][n - 1])
        return self.TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def played(verl_config, tmp_path_factory):
    """Two boards, three samples each, played by verl's AgentLoopWorker with our agent loop (the prompt ends
    with the <think> prefill), the batch carrying verl's uid. Returns the output batch, the tokenizer and
    per row (its board's first prompt ids, the first reply's reasoning text or None, the episode's return)."""
    import datasets
    from torch.utils.data import DataLoader
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import ragen_envs.integrations.verl as ragen_verl  # registers "ragen_agent"

    path = tmp_path_factory.mktemp("verl-groups") / "train.parquet"
    datasets.Dataset.from_list(ragen_verl.dataset_rows(ENV, 3)[1:]).to_parquet(str(path))
    worker = AgentLoopWorker(verl_config, llm_client=None)
    tokenizer = worker.tokenizer
    dataset = RLHFDataset(str(path), tokenizer, verl_config.data)
    batch = DataProto.from_single_dict(next(iter(DataLoader(dataset, batch_size=2, collate_fn=collate_fn))))
    batch.non_tensor_batch["uid"] = np.array(["board-1", "board-2"], dtype=object)  # as verl's fit sets it
    batch = batch.repeat(repeat_times=len(OPENINGS), interleave=True)
    scripts = {seed: [oracle_script(seed, opening) for opening in OPENINGS] for seed in SEEDS}
    first_prompts = {seed: chat_encoding.encode_chat(tokenizer, local_episode(seed, []).messages)
                     + chat_encoding.tokenize(tokenizer, PREFILL) for seed in SEEDS}
    server = GroupServer(tokenizer, scripts, first_prompts)
    worker.llm_client = server
    out = asyncio.run(worker.generate_sequences(batch))
    rows = []
    for row in range(len(out)):
        seed = SEEDS[row // len(OPENINGS)]
        response = out.batch["responses"][row].tolist()
        variant = next(v for v, script in enumerate(scripts[seed])
                       if response[:len(server.ids(script[0]))] == server.ids(script[0]))
        first = scripts[seed][variant][0]
        reasoning = first.split("</think>")[0] if "</think>" in first else None
        rows.append((first_prompts[seed], reasoning, local_episode(seed, scripts[seed][variant]).episode_return))
    assert sorted(server.calls) == [(s, v) for s in SEEDS for v in range(len(OPENINGS))]
    return out, tokenizer, rows


def expected_loglik(policy, tokenizer, rows):
    """cross_loglik on the ids the model read: each board's first prompt (ending with <think>) and the
    reasoning tokens of its samples' first replies, by our transformers backend."""
    from ragen_envs.diagnose.mi import cross_loglik

    prompts, reasonings = [], []
    for x, reasoning, _ in rows:
        if x not in prompts:
            prompts.append(x)
            reasonings.append([])
        if reasoning is not None:
            z = chat_encoding.tokenize(tokenizer, reasoning)
            reasonings[prompts.index(x)].append(z)
    return cross_loglik(policy, prompts, reasonings)


class ActorGroup:
    """verl's actor worker group, its compute_log_prob only: the tiny model on verl's no-padding input, each
    position's log-probability of the next token (log_softmax, then gather), as verl's engine computes it."""

    def __init__(self, model):
        self.model, self.temperatures = model, []

    def compute_log_prob(self, data):
        import torch
        from verl.utils import tensordict_utils as tu

        temperature = tu.get(data, "temperature")
        self.temperatures.append(temperature)
        out = []
        for ids, positions in zip(data["input_ids"].unbind(), data["position_ids"].unbind()):
            with torch.no_grad():
                logits = self.model(input_ids=ids[None], position_ids=positions[None]).logits[0].float()
            logp = torch.log_softmax(logits / temperature, dim=-1)
            out.append(logp.gather(-1, torch.roll(ids, -1)[:, None])[:, 0])
        nested = torch.nested.as_nested_tensor(out, layout=torch.jagged)
        return tu.get_tensordict({"log_probs": nested, "entropy": torch.zeros_like(nested)}, {"metrics": {"mfu": 0.0}})


def test_cross_pairs_scored_by_verls_log_prob_pass_equal_cross_loglik(played, verl_config, tiny_model):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from ragen_envs.agent.backends.transformers import TransformersPolicy
    from ragen_envs.diagnose import MIZScoreEMA, mi_metrics, mi_metrics_code
    from ragen_envs.integrations.verl_diagnose import cross_pairs, mi_from_log_probs, pair_loglik

    out, tokenizer, rows = played
    pairs = cross_pairs(out, tokenizer)
    # verl 0.9.1's trainer computes log-probs with _compute_old_log_prob (to_tensordict, no-padding, the
    # actor group, back to padding): run it, with only the actor group standing in
    trainer = object.__new__(RayPPOTrainer)
    trainer.config, trainer.actor_rollout_wg = verl_config, ActorGroup(tiny_model)
    scored, _ = trainer._compute_old_log_prob(pairs)
    assert trainer.actor_rollout_wg.temperatures == [1.0]
    loglik, lengths = pair_loglik(pairs, scored.batch["old_log_probs"])
    policy = TransformersPolicy(tiny_model, tokenizer, device="cpu")
    expected, expected_lengths = expected_loglik(policy, tokenizer, rows)
    # 2 boards x 2 reasonings (the unformatted first reply has none) x 2 prompts
    assert len(pairs) == 8 and loglik.shape == (2, 2, 2)
    assert lengths.tolist() == expected_lengths.tolist()
    assert len(set(lengths[lengths > 0].tolist())) > 1  # reasonings of unequal length: a misaligned sum shows
    assert np.abs(loglik - expected).max() < 1e-4
    metrics = mi_from_log_probs(pairs, scored, emas={"mi_code": MIZScoreEMA(variant="code")})
    paper, code = mi_metrics(expected, expected_lengths), mi_metrics_code(expected, expected_lengths)
    assert {k: metrics[f"mi/{k}"] for k in paper} == pytest.approx(paper, abs=1e-4)
    assert {k: metrics[f"mi_code/{k}"] for k in code} == pytest.approx(code, abs=1e-4)
    assert "mi_code/mi_zscore_ema" in metrics and "mi/mi_zscore_ema" not in metrics
    # verl pads a batch to a multiple of its ranks: the padded rows' log-probs are ignored
    from verl.protocol import pad_dataproto_to_divisor

    padded, pad = pad_dataproto_to_divisor(pairs, 3)
    assert pad == 1 and np.abs(pair_loglik(pairs, trainer._compute_old_log_prob(padded)[0])[0] - expected).max() < 1e-4


def test_cross_pairs_draws_at_most_max_pairs_as_the_trainer_draws(played):
    import random

    from ragen_envs.diagnose.mi import draw
    from ragen_envs.integrations.verl_diagnose import cross_pairs

    out, tokenizer, rows = played
    found = [(row // len(OPENINGS), reasoning) for row, (_, reasoning, _) in enumerate(rows) if reasoning]
    assert len(found) == 4  # two a board: any 3 of them span both boards
    picks = set()
    for seed in range(4):
        pairs = cross_pairs(out, tokenizer, max_pairs=3, seed=seed)
        drawn = draw(found, 3, random.Random(seed))
        chosen = {(int(i), int(k)): tokenizer.decode(z[m.bool()]) for i, k, z, m in zip(
            pairs.non_tensor_batch["mi_group"], pairs.non_tensor_batch["mi_sample"], pairs.batch["responses"],
            pairs.batch["response_mask"])}
        assert len(pairs) == 3 * 2 and sorted(chosen.values()) == sorted(z for _, z in drawn)
        picks.add(frozenset(chosen.values()))
    assert len(picks) > 1  # the seed matters


def test_filter_groups_keeps_what_select_groups_keeps():
    import torch
    from verl.protocol import DataProto

    from ragen_envs.diagnose.filtering import FilterConfig, select_groups
    from ragen_envs.integrations.verl_diagnose import filter_groups

    # three groups of four, shuffled as balance_batch leaves them; b has no reward variance
    uids = ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "a", "b"]
    returns = {"a": [0.0, 1.0, 0.0, 1.0], "b": [1.0] * 4, "c": [0.0, 3.0, 0.0, 3.0]}
    taken = {u: iter(r) for u, r in returns.items()}
    per_row = [next(taken[u]) for u in uids]
    scores = torch.zeros(12, 5)
    scores[:, 0], scores[:, -1] = torch.tensor(per_row) / 2, torch.tensor(per_row) / 2  # summed over tokens
    attention = (torch.arange(7)[None, :] < torch.arange(1, 13)[:, None] % 7 + 1).long()
    batch = DataProto.from_dict(tensors={"token_level_scores": scores, "attention_mask": attention,
                                         "row": torch.arange(12)},
                                non_tensors={"uid": np.array(uids, dtype=object)},
                                meta_info={"global_token_num": attention.sum(-1).tolist(), "temperature": 1.0})
    table = np.array([returns[u] for u in ("a", "b", "c")])
    for config, groups in ((FilterConfig("top_p", 0.9), {"a", "c"}), (FilterConfig("top_k", 1 / 3), {"c"}),
                           (FilterConfig("top_p", 0.9, "softmax"), None)):
        kept, stats = filter_groups(batch, config)
        chosen = {("a", "b", "c")[g] for g in select_groups(table, config)}
        assert groups is None or chosen == groups
        assert kept.batch["row"].tolist() == [r for r, u in enumerate(uids) if u in chosen]  # order kept
        assert list(kept.non_tensor_batch["uid"]) == [u for u in uids if u in chosen]
        assert kept.meta_info["global_token_num"] == kept.batch["attention_mask"].sum(-1).tolist()
        assert stats["filter/kept_groups"] == len(chosen) and stats["filter/kept_rows"] == 4 * len(chosen)
        assert stats["filter/zero_variance_share"] == pytest.approx(1 / 3) and stats["filter/skipped"] == 0.0
    assert batch.meta_info["global_token_num"] == attention.sum(-1).tolist() and len(batch) == 12  # untouched
    # no group varies: top-p keeps none, and says the step is skipped
    flat = DataProto.from_dict(tensors={"token_level_scores": torch.ones(4, 2)},
                               non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    kept, stats = filter_groups(flat)
    assert len(kept) == 0 and stats["filter/skipped"] == 1.0 and stats["filter/zero_variance_share"] == 1.0
    with pytest.raises(ValueError, match="uid.*same size"):
        filter_groups(DataProto.from_dict(tensors={"token_level_scores": torch.ones(3, 2)},
                                          non_tensors={"uid": np.array(["a", "a", "b"], dtype=object)}))
    with pytest.raises(ValueError, match="uid"):
        filter_groups(DataProto.from_dict(tensors={"token_level_scores": torch.ones(2, 2)}))
    with pytest.raises(ValueError, match="rm_scores"):
        filter_groups(flat, reward_key="rm_scores")


def test_verls_rollout_dump_read_back_and_diagnosed(played, tmp_path, tiny_model):
    """verl's own dump (RayPPOTrainer._log_rollout_data, as fit calls it with trainer.rollout_data_dir) of
    our agent loop's batch, read back: groups by input, the first reply's reasoning, the episode's return,
    the prompt ids the model read; diagnosed end to end, it equals scoring those ids."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import extract_reward

    from ragen_envs.agent.backends.transformers import TransformersPolicy
    from ragen_envs.diagnose import diagnose_records, encode_pairs, mi_metrics, mi_metrics_code
    from ragen_envs.diagnose.read_verl import FORMAT, matches, read

    out, tokenizer, rows = played
    reward, extra = extract_reward(out)  # as fit does before it dumps
    out.batch["token_level_scores"] = reward
    trainer = object.__new__(RayPPOTrainer)  # the dump needs only the tokenizer, the step and its writer thread
    trainer.tokenizer = tokenizer
    trainer._init_dump_executor()
    for step in (1, 2):
        trainer.global_steps = step
        trainer._log_rollout_data(out, extra, {}, str(tmp_path / "rollouts"))
    trainer._shutdown_dump_executor()
    first = json.loads((tmp_path / "rollouts" / "1.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "step"} <= set(first) and "<|im_start|>" not in first["input"]
    assert FORMAT == "verl rollout dump" and matches(tmp_path / "rollouts")

    records = read(tmp_path / "rollouts", tokenizer=tokenizer)
    assert [(r.step, r.turn, r.group) for r in records] == [
        (s, 0, n // len(OPENINGS)) for s in (1, 2) for n in range(len(rows))]
    for record, (x, reasoning, episode_return) in zip(records, rows * 2):
        assert record.reasoning == (reasoning or "") and record.reward == pytest.approx(episode_return)
        assert encode_pairs(tokenizer, [record.prompt], [["x"]])[0] == [x]  # the ids the model read
    unpadded = out.batch["prompts"][0][out.batch["attention_mask"][0, :out.batch["prompts"].shape[1]].bool()]
    assert unpadded.tolist() == rows[0][0]

    policy = TransformersPolicy(tiny_model, tokenizer, device="cpu")
    diagnosis = diagnose_records(policy, tokenizer, records)
    loglik, lengths = expected_loglik(policy, tokenizer, rows)
    paper, code = mi_metrics(loglik, lengths), mi_metrics_code(loglik, lengths)
    for row in diagnosis["rows"]:
        assert row["groups"] == 2 and row["episodes"] == 6 and row["zero_variance_share"] == 0.0
        assert {k: row[f"mi/{k}"] for k in paper} == pytest.approx(paper, abs=1e-4)
        assert {k: row[f"mi_code/{k}"] for k in code} == pytest.approx(code, abs=1e-4)
    # read without the tokenizer, the prompts lack the template's special tokens: the scores differ
    plain = diagnose_records(policy, tokenizer, read(tmp_path / "rollouts"))
    assert plain["rows"][0]["mi/conditional_entropy"] != pytest.approx(paper["conditional_entropy"], abs=1e-4)
