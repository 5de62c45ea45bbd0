"""OpenAI-compatible HTTP backend (``vllm serve`` and other servers), with ``requests``.

Token-id prompts go to ``/v1/completions`` (the OpenAI API accepts a list of token ids as the prompt),
chat prompts to ``/v1/chat/completions``: those without a tokenizer here, and every chat showing images
(each an ``image_url`` holding a base64 PNG data URI; the rollout runner sends visual envs' turns as chats,
``chat_images``). A chat ending with an assistant message is continued (vLLM's ``continue_final_message``).
Generated tokens come back as ids when the server supports vLLM's ``return_tokens_as_token_ids``;
otherwise they are looked up in the local tokenizer.
Scoring uses vLLM's ``prompt_logprobs`` on ``/v1/completions``; servers without it get a clear error.

Errors: connection failures and 429/5xx answers are retried ``max_retries`` times with a short
backoff, then raised as ``BackendError``; other HTTP errors are raised at once with the server's
message. Every request has a timeout.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from ragen_envs.agent import vision
from ragen_envs.agent.backends.base import Generation, Policy, Prompt, SamplingConfig, is_chat

RETRY_STATUS = {429, 500, 502, 503, 504}


class BackendError(RuntimeError):
    """The server could not be reached or answered with an error."""


class OpenAIPolicy(Policy):
    """Policy served over an OpenAI-compatible API.

    Args:
        base_url: e.g. "http://127.0.0.1:8000/v1".
        model: the model name the server knows.
        tokenizer: the model's tokenizer (a path, id or object), for chat templates and token ids; a
            vision-language model's path loads its processor (the ids of image placeholders).
        api_key: sent as a bearer token when given.
        timeout: seconds per request.
        max_retries: retries on connection errors and 429/5xx.
        max_concurrency: requests in flight at once (the server batches them).
        max_context: the model's context window.
    """

    chat_images = True  # a completions request takes token ids, not images

    def __init__(self, base_url: str, model: str, tokenizer=None, api_key: str | None = None,
                 timeout: float = 120.0, max_retries: int = 2, backoff: float = 0.5,
                 max_concurrency: int = 32, max_context: int = 8192):
        import requests

        self._requests = requests
        self.base_url = base_url.rstrip("/")
        self.model = model
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            from ragen_envs.agent.default_model import load_processor

            self.processor = load_processor(tokenizer)
            tokenizer = self.processor.tokenizer if self.processor else AutoTokenizer.from_pretrained(tokenizer)
        elif vision.is_processor(tokenizer):
            self.processor, tokenizer = tokenizer, tokenizer.tokenizer
        self.tokenizer = tokenizer
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.max_concurrency = max_concurrency
        self.max_context = max_context
        self._session = requests.Session()
        self._in_flight: ThreadPoolExecutor | None = None  # agenerate's threads
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        requests = self._requests
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._session.post(url, json=payload, timeout=self.timeout)
            except requests.Timeout as err:
                raise BackendError(f"{url} did not answer within {self.timeout} s") from err
            except requests.ConnectionError as err:
                if last:
                    raise BackendError(f"cannot connect to {url}: {err}") from err
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError as err:
                        raise BackendError(f"{url} answered with invalid JSON: {response.text[:200]!r}") from err
                if response.status_code not in RETRY_STATUS or last:
                    raise BackendError(f"{url} answered {response.status_code}: {_error_text(response)}")
            time.sleep(self.backoff * 2 ** attempt)
        raise AssertionError("unreachable")

    # -- generation ------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        jobs = [(i, p) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(jobs)))) as pool:
            return list(pool.map(lambda job: self._generate_one(job[1], sampling, job[0]), jobs))

    async def agenerate(self, prompt: Prompt, sampling: SamplingConfig) -> Generation:
        """One prompt's generation, awaited (``AsyncRolloutRunner``): up to ``max_concurrency``
        requests are in flight at once, and the server batches them."""
        if self._in_flight is None:  # its size bounds the requests in flight
            self._in_flight = ThreadPoolExecutor(max_workers=self.max_concurrency)
        return await asyncio.get_running_loop().run_in_executor(self._in_flight, self._generate_one, prompt,
                                                                sampling, 0)

    def _sampling_payload(self, sampling: SamplingConfig, index: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "n": 1,
            # vLLM extensions, ignored elsewhere: keep the stop string, return token ids
            "include_stop_str_in_output": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k:
            payload["top_k"] = sampling.top_k
        if sampling.stop:
            payload["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            payload["seed"] = sampling.seed + index  # one seed per request, else identical samples
        if self.processor is not None:  # a VLM's image placeholders are never sampled (vision.ban)
            payload["logit_bias"] = {str(i): -100 for i in sorted(vision.image_tokens(self.processor).ids)}
        return payload

    def _generate_one(self, prompt: Prompt, sampling: SamplingConfig, index: int) -> Generation:
        payload = self._sampling_payload(sampling, index)
        images = vision.message_images(prompt) if is_chat(prompt) else getattr(prompt, "images", [])
        if images and not is_chat(prompt):
            raise ValueError("token-id prompts cannot carry images to an OpenAI server: send the chat messages")
        known = not is_chat(prompt) or (self.tokenizer is not None and (not images or self.processor is not None))
        prompt_ids = self.prompt_ids(prompt) if known else []
        if is_chat(prompt) and (self.tokenizer is None or images):
            payload.update(messages=vision.openai_messages(prompt), logprobs=True)
            if prompt[-1]["role"] == "assistant":  # vLLM's way to continue a reply already begun
                payload.update(continue_final_message=True, add_generation_prompt=False)
            choice = self._first_choice(self._post("/chat/completions", payload))
            text = (choice.get("message") or {}).get("content") or ""
            entries = ((choice.get("logprobs") or {}).get("content")) or []
            tokens = [e.get("token", "") for e in entries]
            logprobs = [float(e.get("logprob", 0.0)) for e in entries]
        else:
            payload.update(prompt=prompt_ids, logprobs=1)
            choice = self._first_choice(self._post("/completions", payload))
            text = choice.get("text") or ""
            lp = choice.get("logprobs") or {}
            tokens, logprobs = lp.get("tokens") or [], [float(x) for x in lp.get("token_logprobs") or []]
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and not text.endswith(stop_reason):
            text += stop_reason  # a server that drops the stop string from the text
        token_ids = self._token_ids(tokens, text)
        if len(logprobs) != len(token_ids):
            logprobs = []  # the server gave no per-token log-probabilities we can align
        visible = self.tokenizer.decode(token_ids, skip_special_tokens=True) if self.tokenizer else text
        return Generation(text=visible, prompt_ids=prompt_ids, token_ids=token_ids, logprobs=logprobs,
                          finish_reason=finish)

    def _token_ids(self, tokens: list[str], text: str) -> list[int]:
        if tokens and all(t.startswith("token_id:") for t in tokens):
            return [int(t.split(":", 1)[1]) for t in tokens]
        if self.tokenizer is None:
            return []
        if tokens:
            ids = self.tokenizer.convert_tokens_to_ids(tokens)
            if all(isinstance(i, int) and i != self.tokenizer.unk_token_id for i in ids):
                return list(ids)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @staticmethod
    def _first_choice(body: dict[str, Any]) -> dict[str, Any]:
        choices = body.get("choices")
        if not choices:
            raise BackendError(f"the server answered without choices: {str(body)[:200]}")
        return choices[0]

    # -- scoring ---------------------------------------------------------------------------------
    def score(self, prompt_ids: list[int], continuations: Sequence[list[int]]) -> list[np.ndarray]:
        """Teacher forcing via ``prompt_logprobs``; the server's prefix cache shares the prompt."""
        if getattr(prompt_ids, "images", None):
            raise ValueError("scoring over an OpenAI server takes token ids alone: a prompt with images cannot be "
                             "scored there (score with the transformers or vllm backend)")

        def one(cont: list[int]) -> np.ndarray:
            if not cont:
                return np.zeros(0, dtype=np.float32)
            ids = [*prompt_ids, *cont]
            body = self._post("/completions", {"model": self.model, "prompt": ids, "max_tokens": 1,
                                               "temperature": 0, "prompt_logprobs": 0})
            entries = self._first_choice(body).get("prompt_logprobs")
            if entries is None:
                raise BackendError(
                    "the server does not return prompt_logprobs (a vLLM extension), so it cannot score "
                    "continuations; use the transformers or vllm backend for scoring"
                )
            out = []
            for token, entry in zip(ids[len(prompt_ids):], entries[len(prompt_ids):]):
                item = (entry or {}).get(str(token))
                if item is None:
                    raise BackendError(f"prompt_logprobs lacks the prompt token {token}")
                out.append(float(item["logprob"] if isinstance(item, dict) else item))
            return np.array(out, dtype=np.float32)

        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(continuations)))) as pool:
            return list(pool.map(one, continuations))


def _error_text(response) -> str:
    try:
        body = response.json()
        error = body.get("error", body)
        return str(error.get("message", error) if isinstance(error, dict) else error)[:500]
    except ValueError:
        return response.text[:500]
