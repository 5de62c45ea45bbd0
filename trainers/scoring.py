"""The one module every loss input comes from: token log-probs, entropies and (PPO) values."""

from __future__ import annotations

import torch


class TokenScorer(torch.nn.Module):
    """Log-probs and entropies of the target tokens at the sampling temperature (and PPO values), as
    (B, T-1) tensors. The LM head runs on generated positions only. One module, so that DDP wraps
    everything a loss depends on."""

    def __init__(self, model, value_head=None, temperature: float = 1.0):
        super().__init__()
        self.model, self.value_head, self.temperature = model, value_head, max(temperature, 1e-6)

    def forward(self, ids, attention, mask, targets):
        hidden = self.model.base_model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
        selected = hidden[mask]
        logits = self.model.get_output_embeddings()(selected).float() / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = torch.zeros(mask.shape, device=ids.device)
        entropy = torch.zeros(mask.shape, device=ids.device)
        logp[mask] = logp_all.gather(-1, targets[mask][:, None])[:, 0]
        entropy[mask] = -(logp_all.exp() * logp_all).sum(-1)
        value = None
        if self.value_head is not None:
            value = torch.zeros(mask.shape, device=ids.device)
            value[mask] = self.value_head(selected.float())[:, 0]
        return logp, entropy, value
