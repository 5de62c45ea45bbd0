"""Images in the agent loop: where they sit in a chat, how they become tokens and pixels, how they travel.

A chat message that shows an image holds a list of parts, ``{"type": "image", "image": array}`` and
``{"type": "text", "text": ...}`` (the form Hugging Face processors' chat templates read; the array is
an (H, W, 3) uint8 image). A prompt's images are the image parts of its messages, in order.

Token space stays the one representation of a prompt: a vision-language model's processor writes each
image as a run of placeholder tokens (``<image>`` repeated, with markers around it), which are prompt
tokens like any other (never generated, so never trained on or counted as reply tokens). The images
themselves travel beside the ids, one list per prompt, and become the model's pixel inputs
(``pixel_values`` and whatever else its processor makes) only where the placeholders are run.

Two prompts whose ids agree may still show different images (the placeholders of two boards are the
same tokens), so whatever keys prompts (a KV cache, the deduplication of equal prompts) keys their
images too, by ``digest``.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import numpy as np

from ragen_envs.rendering import png_bytes

DATA_URI = "data:image/png;base64,"


def is_processor(obj) -> bool:
    """A multimodal processor (tokenizer + image processor), as opposed to a plain tokenizer."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def shows_images(space) -> bool:
    """An observation space whose observations hold an image (what ChatEnv puts in the user message):
    an (H, W, 3) array, or a dict with an "image" part."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return "image" in space.spaces
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def message_images(messages: list[dict]) -> list[np.ndarray]:
    """The images of ``messages``, in order."""
    return [part["image"] for m in messages if isinstance(m["content"], list)
            for part in m["content"] if part.get("type") == "image"]


def message_text(content: str | list[dict], images: bool = False) -> str:
    """A message's text: the content itself, or its text parts joined; with ``images`` each image
    part as a line "[image HxW]"."""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] if part.get("type") == "text" else
                     f"[image {part['image'].shape[1]}x{part['image'].shape[0]}]" for part in content
                     if part.get("type") == "text" or images)


def as_parts(messages: list[dict], reserved: list[str] = ()) -> list[dict]:
    """Every message's content as a list of parts (a processor's chat template reads only lists);
    image parts lose their arrays, which the template does not need, and text spelling a ``reserved``
    placeholder string is escaped (only an image part makes a placeholder)."""
    out = []
    for m in messages:
        content = m["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        parts = [{"type": "image"} if p.get("type") == "image" else {**p, "text": escape(p["text"], reserved)}
                 for p in parts]
        out.append({**m, "content": parts})
    return out


def digest(image: np.ndarray) -> str:
    """What tells one image from another (shape and pixels)."""
    image = np.ascontiguousarray(image)
    return hashlib.blake2b(repr(image.shape).encode() + image.tobytes(), digest_size=12).hexdigest()


def digests(images) -> tuple[str, ...]:
    return tuple(digest(i) for i in images or ())


def data_uri(image: np.ndarray) -> str:
    """A base64 PNG data URI: how an OpenAI-compatible chat request carries an image."""
    return DATA_URI + base64.b64encode(png_bytes(image)).decode("ascii")


def from_data_uri(uri: str) -> np.ndarray:
    """The (H, W, 3) uint8 image of a PNG data URI (``data_uri``'s inverse)."""
    import io

    from PIL import Image

    if not uri.startswith(DATA_URI):
        raise ValueError(f"not a PNG data URI: {uri[:40]!r}")
    with Image.open(io.BytesIO(base64.b64decode(uri[len(DATA_URI):]))) as image:
        return np.asarray(image.convert("RGB"))


def map_images(messages: list[dict], fn) -> list[dict]:
    """``messages`` (new dicts) with each image part replaced by ``fn(part)``, everything else as it is."""
    return [{**m, "content": [fn(p) if p.get("type") == "image" else p for p in m["content"]]}
            if isinstance(m["content"], list) else m for m in messages]


def openai_messages(messages: list[dict]) -> list[dict]:
    """``messages`` in the OpenAI chat format: each image part an ``image_url`` with a data URI."""
    return map_images(messages, lambda p: {"type": "image_url", "image_url": {"url": data_uri(p["image"])}})


def stored(image: np.ndarray, store: dict[str, str]) -> str:
    """``image``'s digest, its data URI kept in ``store`` (JSON holds no arrays; each image once)."""
    key = digest(image)
    if key not in store:
        store[key] = data_uri(image)
    return key


def to_json(messages: list[dict], store: dict[str, str]) -> list[dict]:
    """``messages`` with each image part's array replaced by its digest, the image kept in ``store``."""
    return map_images(messages, lambda p: {**p, "image": stored(p["image"], store)})


def from_json(messages: list[dict], images: dict[str, np.ndarray]) -> list[dict]:
    """``to_json``'s inverse; ``images``: digest -> array."""
    return map_images(messages, lambda p: {**p, "image": images[p["image"]]})


class ImageTokens:
    """Where a processor's images sit in token ids.

    One image's placeholder is the processor's expansion of its image token for a small blank image;
    ``count`` counts the images in some ids by a token that occurs once in that expansion (Idefics3's
    ``<global-img>``), else by the runs of the image token (Qwen2-VL's, LLaVA's)."""

    def __init__(self, processor):
        token = processor.image_token if isinstance(processor.image_token, str) else str(processor.image_token)
        blank = np.zeros((16, 16, 3), np.uint8)
        ids = [int(i) for i in processor(text=token, images=[blank], add_special_tokens=False,
                                         return_tensors="np")["input_ids"][0]]
        self.ids = set(ids)  # every token an image's placeholder is made of
        # their strings, which message text must not spell (the processor would read them as an image's)
        self.strings = [t for t in processor.tokenizer.convert_ids_to_tokens(sorted(self.ids)) if t]
        self.image_id = int(processor.tokenizer.convert_tokens_to_ids(token))
        once = [i for i in ids if ids.count(i) == 1]
        self.marker = once[0] if once else None

    def count(self, ids) -> int:
        """Images whose placeholder starts in ``ids``."""
        return len(self._anchors(ids))

    def start(self, ids, j: int) -> int:
        """Where image ``j``'s placeholder starts in ``ids`` (at or before; len(ids): no such image)."""
        anchors = self._anchors(ids)
        if j >= len(anchors):
            return len(ids)
        k = anchors[j]
        while k > 0 and ids[k - 1] in self.ids:
            k -= 1
        return k

    def _anchors(self, ids) -> list[int]:
        """One index per image: its marker, or the start of its run of image tokens."""
        if self.marker is not None:
            return [k for k, i in enumerate(ids) if i == self.marker]
        return [k for k, i in enumerate(ids) if i == self.image_id and (k == 0 or ids[k - 1] != i)]


# What a banned token's logit becomes: far below any other, yet finite, so that p * log p and its
# gradient stay 0 (with -inf they are nan).
BANNED_LOGIT = -1e9


def ban(logits, ids):
    """``logits`` (..., vocab) with the ``ids`` (a LongTensor or None) masked out: a model that generated an
    image's placeholder token would show a "picture" with no pixels. The trainer masks the same ids, so its
    log-probs stay the sampler's."""
    return logits if ids is None else logits.index_fill(-1, ids.to(logits.device), BANNED_LOGIT)


def image_tokens(processor) -> ImageTokens:
    """``processor``'s ``ImageTokens``, made once (it runs the processor on an image) and kept on it: every
    render and every request reads them."""
    if not hasattr(processor, "_ragen_image_tokens"):
        processor._ragen_image_tokens = ImageTokens(processor)
    return processor._ragen_image_tokens


def escape(text: str, strings: list[str]) -> str:
    """``text`` with each of ``strings`` broken by a zero-width space after its first character."""
    for s in strings:
        text = text.replace(s, s[:1] + "\u200b" + s[1:])
    return text


def encode(processor, text: str, images: list[np.ndarray]) -> list[int]:
    """Token ids of ``text`` whose image tokens stand for ``images``, each expanded to its placeholder."""
    if not images:
        return list(processor.tokenizer(text, add_special_tokens=False)["input_ids"])
    return [int(i) for i in processor(text=text, images=list(images), add_special_tokens=False,
                                      return_tensors="np")["input_ids"][0]]


def pixel_inputs(processor, images: list[np.ndarray], device=None) -> dict[str, Any]:
    """The model inputs for ``images`` (all the images whose placeholders a forward pass runs, in the
    order of the placeholders, rows one after another): ``pixel_values`` and the processor's other
    tensors (Idefics3's ``pixel_attention_mask``, Qwen2-VL's ``image_grid_thw``). Empty: no images."""
    if not images:
        return {}
    out = processor.image_processor(images=[list(images)], return_tensors="pt")
    return {k: v.to(device) if device is not None else v for k, v in out.items() if hasattr(v, "to")}
