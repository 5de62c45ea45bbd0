"""The trainer: rollout -> MI proxies -> SNR-aware filter -> advantages -> update, for ``num_iterations``.

    from trainers import Trainer, TrainerConfig
    Trainer(None, "Ragen/FrozenLake-v0", TrainerConfig(algorithm="grpo", filter="top_p")).train()

One iteration (``iteration_step``), top to bottom, each phase a method below it:
1. ``_rollout``: P prompt groups x G samples with the current policy (``RolloutRunner``, or
   ``AsyncRolloutRunner`` with ``rollout.asynchronous``), their metrics and the chance level.
2. ``_mi``: every ``mi_every`` iterations, before filtering, the MI proxies (``trainers.mi``: which
   pairs, and their cross log-likelihoods) at first-turn and trajectory scope.
3. ``_stats``: the no-grad pass (old log-probs, token entropy, reference log-probs, values) where
   anything needs it; entropies come from the sampler when it reports them.
4. ``_filter``: each group scored (``filter_metric``) and kept by ``filter`` (``trainers.filtering``:
   RAGEN's selection rules), over all ranks' groups; a streak of empty iterations stops the run.
5. ``_update``: advantages (``algorithms.advantages``: GAE across segments for PPO, group-relative
   for GRPO, DAPO and Dr. GRPO), then ``ppo_epochs`` passes over the kept samples in minibatches
   (``batch.minibatches``, RAGEN's fixed size: keeping fewer groups means fewer optimizer steps, the
   paper's 26-41% shorter steps), each a sum of micro-batch backward passes (``_micro_loss``).
Every loss is an average (over tokens, sequences, or a constant per sequence for Dr. GRPO). A batch
where nothing is kept (all scores 0 under top_p) is skipped and logged so.

Several processes (``torchrun --nproc_per_node N -m ragen_envs.cli train ...``) train data-parallel
with DDP: each rank rolls out its own P groups (its own seeds), the filter ranks all ranks' groups
together, each rank updates on its own kept groups, and gradients are summed with the loss normalisers
of the whole batch, so N ranks x P groups train like one process with N x P groups (except PPO's
advantage whitening, which stays per rank). Rank 0 logs and writes checkpoints.
``data_parallel="fsdp"`` shards the model instead (FSDP2, ``trainers/distributed.py``).
"""

from __future__ import annotations

import random
import time
import warnings

import numpy as np
import torch

from ragen_envs.agent.backends.base import TokenPrompt
from ragen_envs.agent.baseline import random_success
from ragen_envs.agent.trajectory import rollout_metrics, save_jsonl
from trainers import algorithms as alg
from trainers import mi
from trainers.base import TrainerBase
from trainers.batch import Layout, collate, minibatches, trajectory_samples, update_steps
from trainers.distributed import all_gather_rows, all_reduce, full_weights, gathered
from trainers.filtering import LOW_RV_RATIO, REWARD_METRICS, filter_stats, scores_for, select


class Trainer(TrainerBase):
    """The RL trainer (the module docstring); its arguments are ``TrainerBase``'s."""

    def iteration_step(self) -> dict:
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        trajectories = self._timed(metrics, "rollout", self._rollout, metrics)
        if self.mi_due():
            self._phase("MI scoring")
            metrics.update(self._timed(metrics, "mi", self.mi_diagnostics, trajectories))
        samples = [s for i, t in enumerate(trajectories) for s in trajectory_samples(t, i)]
        layout = Layout.of(samples, self.config.micro_batch_size, self.tokenizer.pad_token_id)
        stats = self._timed(metrics, "stats", self._stats, trajectories, layout, metrics)
        chosen, any_kept = self._timed(metrics, "filter", self._filter, trajectories, layout, stats, metrics)
        metrics["time/update_s"] = 0.0
        if any_kept:
            if self._needs_old_pass(len(chosen)):  # only the micro-batches that hold kept samples
                pass_start = time.perf_counter()
                with gathered(self.scorer, self.sharded):
                    for b in layout.batches_holding(chosen):
                        stats[b] = stats[b] or self._old_stats(layout.batches[b])
                metrics["time/stats_s"] += time.perf_counter() - pass_start
            self._phase("update")
            metrics.update(self._timed(metrics, "update", self._update, layout, stats, chosen))
            if self.rollout_policy is not self.policy and hasattr(self.rollout_policy, "load_weights"):
                self._timed(metrics, "sync", self.rollout_policy.load_weights, full_weights(self.model, self.sharded))
        metrics["time/iteration_s"] = time.perf_counter() - start
        if "time/mi_s" in metrics:
            metrics["time/mi_share"] = metrics["time/mi_s"] / metrics["time/iteration_s"]
        return metrics

    # == the phases ===============================================================================
    def _rollout(self, metrics: dict) -> list:
        cfg = self.config
        max_turns = cfg.rollout.chat.max_turns
        self.model.eval()
        with gathered(self.scorer, self.sharded):
            trajectories = self.runner.collect(
                progress=lambda turn, active: self._phase(f"rollout turn {turn + 1}/{max_turns}", episodes=active))
        metrics.update({f"rollout/{k}": v for k, v in rollout_metrics(trajectories).items()})
        chance = random_success(trajectories, cfg.rollout.chat, cfg.rollout.seed + self.iteration)
        if chance:  # the chance level on the same episodes (envs with a finite action set)
            metrics["rollout/random_success"] = float(np.mean(list(chance.values())))
        n, every = self.iteration + 1, cfg.save_rollouts_steps
        if self.rank == 0 and every and (n % every == 0 or n == cfg.num_iterations):
            save_jsonl(trajectories, self.output_dir / "rollouts" / f"iteration-{n}.jsonl")
        return trajectories

    def mi_due(self) -> bool:
        """RAGEN's schedule: the first iteration, then every ``mi_every``-th (1-based)."""
        n, every = self.iteration + 1, self.config.mi_every
        return bool(every) and (n == 1 or n % every == 0)

    def mi_diagnostics(self, trajectories) -> dict:
        """The MI proxies of both scopes and families (``trainers.mi.diagnostics``)."""
        cfg = self.config
        rng = random.Random(cfg.rollout.seed * 1_000_003 + self.iteration)
        with gathered(self.scorer, self.sharded):
            return mi.diagnostics(self.policy, trajectories, cfg.mi_first_turn_pairs, cfg.mi_trajectory_pairs, rng,
                                  self.mi_emas, self._through_think)

    def _through_think(self, prompt: TokenPrompt) -> TokenPrompt:
        """A first-turn prompt up to and including <think> (already there when the prompt prefills it)."""
        ids = list(prompt)
        return TokenPrompt(ids if ids[-len(self.think_ids):] == self.think_ids else ids + self.think_ids,
                           prompt.images)

    def _stats(self, trajectories, layout: Layout, metrics: dict) -> list[dict | None]:
        """The no-grad pass over every micro-batch when the filter or the entropy metric needs it
        (else None per micro-batch: the update runs what it needs later)."""
        turns = [turn for t in trajectories for turn in t.turns]
        sampler_entropy = bool(turns) and all(turn.entropies is not None for turn in turns)
        stats: list[dict | None] = [None] * len(layout.batches)
        if self.config.filter_metric not in REWARD_METRICS + ("length",) or not sampler_entropy:
            with gathered(self.scorer, self.sharded):
                stats = [self._old_stats(b) for b in layout.batches]
        if sampler_entropy:
            count = sum(len(turn.entropies) for turn in turns)
            metrics["policy/token_entropy"] = sum(sum(turn.entropies) for turn in turns) / count if count else 0.0
        else:
            total = sum(float((s["entropy"] * b.mask).sum()) for s, b in zip(stats, layout.batches))
            count = sum(float(b.mask.sum()) for b in layout.batches)
            metrics["policy/token_entropy"] = total / count if count else 0.0
        return stats

    def _filter(self, trajectories, layout: Layout, stats, metrics: dict) -> tuple[list[int], bool]:
        """(this rank's sample indices to train on, whether any rank kept a group)."""
        cfg = self.config
        groups = len(self.runner.group_envs)
        returns = np.array([t.episode_return for t in trajectories]).reshape(groups, cfg.rollout.group_size)
        # Across ranks the filter ranks every group of the global batch; each rank trains its own kept ones.
        scores = scores_for(cfg.filter_metric, returns, trajectories, layout, stats)
        scores = all_gather_rows(scores[:, None], self.world)[:, 0]
        kept = select(scores, cfg.filter, cfg.filter_value, cfg.filter_prob_mode, cfg.filter_order, cfg.include_zero)
        metrics.update(filter_stats(all_gather_rows(returns, self.world), kept))
        self.empty_filter_streak = 0 if len(kept) else self.empty_filter_streak + 1
        metrics["filter/empty_streak"] = float(self.empty_filter_streak)
        if cfg.filter != "none" and 0 < metrics["filter/rv_std_over_mean"] <= LOW_RV_RATIO:
            warnings.warn(f"iteration {self.iteration + 1}: Std(RV)/Mean(RV) = "
                          f"{metrics['filter/rv_std_over_mean']:.2f} <= {LOW_RV_RATIO}: reward variance is "
                          "flat across prompts, so filtering is unlikely to help", stacklevel=2)
        mine = {int(g) - self.rank * groups for g in kept if self.rank * groups <= g < (self.rank + 1) * groups}
        return [i for i, s in enumerate(layout.samples) if s.group in mine], bool(len(kept))

    def _needs_old_pass(self, kept_samples: int) -> bool:
        """Whether the update needs the no-grad pass. It does not when the update is on-policy (one
        epoch, one optimizer step: the old log-probs are the current ones, detached), there is no KL
        reference and no critic whose values the advantages need."""
        cfg = self.config
        steps = update_steps(kept_samples, cfg.mini_batch_size, cfg.num_minibatches, cfg.batch_adjust)
        steps = all_reduce([steps], self.world)[0]  # every rank takes the busiest rank's steps
        return cfg.ppo_epochs * steps > 1 or self.ref_scorer is not None or cfg.advantage == "gae"

    @torch.no_grad()
    def _old_stats(self, batch) -> dict:
        logp, entropy, value = self._token_outputs(self.scorer, batch)
        out = {"logp": logp.cpu(), "entropy": entropy.cpu(), "values": None if value is None else value.cpu()}
        if self.ref_scorer is not None:
            out["ref_logp"] = self._token_outputs(self.ref_scorer, batch)[0].cpu()
        return out

    # == the update ===============================================================================
    def _update(self, layout: Layout, stats, chosen) -> dict:
        cfg = self.config
        advantages = alg.advantages(layout, chosen, "gae" if cfg.advantage == "gae" else "group", stats,
                                    cfg.gamma, cfg.lam, cfg.scale_rewards)
        self.model.train()
        shuffle = torch.Generator().manual_seed(cfg.rollout.seed * 1_000_003 + self.iteration)
        max_length = cfg.rollout.chat.max_turns * cfg.rollout.sampling.max_new_tokens
        # The policy and the critic clip their gradients apart, as verl's actor and critic do.
        policy_params, *critic_params = [group["params"] for group in self.optimizer.param_groups]
        steps = []  # per optimizer step: the loss parts summed over its micro-batches
        mb = cfg.micro_batch_size
        for _ in range(cfg.ppo_epochs):
            order = [chosen[j] for j in torch.randperm(len(chosen), generator=shuffle).tolist()]
            for minibatch in self._minibatches(order, shuffle):
                masks = [layout.mask(i) for i in minibatch]
                # Normalisers and micro-batch counts of the whole (all-rank) minibatch: every rank
                # must run as many backward passes as the others, or DDP waits forever.
                sequences, tokens, micro = all_reduce(
                    [sum(int(m.sum() > 0) for m in masks), int(sum(m.sum() for m in masks)),
                     -(-len(minibatch) // mb)], self.world)
                if tokens == 0:
                    continue
                norm = alg.Normalizer(sequences=sequences, tokens=tokens, max_length=max_length)
                self.optimizer.zero_grad(set_to_none=True)
                step: dict[str, float] = {}
                for k in range(micro):
                    indices = [int(i) for i in minibatch[k * mb:(k + 1) * mb]]
                    if not indices:  # this rank has run out: a pass that adds nothing
                        self._idle_backward(layout.samples)
                        continue
                    for key, value in self._micro_loss(indices, layout, stats, advantages, norm).items():
                        step[key] = step.get(key, 0.0) + value
                step["loss/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(policy_params, cfg.max_grad_norm))
                if critic_params:
                    step["loss/critic_grad_norm"] = float(
                        torch.nn.utils.clip_grad_norm_(critic_params[0], cfg.max_grad_norm))
                self.optimizer.step()
                steps.append(step)
        self.model.eval()
        keys = {key for step in steps for key in step}
        metrics = {key: float(np.mean([s[key] for s in steps if key in s])) for key in keys}
        metrics["loss/updates"] = float(len(steps))
        return metrics

    def _minibatches(self, order: list[int], generator: torch.Generator) -> list[np.ndarray]:
        """``batch.minibatches``, then as many empty ones as every rank needs to take as many steps as
        the busiest rank (an empty minibatch runs an idle pass)."""
        cfg = self.config
        chunks = minibatches(order, cfg.mini_batch_size, cfg.num_minibatches, cfg.batch_adjust, generator)
        steps = all_reduce([len(chunks)], self.world)[0]
        return chunks + [np.array([], dtype=int)] * (steps - len(chunks))

    def _idle_backward(self, samples) -> None:
        """A zero-gradient pass, so this rank joins the others' gradient all-reduce."""
        batch = collate(samples[:1], self.tokenizer.pad_token_id)
        logp, entropy, values = self._token_outputs(self.train_scorer, batch)
        zero = 0.0 * (logp.sum() + entropy.sum() + (values.sum() if values is not None else 0.0))
        zero.backward()

    def _micro_loss(self, indices, layout: Layout, stats, advantages, norm) -> dict[str, float]:
        """Backward on a micro-batch's share of the minibatch loss; return its parts."""
        cfg = self.config
        batch = collate([layout.samples[i] for i in indices], self.tokenizer.pad_token_id)
        width = batch.mask.shape[1]

        def stack(rows):  # per-sample (T_i-1,) tensors -> this micro-batch's (B, T-1)
            return torch.stack([torch.nn.functional.pad(r, (0, width - r.shape[0])) for r in rows]).to(
                self.device).float()

        logp, entropy, values = self._token_outputs(self.train_scorer, batch)
        # on-policy without the no-grad pass: the old log-probs are these, before the step
        have_stats = all(stats[layout.locate(i)[0]] is not None for i in indices)
        old_logp = stack([layout.stat(stats, "logp", i) for i in indices]) if have_stats else logp.detach()
        critic = cfg.advantage == "gae"
        loss, parts = alg.total_loss(
            cfg, batch.mask.to(self.device), norm, logp, entropy, old_logp, stack([advantages[i][0] for i in indices]),
            ref_logp=stack([layout.stat(stats, "ref_logp", i) for i in indices]) if cfg.beta > 0 else None,
            values=values if critic else None,
            old_values=stack([layout.stat(stats, "values", i) for i in indices]) if critic else None,
            returns=stack([advantages[i][1] for i in indices]) if critic else None)
        # DDP averages gradients over ranks; the loss is a share of the all-rank sum, so undo the mean.
        (loss * self.world).backward()
        return parts
