"""The one module every loss input comes from: token log-probs, entropies and (PPO) values."""

from __future__ import annotations

import copy

import torch

from ragen_envs.agent import vision


class TokenScorer(torch.nn.Module):
    """Log-probs and entropies of the target tokens at the sampling temperature (and critic values), as
    (B, T-1) tensors. The LM head runs on generated positions only. One module, so that DDP wraps
    everything a loss depends on.

    Values come from ``value_head`` on ``critic_trunk``'s hidden states (a separate critic model), or
    on the policy's own (a shared trunk; ``detach_value`` keeps the value loss out of the policy)."""

    def __init__(self, model, value_head=None, temperature: float = 1.0, critic_trunk=None,
                 detach_value: bool = False, banned=None):
        super().__init__()
        # greedy sampling (temperature 0) scores at 1, as the backends report log-probs
        self.model, self.value_head, self.temperature = model, value_head, temperature if temperature > 0 else 1.0
        self.banned = banned  # token ids the sampler never draws (a VLM's image placeholders: vision.ban)
        self.critic_trunk, self.detach_value = critic_trunk, detach_value

    def forward(self, ids, attention, mask, targets, **pixels):
        """``pixels``: a vision-language model's image inputs for the images of ``ids`` (``vision``)."""
        hidden = self.model.base_model(input_ids=ids, attention_mask=attention, **pixels).last_hidden_state[:, :-1]
        selected = hidden[mask]
        logits = vision.ban(self.model.get_output_embeddings()(selected).float(), self.banned) / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = torch.zeros(mask.shape, device=ids.device)
        entropy = torch.zeros(mask.shape, device=ids.device)
        logp[mask] = logp_all.gather(-1, targets[mask][:, None])[:, 0]
        entropy[mask] = -(logp_all.exp() * logp_all).sum(-1)
        value = None
        if self.value_head is not None:
            if self.critic_trunk is not None:
                trunk = self.critic_trunk.base_model(input_ids=ids, attention_mask=attention,
                                                     **pixels).last_hidden_state
                features = trunk[:, :-1][mask]
            else:
                features = selected.detach() if self.detach_value else selected
            value = torch.zeros(mask.shape, device=ids.device)
            value[mask] = self.value_head(features.float())[:, 0].float()  # bf16 under autocast: values stay fp32
        return logp, entropy, value


def build_scorers(model, config, device, banned=None) -> tuple[TokenScorer, TokenScorer | None]:
    """(the scorer the update calls, the frozen KL reference's or None) for ``config`` (a
    ``TrainerConfig``): with GAE a zero-initialised value head, on a critic model of its own (RAGEN's,
    verl's: a copy of the policy) or on the policy's trunk; the reference only when ``beta`` > 0 or the
    in-reward KL is on with a coefficient.
    With LoRA the critic's copy has adapters of its own (RAGEN's critic takes the same lora settings), and
    the reference is the policy's model with its adapters off (``trainers.lora``), not a copy."""
    gae = config.advantage == "gae"
    value_head = torch.nn.Linear(model.config.get_text_config().hidden_size, 1).to(device) if gae else None
    if value_head is not None:
        torch.nn.init.zeros_(value_head.weight)
        torch.nn.init.zeros_(value_head.bias)
    critic_trunk = copy.deepcopy(model).train() if gae and config.critic == "separate" else None
    reference = None
    wanted = config.beta > 0 or (config.kl_reward.on and config.kl_reward.coef > 0)  # the KL loss or the penalty
    if wanted and config.lora.rank:
        reference = BaseModelScorer(model, None, config.rollout.sampling.temperature, banned=banned)
    elif wanted:
        reference = TokenScorer(copy.deepcopy(model).eval().requires_grad_(False), None,
                                config.rollout.sampling.temperature, banned=banned)
    scorer = TokenScorer(model, value_head, config.rollout.sampling.temperature, critic_trunk=critic_trunk,
                         detach_value=not config.critic_backprop, banned=banned)
    return scorer, reference


class BaseModelScorer(TokenScorer):
    """The KL reference under LoRA: the policy's own model with its adapters off (``trainers.lora``), without
    gradients."""

    def forward(self, *args, **kwargs):
        from trainers.lora import adapters_off  # peft only where LoRA is on

        with torch.no_grad(), adapters_off(self.model):
            return super().forward(*args, **kwargs)
