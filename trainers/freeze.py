"""Train only the top of a model: the cheap option for CPU runs (SFT and RL alike).

With the embeddings and the bottom layers frozen, autograd records nothing below the first
trainable layer, so the backward pass and the optimizer state shrink with the trained share.
A model with tied input and output embeddings (SmolLM2) keeps its LM head frozen with them. A
vision-language model's vision tower and connector sit below its decoder: they are frozen with it.
"""

from __future__ import annotations


def freeze_bottom(model, layers: int) -> None:
    """Freeze the input embeddings and the bottom ``layers`` decoder layers of ``model`` (0: none)."""
    if layers <= 0:
        return
    base = model.base_model
    text = getattr(base, "text_model", None) or getattr(base, "language_model", None) or base
    decoder = list(getattr(text, "layers", []))
    if layers > len(decoder):
        raise ValueError(f"freeze_layers={layers}, but the model has {len(decoder)} decoder layers")
    below = [base.get_input_embeddings()] + [m for m in (getattr(base, name, None) for name in (
        "vision_model", "vision_tower", "visual", "connector", "multi_modal_projector")) if m is not None]
    for p in (p for module in below for p in module.parameters()):
        p.requires_grad_(False)
    for layer in decoder[:layers]:
        for p in layer.parameters():
            p.requires_grad_(False)
