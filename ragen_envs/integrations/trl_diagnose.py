"""TRL: template-collapse diagnosis and RAGEN-2's reward-variance filter inside ``GRPOTrainer``.

``CollapseCallback`` logs the MI proxies of ``ragen_envs.diagnose`` from the trainer's own generations,
with no second generation: its ``probe`` is a reward function (TRL's public hook that sees each generation
batch's prompts and completions once, with ``trainer_state`` and ``log_metric``) that scores the batch with
the model that just sampled it and gives no reward (None: TRL leaves it out of the sum)::

    from ragen_envs.integrations.trl_diagnose import CollapseCallback, FilteredGRPOTrainer

    collapse = CollapseCallback(every=10)
    trainer = GRPOTrainer(model=..., reward_funcs=[accuracy, collapse.probe], callbacks=[collapse], args=...)

Every ``every`` optimizer steps the batch then generated is scored (one ``CollapseMonitor.update``): its
metrics go to the trainer's logs as ``collapse/<name>`` (``collapse/mi/retrieval_acc``,
``collapse/mi_code/mi_zscore_ema``, ...; averaged over the logging window as TRL averages its own), to
``collapse.history`` with the step, and a collapse warning to ``collapse.monitor.events``. The probe's own
reward column (``rewards/collapse_probe/mean``) is NaN: it rewards nothing. TRL already logs the reward
spread (``reward_std``, ``frac_reward_zero_std``). Groups are the samples that share a prompt. Each process
scores its own part of the batch (one process on a CPU: the whole batch).

``FilteredGRPOTrainer`` is ``GRPOTrainer`` with the filter: after the rewards and advantages, the prompt
groups the filter does not keep (``filtering``, a ``FilterConfig``, the rules our trainer uses; default
top-p 0.9 on the reward std, RAGEN-2's) leave the loss through the completion mask, so the KL and entropy
terms stop acting on them too (a zero advantage would leave those on). Which loss the kept groups then
get depends on how the loss type normalises:

- ``bnpo``, ``dapo``, ``cispo``, ``vespo`` average over the kept tokens only (``num_items_in_batch`` is
  recounted): the kept groups are trained as if alone, RAGEN's default;
- ``grpo``, ``sapo``, ``dr_grpo``, ``luspo`` average over every row of the batch, removed ones included, so
  the kept groups' loss (KL included) shrinks by the kept ratio r = kept groups / groups.

``filter_loss_scaling`` sets the policy term's scale as RAGEN's option does, on the advantages of the
kept samples: ``"none"`` (as if trained alone: x 1/r under row-normalised losses), ``"linear"`` (x r),
``"sqrt"`` (x sqrt(r)). Prefer a token-normalised loss type (``dapo``, ``bnpo``) for RAGEN's semantics: under
a row-normalised one the KL term keeps the factor r. A batch where nothing is kept trains on nothing (the
optimizer still steps). Logged: ``filter/kept_ratio``, ``filter/zero_variance_share``. Tested against TRL
1.16 (``tests/integrations/test_trl_diagnose.py``); it overrides two of GRPOTrainer's internal methods.
"""

from __future__ import annotations

import numpy as np
import torch

from ragen_envs.diagnose.filtering import FilterConfig, select_groups
from ragen_envs.diagnose.monitor import CollapseMonitor
from ragen_envs.diagnose.texts import MAX_PAIRS, read_reasoning
from ragen_envs.extras import install_hint

try:
    from transformers import TrainerCallback
    from trl import GRPOTrainer
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"ragen_envs.integrations.trl_diagnose needs TRL: {install_hint('trl')}") from None

ROW_NORMALISED = ("grpo", "sapo", "dr_grpo", "luspo")  # losses whose mean counts every row of the batch
LOSS_SCALINGS = ("none", "linear", "sqrt")


def _text(item) -> str:
    """A prompt or completion as text: TRL's standard format is a string, its conversational one a list of
    messages (the assistant's content is the completion)."""
    if isinstance(item, str):
        return item
    return "".join(str(m.get("content", "")) for m in item if m.get("role") == "assistant")


class CollapseCallback(TrainerCallback):
    """Logs the template-collapse proxies of GRPOTrainer's generations (see the module docstring).

    Args:
        every: score the generation batch of every this many optimizer steps (step 0 included).
        tokenizer: the policy's fast tokenizer (None: the trainer's ``processing_class``).
        max_pairs, seed: as for ``CollapseMonitor`` (at most 64 (prompt, reasoning) pairs a batch).
        pattern, prefilled: how a completion's reasoning is read (``read_reasoning``): by default the
            text inside ``<think>...</think>``; ``prefilled`` when the prompt already opened the block
            (``EnvRollout``'s prompts end with ``<think>``), a regular expression ``pattern`` otherwise.
        chat_template_kwargs: passed to ``apply_chat_template`` for conversational prompts (as the
            trainer's own ``chat_template_kwargs``).
        monitor_kwargs: ``CollapseMonitor``'s warning thresholds (``drop``, ``window``, ``entropy_band``).
    """

    def __init__(self, every: int = 10, tokenizer=None, max_pairs: int = MAX_PAIRS, seed: int = 0,
                 pattern: str | None = None, prefilled: bool = False, chat_template_kwargs: dict | None = None,
                 **monitor_kwargs):
        if every < 1:
            raise ValueError(f"every must be at least 1 step, got {every}")
        self.every, self.tokenizer, self.max_pairs, self.seed = every, tokenizer, max_pairs, seed
        self.pattern, self.prefilled = pattern, prefilled
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.monitor_kwargs = monitor_kwargs
        self.monitor: CollapseMonitor | None = None  # made when training begins (it needs the model)
        self.history: list[dict] = []  # the metrics of each scored batch, with its "step"
        self._model = None
        self._scored_step: int | None = None

        def collapse_probe(prompts, completions, trainer_state=None, log_metric=None, **kwargs):
            self._score(prompts, completions, trainer_state, log_metric)
            return [None] * len(prompts)

        self.probe = collapse_probe  # TRL names a reward column after its function: rewards/collapse_probe

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        from ragen_envs.agent.backends.transformers import TransformersPolicy

        self.tokenizer = self.tokenizer or processing_class
        if model is None or self.tokenizer is None:
            raise ValueError("CollapseCallback needs the trainer's model and tokenizer: pass it in the "
                             "trainer's callbacks=[...]")
        self._model = model
        if self.monitor is None:
            policy = TransformersPolicy(model, self.tokenizer, device=str(next(model.parameters()).device))
            self.monitor = CollapseMonitor(policy, self.tokenizer, self.max_pairs, self.seed, **self.monitor_kwargs)

    def _score(self, prompts, completions, state, log_metric) -> None:
        if self.monitor is None:
            raise ValueError("collapse.probe is in reward_funcs but CollapseCallback is not in the trainer's "
                             "callbacks: pass callbacks=[collapse] too")
        step = 0 if state is None else state.global_step
        if step % self.every or step == self._scored_step:  # each due generation batch once
            return
        self._scored_step = step
        texts = [p if isinstance(p, str) else self.tokenizer.apply_chat_template(
            p, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs) for p in prompts]
        reasonings = [read_reasoning(_text(c), self.pattern, self.prefilled) for c in completions]
        training = self._model.training
        self._model.eval()  # the weights that sampled, without dropout
        try:
            with torch.no_grad():
                metrics = self.monitor.update(step, texts, reasonings)
        finally:
            self._model.train(training)
        numbers = {k: float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float, np.floating)) and k != "step"}
        self.history.append({"step": step, **numbers, "warning": metrics["warning"]})
        if log_metric is not None:
            for name, value in numbers.items():
                log_metric(f"collapse/{name}", value)


class FilteredGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that trains only on the prompt groups the reward-variance filter keeps (see the
    module docstring). ``filtering``: the ``FilterConfig`` (default top-p 0.9 over the reward std, linear:
    RAGEN-2's); ``filter_loss_scaling``: ``"none"``, ``"linear"`` or ``"sqrt"``. Other arguments are
    GRPOTrainer's. The filter acts on training batches, not on evaluation."""

    def __init__(self, *args, filtering: FilterConfig | None = None, filter_loss_scaling: str = "none", **kwargs):
        if filter_loss_scaling not in LOSS_SCALINGS:
            raise ValueError(f"filter_loss_scaling must be one of {', '.join(LOSS_SCALINGS)}, got "
                             f"{filter_loss_scaling!r}")
        self.filtering = filtering or FilterConfig("top_p", 0.9)
        if self.filtering.metric not in ("std", "variance", "mean", "sum") or self.filtering.level != "prompt":
            raise ValueError("FilteredGRPOTrainer ranks prompt groups by a reward metric (std, variance, mean, "
                             f"sum), got metric {self.filtering.metric!r} at level {self.filtering.level!r}")
        self.filter_loss_scaling = filter_loss_scaling
        self._rewards_per_func = None
        super().__init__(*args, **kwargs)
        self._filter_rng = np.random.default_rng(self.args.seed)  # a random control's draws, alike on every rank

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func  # every process's samples, in the batch's order

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        weights = self.reward_weights.to(self._rewards_per_func.device)
        rewards = torch.nan_to_num((self._rewards_per_func * weights).nansum(dim=1), nan=0.0)
        returns = rewards.view(-1, self.num_generations).cpu().numpy().astype(float)  # P x G, every process
        kept = np.asarray(select_groups(returns, self.filtering, rng=self._filter_rng), dtype=int)
        keep = np.zeros(len(returns), dtype=bool)
        keep[kept] = True
        rows = len(output["completion_mask"])
        start = self.accelerator.process_index * rows
        mine = torch.as_tensor(np.repeat(keep, self.num_generations)[start:start + rows],
                               device=output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * mine.unsqueeze(1).to(output["completion_mask"].dtype)
        loss_mask = output["completion_mask"] * output["tool_mask"] if "tool_mask" in output \
            else output["completion_mask"]
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        ratio = len(kept) / len(returns)
        output["advantages"] = output["advantages"] * self._advantage_scale(ratio)
        stds = returns.std(axis=1, ddof=1)
        self._metrics["train"]["filter/kept_ratio"].append(ratio)
        self._metrics["train"]["filter/zero_variance_share"].append(float(np.mean(stds <= 1e-12)))
        return output

    def _advantage_scale(self, ratio: float) -> float:
        """The factor on the kept samples' advantages that gives ``filter_loss_scaling`` under this loss type."""
        if ratio == 0:
            return 0.0
        wanted = {"none": 1.0, "linear": ratio, "sqrt": ratio ** 0.5}[self.filter_loss_scaling]
        implicit = ratio if self.loss_type in ROW_NORMALISED else 1.0  # what the row mean already does
        return wanted / implicit
