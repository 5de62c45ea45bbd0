"""ragen_envs.integrations.areal against AReaL itself (1.0.4, installed with --no-deps in the venv
`make test-frameworks` builds: it pins torch < 2.11): our workflow runs in AReaL's own
`WorkflowExecutor.rollout_batch` with `check_trajectory_format` on (a trajectory that fails the check
is rejected and missing from the batch), against an inference engine that only scripts the model:
`agenerate(ModelRequest) -> ModelResponse` with the episode's scripted generation, its tokens,
log-probs and policy version."""

import asyncio

import pytest

from ragen_envs.agent import chat_encoding
from episodes import ENV, PREFILL, local_episode, require, scripted_generations

require("areal")

VERSION = 7


def scripted_logprobs(n):
    return [-0.5 - 0.01 * k for k in range(n)]


class ScriptedEngine:
    """AReaL's inference engine as a workflow and the executor use it: `agenerate` and `get_version`.
    The episode is known by its first prompt, its turn by how many replies it had."""

    def __init__(self, tokenizer, first_prompts: dict[int, list[int]], generations: dict[int, list[str]]):
        self.tokenizer, self.first_prompts, self.generations = tokenizer, first_prompts, generations
        self.requests = {seed: [] for seed in generations}

    def get_version(self):
        return VERSION

    async def agenerate(self, req):
        from areal.api import ModelResponse

        seed = next(s for s, p in self.first_prompts.items() if req.input_ids[:len(p)] == p)
        self.requests[seed].append(req)
        text = self.generations[seed][len(self.requests[seed]) - 1]
        ids = chat_encoding.tokenize(self.tokenizer, text) + [self.tokenizer.eos_token_id]
        await asyncio.sleep(0)
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=ids,
                             output_logprobs=scripted_logprobs(len(ids)), output_versions=[VERSION] * len(ids),
                             stop_reason="stop", tokenizer=self.tokenizer)


@pytest.mark.timeout(300)
def test_areal_workflow_executor_runs_the_episodes(tokenizer):
    from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
    from areal.infra.workflow_executor import WorkflowExecutor, check_trajectory_format
    from areal.utils import stats_tracker

    from ragen_envs.integrations.areal import RagenWorkflow, dataset_rows

    rows = dataset_rows(ENV, 4)[2:]
    assert [r["seed"] for r in rows] == [2, 3] and all(r["env_id"] == ENV for r in rows)
    generations = {r["seed"]: scripted_generations(r["seed"]) for r in rows}
    first = {r["seed"]: chat_encoding.encode_chat(tokenizer, r["messages"]) for r in rows}
    engine = ScriptedEngine(tokenizer, first, generations)
    workflow = RagenWorkflow(GenerationHyperparameters(max_new_tokens=64), tokenizer)
    executor = WorkflowExecutor(InferenceEngineConfig(consumer_batch_size=2, max_concurrent_rollouts=2,
                                                      check_trajectory_format=True), engine)
    executor.initialize(train_data_parallel_size=1)
    try:
        batch = executor.rollout_batch(rows, workflow)
    finally:
        executor.destroy()
    assert len(batch) == 2  # none rejected: each passed check_trajectory_format
    stats = stats_tracker.get("rollout").export()
    returns = [local_episode(s, g).episode_return for s, g in generations.items()]
    assert stats["rollout/reward"] == pytest.approx(sum(returns) / 2) and stats["rollout/success"] == 1.0
    assert stats["rollout/num_turns"] == pytest.approx(sum(map(len, generations.values())) / 2)

    for traj in batch:
        assert check_trajectory_format(traj) and {t.shape[0] for t in traj.values()} == {1}
        ids = traj["input_ids"][0].tolist()
        seed = next(s for s, p in first.items() if ids[:len(p)] == p)
        chat = local_episode(seed, generations[seed])
        assert chat.success
        assert traj["rewards"].tolist() == pytest.approx([chat.episode_return])  # what AReaL's actor trains on
        # The sequence is the chat the env held, token for token, prefill included.
        rendered = chat_encoding.render(tokenizer, chat.messages, add_generation_prompt=False)
        assert tokenizer.decode(ids) == rendered.rstrip("\n")
        mask = traj["loss_mask"][0].tolist()
        replies = [chat_encoding.tokenize(tokenizer, g) + [tokenizer.eos_token_id] for g in generations[seed]]
        assert [t for t, m in zip(ids, mask) if m] == [t for r in replies for t in r]
        logprobs, versions = traj["logprobs"][0].tolist(), traj["versions"][0].tolist()
        assert [lp for lp, m in zip(logprobs, mask) if m] == pytest.approx(
            [lp for r in replies for lp in scripted_logprobs(len(r))])
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if not m)
        assert [v for v, m in zip(versions, mask) if m] == [VERSION] * sum(mask)
        assert all(v == -1 for v, m in zip(versions, mask) if not m)
        assert traj["attention_mask"].all()
        requests = engine.requests[seed]  # every prompt ends with the prefill, as this project's runner prompts
        assert len(requests) == len(generations[seed])
        assert all(tokenizer.decode(r.input_ids).endswith("<|im_start|>assistant\n" + PREFILL) for r in requests)
        assert all(tokenizer.eos_token_id in r.gconfig.stop_token_ids for r in requests)
