"""A tiny vision-language model folder, built here with no download: SmolVLM's architecture (Idefics3: a
SigLIP-style vision encoder, pixel shuffle, a Llama decoder) at a few million random weights, with
SmolLM2's tokenizer (the embedded model's) plus Idefics3's image tokens, an image processor config and a
chat template that places each image. What the tests and ``benchmarks/speed/visual_rollout.py`` run the image
path on; it sees nothing until trained. Real models of the family (SmolVLM, Idefics3) load the same way.

    python -m trainers.tiny_vlm OUT_DIR
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# ChatML (SmolLM2's) with content either a string or a list of parts: an image part is written as the
# processor's image token, which the processor expands into the image's placeholder tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]


@dataclass
class TinyVLMConfig:
    image_size: int = 64  # pixels a side each image is resized to (SmolVLM: 512)
    patch_size: int = 16  # vision patches: (image_size / patch_size)^2 per image
    scale_factor: int = 2  # pixel shuffle: image tokens = patches / scale_factor^2 (here 4 an image)
    vision_width: int = 32
    text_width: int = 64
    text_layers: int = 2
    seed: int = 0  # weights are drawn from it


def build(out_dir: str | Path, config: TinyVLMConfig | None = None) -> Path:
    """Write the model, tokenizer and processor to ``out_dir``; returns it."""
    import torch
    from transformers import AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    try:  # transformers 5 names the PIL-backed processor (no torchvision needed) apart
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil as Images
    except ImportError:  # older transformers (vLLM's venv): the one image processor is PIL-backed
        from transformers import Idefics3ImageProcessor as Images

    from ragen_envs.agent.default_model import default_model_path

    c = config or TinyVLMConfig()
    out = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    tokenizer.chat_template = CHAT_TEMPLATE
    edge = {"longest_edge": c.image_size}
    images = Images(do_image_splitting=False, size=edge, max_image_size=edge)
    tokens_per_image = (c.image_size // c.patch_size) ** 2 // c.scale_factor ** 2
    processor = Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=tokens_per_image,
                                  chat_template=CHAT_TEMPLATE)
    model_config = Idefics3Config(
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": c.text_width,
                     "intermediate_size": 2 * c.text_width, "num_hidden_layers": c.text_layers,
                     # heads of 32 dimensions: vLLM's CPU attention has no kernel for 16
                     "num_attention_heads": c.text_width // 32, "num_key_value_heads": 1,
                     "max_position_embeddings": 4096,
                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                     "pad_token_id": tokenizer.pad_token_id},
        vision_config={"hidden_size": c.vision_width, "intermediate_size": 2 * c.vision_width,
                       "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": c.image_size,
                       "patch_size": c.patch_size},
        scale_factor=c.scale_factor, image_token_id=tokenizer.convert_tokens_to_ids("<image>"))
    torch.manual_seed(c.seed)
    model = Idefics3ForConditionalGeneration(model_config)
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m trainers.tiny_vlm OUT_DIR")
    print(build(sys.argv[1]))
