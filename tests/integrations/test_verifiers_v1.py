"""ragen_envs.integrations.verifiers_v1 against verifiers 0.4.0's `verifiers.v1` (in the venv `make
test-frameworks` builds): the taskset loads by its plugin id, and the env runs episodes as verifiers'
own eval runs them (`Env.serving()` and `run_slot`): the null harness's chat program, launched by
verifiers in a subprocess runtime (its dependencies synced by uv from wheels the build downloaded, so
no network), talks through verifiers' interception to the model, and our `Env.run` plays the env as
the user. Only the model is scripted: an OpenAI-compatible endpoint on localhost answering each turn
with the episode's scripted generation. Tokens and log-probs come from verifiers' train client (a
vLLM engine) and are not part of an eval run; this test checks reward, success and the chat."""

import asyncio
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from episodes import ENV, PREFILL, local_episode, require, scripted_generations

require("verifiers.v1")


class ScriptedModel(ThreadingHTTPServer):
    """Chat completions (streamed or not): the k-th reply of an episode is its k-th generation; the
    episode is found by the first user message, which names its board."""

    def __init__(self, generations: dict[str, list[str]]):
        self.generations, self.requests = generations, []
        super().__init__(("127.0.0.1", 0), ScriptedHandler)


class ScriptedHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        messages = body["messages"]
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        text = self.server.generations[first_user][sum(m["role"] == "assistant" for m in messages)]
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if body.get("stream"):
            def chunk(delta, finish, **extra):
                return {"id": "s", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None
                        else [], **extra}
            events = [chunk({"role": "assistant", "content": text}, None), chunk({}, "stop"),
                      chunk(None, None, usage=usage)]
            data, kind = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n", "text/event-stream"
        else:
            data, kind = json.dumps({"id": "s", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": text}}],
                                     "usage": usage}), "application/json"
        data = data.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def offline_harness(monkeypatch):
    """The chat program's dependencies from the wheels `make test-frameworks` downloaded into the venv,
    with the venv's uv and Python: verifiers' uv bootstrap reaches no network."""
    wheels = Path(sys.prefix) / "harness-wheels"
    assert wheels.is_dir(), f"{wheels} is missing: `make test-frameworks` downloads the harness's wheels there"
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for name, value in {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels), "UV_PYTHON": sys.executable,
                        "UV_PYTHON_DOWNLOADS": "never", "UV_CACHE_DIR": str(Path(sys.prefix) / "uv-cache"),
                        "SCRIPTED_MODEL_KEY": "none"}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("prefilled", [False, True], ids=["reply-after-prefill", "reply-with-its-own-think"])
def test_verifiers_v1_runs_the_episodes(offline_harness, prefilled):
    from verifiers.v1.clients import EvalClientConfig, ModelContext
    from verifiers.v1.env import RunSlot
    from verifiers.v1.utils.loaders import load_environment

    from ragen_envs.integrations.verifiers_v1 import PLUGIN, RagenEnv, RagenEnvConfig

    # Loaded by its plugin id, as `vf-eval ragen-envs-verifiers` loads it.
    env = load_environment(RagenEnvConfig(
        taskset={"id": PLUGIN, "env_id": ENV, "num_examples": 4},
        player={"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}))
    assert isinstance(env, RagenEnv)
    tasks = list(env.taskset)[2:]
    assert [t.data.info["seed"] for t in tasks] == [2, 3]
    generations = {t.data.prompt: [(PREFILL if prefilled else "") + g
                                   for g in scripted_generations(t.data.info["seed"])] for t in tasks}
    model = ScriptedModel(generations)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    ctx = ModelContext(model="scripted", client=EvalClientConfig(
        base_url=f"http://127.0.0.1:{model.server_port}/v1", api_key_var="SCRIPTED_MODEL_KEY"))

    async def run():
        async with env.serving():
            return await asyncio.gather(*(env.run_slot(RunSlot(task), ctx) for task in tasks))

    try:
        episodes = asyncio.run(run())
    finally:
        model.shutdown()
    for episode, task in zip(episodes, tasks):
        seed = task.data.info["seed"]
        chat = local_episode(seed, scripted_generations(seed))
        assert chat.success and episode.ok and episode.errors == []
        (trace,) = episode.traces
        assert trace.ok and trace.stop_condition == "user_closed"  # our run ended the exchange
        assert trace.reward == pytest.approx(chat.episode_return)  # record_reward: the return, weight 1
        assert trace.rewards["episode_return"].score == pytest.approx(chat.episode_return)
        assert trace.metrics["success"] == 1.0
        assert trace.info["ragen"]["rewards"] == [t.reward for t in chat.turns]
        # The model saw the env's chat: its system prompt, then each user message the env wrote.
        requests = [r for r in model.requests if r["messages"][1]["content"] == task.data.prompt]
        assert len(requests) == len(generations[task.data.prompt])
        last = requests[-1]["messages"]
        assert [m["role"] for m in last] == [m["role"] for m in chat.messages[:len(last)]]
        assert [m["content"] for m in last if m["role"] != "assistant"] == [
            m["content"] for m in chat.messages[:len(last)] if m["role"] != "assistant"]
