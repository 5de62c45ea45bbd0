"""Multi-turn prompts in token space.

Each turn the model sees its previous context, the tokens it generated itself, and the new
environment message. Re-tokenising the whole conversation as text would not reproduce the sampled
tokens (a reply can be sampled as a tokenisation the tokenizer would not choose), so the training
prompt would differ from the one the model saw. Instead ``extend`` appends to the previous prompt:
the generated ids as they were, then only the template text that follows the assistant's reply.

``tokenizer`` may be a multimodal processor (``vision.is_processor``): messages may then show images
(``vision``), each written as its run of placeholder tokens.
"""

from __future__ import annotations

from ragen_envs.agent import vision

Message = dict  # {"role": ..., "content": text, or a list of text and image parts (see vision)}

_MARK = "\uE000ragen-reply\uE000"  # a private-use marker that no template or model writes


def render(tokenizer, messages: list[Message], add_generation_prompt: bool) -> str:
    if vision.is_processor(tokenizer):
        messages = vision.as_parts(messages, vision.image_tokens(tokenizer).strings)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def tokenize(tokenizer, text: str, images=()) -> list[int]:
    # The chat template already wrote any special tokens (BOS included) as text.
    if vision.is_processor(tokenizer):
        return vision.encode(tokenizer, text, list(images))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_chat(tokenizer, messages: list[Message]) -> list[int]:
    """The conversation rendered by the chat template, ending with the generation prompt."""
    return tokenize(tokenizer, render(tokenizer, messages, add_generation_prompt=True),
                    vision.message_images(messages))


def extend(tokenizer, prompt_ids: list[int], reply_ids: list[int], messages: list[Message],
           prefill: str = "") -> list[int]:
    """Next prompt: ``prompt_ids + reply_ids + (template text after the reply) + prefill``.

    ``messages`` is the conversation so far: it ends with the assistant's reply (``messages[-2]``)
    and the new user message (``messages[-1]``). ``prefill`` is text that opens every reply (``<think>``):
    the last prompt ended with it, so the reply's message holds it before the generated text.
    """
    if len(messages) < 2 or messages[-2]["role"] != "assistant":
        raise ValueError("extend() needs messages ending with an assistant reply and a user message")
    marked = [*messages[:-2], {"role": "assistant", "content": _MARK}, messages[-1]]
    text = render(tokenizer, marked, add_generation_prompt=True)
    if text.count(_MARK) != 1:
        raise ValueError("the chat template does not render assistant replies verbatim")
    after = text.split(_MARK)[1]
    # The reply may already hold the template's end-of-turn text (an EOS token it generated).
    reply = messages[-2]["content"]
    if prefill and reply.startswith(prefill):
        reply = reply[len(prefill):]
    generated = tokenizer.decode(reply_ids, skip_special_tokens=False)
    extra = generated[len(reply):] if generated.startswith(reply) else ""
    if extra and after.startswith(extra):
        after = after[len(extra):]
    return [*prompt_ids, *reply_ids, *tokenize(tokenizer, after + prefill, vision.message_images(messages[-1:]))]
