"""ragen_envs.integrations.verifiers against verifiers itself (0.3.1, the last release with the classic
MultiTurnEnv/Rubric API, in the venv `make test-frameworks` builds): verifiers' own `generate` runs the
rollouts and scores them with the rubric; only the model's client is scripted (a verifiers Client
whose native call answers each turn with the episode's scripted generation, tokens and log-probs)."""

import asyncio
import time

import pytest

from episodes import ENV, PREFILL, local_episode, require, scripted_generations

vf = require("verifiers")


def scripted_client(generations: dict[int, list[str]]):
    from verifiers.legacy.clients.client import Client
    from verifiers.legacy.types import Response, ResponseMessage, ResponseTokens

    class ScriptedClient(Client):
        """A model behind verifiers' Client interface: the k-th reply of episode `seed` is its k-th
        generation; its tokens are the characters' codes, each with log-prob -0.5."""

        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            state = kwargs["state"]
            return generations[state["info"]["seed"]][len(state["trajectory"])], len(prompt)

        async def raise_from_native_response(self, response):
            pass

        async def from_native_response(self, response):
            text, prompt_length = response
            ids = [ord(c) for c in text]
            tokens = ResponseTokens(prompt_ids=list(range(prompt_length)), prompt_mask=[0] * prompt_length,
                                    completion_ids=ids, completion_mask=[1] * len(ids),
                                    completion_logprobs=[-0.5] * len(ids))
            return Response(id="scripted", created=int(time.time()), model="scripted", message=ResponseMessage(
                content=text, finish_reason="stop", is_truncated=False, tokens=tokens))

        async def close(self):
            pass

    return ScriptedClient(None)


@pytest.mark.parametrize("prefilled", [False, True], ids=["reply-after-prefill", "reply-with-its-own-think"])
def test_verifiers_generate_plays_and_scores_the_episodes(prefilled):
    from ragen_envs.integrations.verifiers import load_environment

    env = load_environment(ENV, num_examples=4)
    rows = [env.dataset[i] for i in (2, 3)]
    assert [r["info"]["seed"] for r in rows] == [2, 3]
    # A model that writes the opening <think> itself is read as one that continued the prefill.
    generations = {seed: [(PREFILL if prefilled else "") + g for g in scripted_generations(seed)] for seed in (2, 3)}
    results = asyncio.run(env.generate(rows, client=scripted_client(generations), model="scripted",
                                       state_columns=["trajectory"], on_progress=lambda *a, **k: None))
    outputs = sorted(results["outputs"], key=lambda o: o["info"]["seed"])
    for out, seed in zip(outputs, (2, 3)):
        chat = local_episode(seed, scripted_generations(seed))
        assert chat.success and out["error"] is None and out["is_completed"]
        assert out["reward"] == pytest.approx(chat.episode_return)  # the rubric: the return, weight 1
        assert out["metrics"]["success"] == 1.0 and out["metrics"]["episode_return"] == pytest.approx(
            chat.episode_return)
        assert out["metrics"]["num_turns"] == len(generations[seed])  # verifiers counts the model's replies
        # The completion is the chat the env held after the first prompt: replies and env messages.
        completion = [(m["role"], m["content"]) for m in out["completion"]]
        expected = [(m["role"], m["content"]) for m in chat.messages[2:]]
        assert [c for c, _ in completion] == [c for c, _ in expected]
        assert [t for r, t in completion if r == "user"] == [t for r, t in expected if r == "user"]
        # Each step keeps the model's tokens and log-probs for verifiers' trainer, all in the loss.
        steps = out["trajectory"]
        assert len(steps) == len(generations[seed])
        for step, text in zip(steps, generations[seed]):
            assert step["tokens"]["completion_ids"] == [ord(c) for c in text]
            assert step["tokens"]["completion_mask"] == [1] * len(text)
            assert step["tokens"]["completion_logprobs"] == [-0.5] * len(text)
