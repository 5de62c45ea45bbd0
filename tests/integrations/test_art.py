"""ragen_envs.integrations.art against OpenPipe ART itself (openpipe-art 0.5.18, in the venv `make
test-frameworks` builds): `art.gather_trajectory_groups` gathers our groups, each episode played with
ART's own inference client (`art.Model.openai_client()`) against a scripted OpenAI-compatible endpoint
on localhost, which answers as vLLM does for ART (log-probs on, tokens as "token_id:N"). Then ART's own
tokenization (`tokenize_trajectory_groups`, what its backends train on) gives the advantages, the
assistant masks and the log-probs, checked against the same replies played on a local ChatEnv."""

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragen_envs.agent import chat_encoding
from episodes import ENV, PREFILL, local_episode, require, scripted_generations

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # ART imports LiteLLM: no fetch of its price list
require("art.trajectories")  # OpenPipe's art, not another package of that name
import art  # noqa: E402

LOST = "no format, again"  # the other episode of each group: never a valid reply


def scripted_logprobs(n):
    return [-0.5 - 0.01 * k for k in range(n)]


class ScriptedModel(ThreadingHTTPServer):
    """Chat completions: an episode's k-th reply is its script's k-th generation. The first request of
    an episode takes the next script of its board (the first user message names it); later ones the
    script whose first reply the history holds."""

    def __init__(self, tokenizer, scripts: dict[str, list[list[str]]]):
        self.tokenizer, self.scripts, self.requests, self.started = tokenizer, scripts, [], {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), ScriptedHandler)


class ScriptedHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        board = next(m["content"] for m in messages if m["role"] == "user")
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        with server.lock:
            server.requests.append(body)
            if replies:
                script = next(s for s in server.scripts[board] if s[0] == replies[0])
            else:
                script = server.scripts[board][server.started.get(board, 0)]
                server.started[board] = server.started.get(board, 0) + 1
        text = script[len(replies)]
        tok = server.tokenizer
        ids = chat_encoding.tokenize(tok, text) + [tok.eos_token_id]
        content = [{"token": f"token_id:{t}", "logprob": lp, "bytes": list(tok.decode([t]).encode()),
                    "top_logprobs": []} for t, lp in zip(ids, scripted_logprobs(len(ids)))]
        data = json.dumps({"id": "s", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": content},
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": len(ids),
                                     "total_tokens": 1 + len(ids)}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("prefilled", [False, True], ids=["reply-after-prefill", "reply-with-its-own-think"])
def test_art_gathers_and_tokenizes_the_groups(tokenizer, prefilled):
    from art.preprocessing.tokenize import tokenize_trajectory_groups

    from ragen_envs.integrations.art import trajectory_groups

    seeds = [2, 3]
    own = PREFILL if prefilled else ""
    scripts = {s: [[own + g for g in scripted_generations(s)], [LOST] * 10] for s in seeds}
    boards = {local_episode(s, []).messages[1]["content"]: s for s in seeds}
    model = ScriptedModel(tokenizer, {b: scripts[s] for b, s in boards.items()})
    threading.Thread(target=model.serve_forever, daemon=True).start()
    policy = art.Model(name="scripted", project="ragen-test", inference_api_key="none",
                       inference_base_url=f"http://127.0.0.1:{model.server_port}/v1")
    try:
        groups = asyncio.run(art.gather_trajectory_groups(
            trajectory_groups(policy, ENV, seeds, group_size=2, max_completion_tokens=64), pbar_desc=None))
    finally:
        model.shutdown()

    assert len(groups) == 2 and all(len(g) == 2 and not g.exceptions for g in groups)
    expected = {}  # (seed, first reply) -> the local episode of the same replies
    for group in groups:
        for t in group:
            seed = t.metadata["seed"]
            (replies,) = [s for s in scripts[seed] if s[0] == t.messages()[2]["content"]]
            # the replies as the runner reads them: the prefill, then the reply, unless it opens with it
            chat = local_episode(seed, [r if r.startswith(PREFILL) else PREFILL + r for r in replies], prefill="")
            assert t.reward == pytest.approx(chat.episode_return)  # the return, what ART's GRPO normalises
            assert t.metrics["success"] == float(chat.success) and t.metrics["turns"] == len(chat.turns)
            assert t.metadata["env_id"] == ENV
            # The model saw the env's chat: its system prompt, then each user message the env wrote.
            messages = t.messages()
            assert [m["role"] for m in messages] == [m["role"] for m in chat.messages]
            assert [m["content"] for m in messages if m["role"] != "assistant"] == [
                m["content"] for m in chat.messages if m["role"] != "assistant"]
            assert [m["content"] for m in messages if m["role"] == "assistant"] == replies[:len(chat.turns)]
            # each turn asked for the history so far (the first request, the bare prompt, is the group's)
            later = [r for r in model.requests
                     if len(r["messages"]) > 2 and r["messages"] == messages[:len(r["messages"])]]
            assert len(later) == len(chat.turns) - 1
            expected[seed, replies[0]] = (chat, replies[:len(chat.turns)])
    assert sorted(c.success for c, _ in expected.values()) == [False, False, True, True]
    assert len(model.requests) == sum(len(c.turns) for c, _ in expected.values())
    assert all(r["logprobs"] is True and r["max_completion_tokens"] == 64 for r in model.requests)

    results = list(tokenize_trajectory_groups(tokenizer, groups, allow_training_without_logprobs=False,
                                              scale_rewards=True, shuffle_group_trajectories=False))
    assert len(results) == 4  # the two episodes of a group differ: none dropped for a zero advantage
    for r in results:
        chat, replies = expected[r.trajectory.metadata["seed"], r.trajectory.messages()[2]["content"]]
        assert (r.advantage > 0) == chat.success
        ids = [chat_encoding.tokenize(tokenizer, text) + [tokenizer.eos_token_id] for text in replies]
        assert [t for t, m in zip(r.token_ids, r.assistant_mask) if m] == [t for i in ids for t in i]
        assert [lp for lp, m in zip(r.logprobs, r.assistant_mask) if m] == pytest.approx(
            [lp for i in ids for lp in scripted_logprobs(len(i))])
        assert tokenizer.decode(r.token_ids).startswith(
            chat_encoding.render(tokenizer, chat.messages[:2], add_generation_prompt=True))
