"""The trainer: rollout -> MI proxies -> SNR-aware filter -> advantages -> update, for ``num_iterations``.

    from trainers import Trainer, TrainerConfig
    Trainer(None, "Ragen/FrozenLake-v0", TrainerConfig(algorithm="grpo", filter="top_p")).train()

One iteration (``iteration_step``), top to bottom, each phase a method below it:
1. ``_rollout``: P prompt groups x G samples with the current policy (``RolloutRunner``, or
   ``AsyncRolloutRunner`` with ``rollout.asynchronous``), their metrics and the chance level.
2. ``mi_diagnostics``: every ``mi_every`` iterations, before filtering, the MI proxies
   (``ragen_envs.diagnose.mi``: which pairs, and their cross log-likelihoods) at first-turn and trajectory scope.
3. ``_stats``: the no-grad pass (old log-probs, token entropy, reference log-probs, values) where
   anything needs it; entropies come from the sampler when it reports them.
4. ``_filter``: each group scored (``filter_metric``) and kept by ``filter`` (``config.filtering``, a
   ``FilterConfig`` of ``ragen_envs.diagnose.filtering``: RAGEN's selection rules), over all ranks'
   groups (``filter_control="random"``: as many groups drawn at random, the control arm); a streak of
   empty iterations stops the run.
5. ``_advantages``: the kept samples' (``algorithms.advantages``: GAE across segments for PPO,
   group-relative for GRPO, DAPO and Dr. GRPO), after the no-grad pass where the update needs it,
   then scaled by RAGEN's advantage options (``_advantage_factors``). The filter and the advantages
   see the returns after RAGEN's reward normalization (``_returns``, ``trainers.rewards``; off by default).
6. ``_probe``: on ``gradient_analysis_every``'s iterations, the gradient probe (``trainers.gradient_probe``):
   each loss term's gradient norm by reward-std bucket of the kept batch (or of a batch of its own),
   no step taken.
7. ``_update``: ``ppo_epochs`` passes over the kept samples in minibatches (``batch.minibatches``,
   RAGEN's fixed size: keeping fewer groups means fewer optimizer steps, the paper's 26-41% shorter
   steps), each a sum of micro-batch backward passes (``_backward``, ``_micro_loss``).
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

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch

from ragen_envs.agent.async_rollout import make_runner
from ragen_envs.agent.baseline import random_success
from ragen_envs.agent.trajectory import rollout_metrics
from ragen_envs.diagnose import mi
from ragen_envs.diagnose.filtering import (LOW_RV_RATIO, REWARD_METRICS, filter_stats, reward_std, select,
                                           select_trajectories)
from trainers import algorithms as alg
from trainers import gradient_probe, rewards
from trainers.base import TrainerBase
from trainers.batch import Layout, OldPass, collate, minibatches, trajectory_samples, update_steps
from trainers.distributed import RANK_SEED_STRIDE, all_gather_rows, all_reduce, full_weights, gathered
from trainers.filtering import scores_for
from trainers.metrics import GROUP_RV_FILE, append_csv
from trainers.model import checkpointing


@dataclass
class Prepared:
    """A rollout batch ready for the losses: laid out, its no-grad statistics, and what the filter kept."""
    layout: Layout
    stats: list[OldPass | None]  # per micro-batch: its no-grad pass, or None where none was needed yet
    chosen: list[int]  # this rank's sample indices to train on
    kept: np.ndarray  # the kept groups, as indices into all ranks' groups
    returns: np.ndarray  # all ranks' P x G episode returns
    groups: int  # prompt groups per rank


ANALYSIS_SEED_OFFSET = 500_000  # the probe's own batch: env seeds from rollout seed + this


class Trainer(TrainerBase):
    """The RL trainer (the module docstring); its arguments are ``TrainerBase``'s."""

    analysis_runner = None  # the gradient probe's own rollouts, when it has a batch of its own

    def iteration_step(self) -> dict:
        start = time.perf_counter()
        cfg = self.config
        metrics: dict[str, float] = {}
        if cfg.probe.only and self._own_probe_batch():  # the training batch is not needed
            metrics.update(self._timed(metrics, "probe", self._probe_of, None, {}))
            return {**metrics, "trainer/exited_after_gradient_analysis": 1.0}
        trajectories = self._timed(metrics, "rollout", self._rollout, metrics)
        if self.mi_due():
            self._phase("MI scoring")
            metrics.update(self._timed(metrics, "mi", self.mi_diagnostics, trajectories))
        batch = self._prepare(trajectories, metrics)
        metrics["time/update_s"] = 0.0
        advantages = self._advantages(batch, metrics, steer=True) if len(batch.kept) else {}
        if self.probe_due():
            self._phase("gradient probe")
            metrics.update(self._timed(metrics, "probe", self._probe_of, batch, advantages))
            if cfg.probe.only:
                metrics["trainer/exited_after_gradient_analysis"] = 1.0
                return metrics
        if len(batch.kept):
            self._phase("update")
            syncs = self.rollout_policy is not self.policy and hasattr(self.rollout_policy, "load_weights")
            if syncs and hasattr(self.rollout_policy, "sleep"):
                self.rollout_policy.sleep()  # its GPU memory is the update's until load_weights wakes it
            with checkpointing(self.model, cfg.gradient_checkpointing):
                metrics.update(self._timed(metrics, "update", self._update, batch.layout, batch.stats, batch.chosen,
                                           advantages))
            if syncs:
                self._timed(metrics, "sync", self.rollout_policy.load_weights, full_weights(self.model, self.sharded))
        metrics["time/iteration_s"] = time.perf_counter() - start
        for name in ("mi", "probe"):
            if f"time/{name}_s" in metrics:
                metrics[f"time/{name}_share"] = metrics[f"time/{name}_s"] / metrics["time/iteration_s"]
        return metrics

    def probe_due(self) -> bool:
        """The gradient probe's iterations (``gradient_probe.due``), or this call's first with
        ``exit_after_gradient_analysis``."""
        cfg = self.config
        return cfg.probe.only or gradient_probe.due(self.iteration, cfg.probe.every)

    def _prepare(self, trajectories, metrics: dict, runner=None) -> "Prepared":
        """A rollout batch laid out for the losses, its no-grad statistics and what the filter kept."""
        cfg = self.config
        returns = self._returns(trajectories, runner or self.runner)
        groups = len((runner or self.runner).group_envs)
        mine = returns[self.rank * groups:(self.rank + 1) * groups].reshape(-1)
        samples = [s for i, t in enumerate(trajectories)
                   for s in trajectory_samples(t, i, mine[i], cfg.use_turn_scores)]
        layout = Layout.of(samples, cfg.micro_batch_size, self.tokenizer.pad_token_id)
        stats = self._timed(metrics, "stats", self._stats, trajectories, layout, metrics)
        return self._timed(metrics, "filter", self._filter, trajectories, layout, stats, metrics, returns, runner)

    def _returns(self, trajectories, runner) -> np.ndarray:
        """All ranks' P x G returns to train on: the episode returns, normalised as configured
        (``trainers.rewards``: RAGEN's reward_normalization)."""
        cfg = self.config
        raw = np.array([t.episode_return for t in trajectories]).reshape(len(runner.group_envs), -1)
        every = all_gather_rows(raw, self.world)
        return rewards.normalized(every, runner.group_envs * self.world, cfg.reward_normalization_grouping,
                                  cfg.reward_normalization_method)

    def _advantages(self, batch: "Prepared", metrics: dict, steer: bool = False) -> dict[int, alg.Target]:
        """The kept samples' advantages, after the no-grad pass where the update needs one, the in-reward KL
        taken off first where it is on (``steer``: the training batch's, which moves an adaptive coefficient)."""
        cfg = self.config
        if self._needs_old_pass(len(batch.chosen)):  # only the micro-batches that hold kept samples
            pass_start = time.perf_counter()
            with gathered(self.scorer, self.sharded):
                todo = [b for b in batch.layout.batches_holding(batch.chosen) if batch.stats[b] is None]
                for n, b in enumerate(todo):
                    self._progress("no-grad pass: micro-batch", n, len(todo))
                    batch.stats[b] = self._old_stats(batch.layout.batches[b])
            metrics["time/stats_s"] = metrics.get("time/stats_s", 0.0) + time.perf_counter() - pass_start
        advantages = alg.advantages(batch.layout, batch.chosen, "gae" if cfg.advantage == "gae" else "group",
                                    batch.stats, cfg.gamma, cfg.lam, cfg.scale_rewards,
                                    cfg.high_level_gamma if cfg.bi_level_gae else None,
                                    self._reward_kl(batch, metrics, steer))
        return alg.scaled(advantages, self._advantage_factors(batch, metrics))

    def _reward_kl(self, batch: "Prepared", metrics: dict, steer: bool) -> dict | None:
        """verl's ``apply_kl_penalty``: per kept sample, the coefficient x each generated token's KL estimate to
        the reference (None where the penalty is off). Logs the batch's KL (each sequence's mean over its
        tokens, averaged over all ranks' sequences) and the coefficient it was taken with; with ``steer`` an
        adaptive coefficient then moves by that KL (``algorithms.adaptive_kl_coef``)."""
        k = self.config.kl_reward
        if not (k.on and k.coef > 0):
            return None
        layout, stats, penalty, means = batch.layout, batch.stats, {}, []
        for i in batch.chosen:
            mask = layout.mask(i)
            kl = alg.kl_estimate(layout.stat(stats, "logp", i), layout.stat(stats, "ref_logp", i), k.penalty) * mask
            penalty[i] = self.rl.kl_coef * kl
            means.append(float(kl.sum() / mask.sum().clamp(min=1)))
        total, count = all_reduce([sum(means), len(means)], self.world)
        current = total / max(count, 1)
        metrics.update({"kl/reward_kl": current, "kl/reward_coef": self.rl.kl_coef})
        if steer and k.ctrl == "adaptive":
            self.rl.kl_coef = alg.adaptive_kl_coef(self.rl.kl_coef, current, k.target, k.horizon, int(count))
        return penalty

    def _advantage_factors(self, batch: "Prepared", metrics: dict) -> dict[int, float]:
        """Per kept sample, what RAGEN's advantage options multiply its advantages by, in its order:
        soft_advantage_reweight, filter_loss_scaling, grpo_advantage_length_weight, zero_task_advantage."""
        cfg, layout = self.config, batch.layout
        factor = {i: 1.0 for i in batch.chosen}
        if cfg.soft_advantage_reweight:  # group std / the largest kept group's, over all ranks' kept groups
            stds = reward_std(batch.returns)
            top = float(stds[batch.kept].max())
            weights = {i: float(stds[self.rank * batch.groups + layout.samples[i].group]) / (top + 1e-6)
                       for i in batch.chosen}
            factor = {i: factor[i] * weights[i] for i in factor}
            kept_weights = stds[batch.kept] / (top + 1e-6)
            metrics.update({"advantage/soft_reweight_min": float(kept_weights.min()),
                            "advantage/soft_reweight_max": float(kept_weights.max()),
                            "advantage/soft_reweight_mean": float(kept_weights.mean())})
        if cfg.filter_loss_scaling != "none":  # RAGEN's kept ratio: kept groups / all groups
            ratio = len(batch.kept) / len(batch.returns)
            scale = ratio if cfg.filter_loss_scaling == "linear" else ratio ** 0.5
            factor = {i: f * scale for i, f in factor.items()}
        if cfg.grpo_advantage_length_weight:  # / (generated tokens / their mean over all ranks' kept samples)
            lengths = {i: float(layout.mask(i).sum()) for i in batch.chosen}
            total, count = all_reduce([int(sum(lengths.values())), len(lengths)], self.world)
            mean = total / max(count, 1)
            factor = {i: f / ((lengths[i] + 1e-6) / mean) for i, f in factor.items()}
        if cfg.zero_task_advantage:
            factor = dict.fromkeys(factor, 0.0)
        return factor

    def _log_group_rv(self, returns: np.ndarray, kept, runner) -> None:
        """A row per group of this iteration in group_rv.csv: its reward std and whether it was kept."""
        stds, kept = reward_std(returns), {int(g) for g in kept}
        envs = runner.group_envs * self.world
        rows = [{"iteration": self.iteration + 1, "group": g, "env": envs[g], "reward_std": float(stds[g]),
                 "kept": int(g in kept)} for g in range(len(stds))]
        append_csv(self.output_dir / GROUP_RV_FILE, rows)

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
        if self.logger is not None:
            self.logger.add_episodes(trajectories, self.iteration + 1)
        n, every = self.iteration + 1, cfg.saving.rollouts_steps
        # a probe alone (exit_after_gradient_analysis) leaves the run folder as it was
        if self.rank == 0 and every and (n % every == 0 or n == cfg.num_iterations) \
                and not cfg.probe.only:
            self.unsaved_rollouts = trajectories  # written when the iteration has finished (train())
        return trajectories

    def mi_due(self) -> bool:
        """RAGEN's schedule: the first iteration, then every ``mi_every``-th (1-based); never without
        thinking (``enable_think`` off: no reasoning Z to score, and RAGEN switches its detector off too)."""
        n, every = self.iteration + 1, self.config.mi_every
        return bool(every) and (n == 1 or n % every == 0) and self.config.rollout.chat.enable_think

    def mi_diagnostics(self, trajectories) -> dict:
        """The MI proxies of both scopes and families (``ragen_envs.diagnose.mi.diagnostics``)."""
        cfg = self.config
        rng = mi.pair_rng(cfg.rollout.seed, self.iteration)
        with gathered(self.scorer, self.sharded):
            return mi.diagnostics(self.policy, trajectories, cfg.mi_first_turn_pairs, cfg.mi_trajectory_pairs, rng,
                                  self.rl.mi_emas, self.think_ids,
                                  progress=lambda scope, done, total: self._progress(
                                      f"MI scoring: {scope} column", done, total))

    def _stats(self, trajectories, layout: Layout, metrics: dict) -> list[OldPass | None]:
        """The no-grad pass over every micro-batch when the filter or the entropy metric needs it
        (else None per micro-batch: the update runs what it needs later)."""
        turns = [turn for t in trajectories for turn in t.turns]
        sampler_entropy = bool(turns) and all(turn.entropies is not None for turn in turns)
        stats: list[OldPass | None] = [None] * len(layout.batches)
        if self.config.filtering.metric not in REWARD_METRICS + ("length",) or not sampler_entropy:
            with gathered(self.scorer, self.sharded):
                for b, micro in enumerate(layout.batches):
                    self._progress("no-grad pass: micro-batch", b, len(layout.batches))
                    stats[b] = self._old_stats(micro)
        if sampler_entropy:
            count = sum(len(turn.entropies) for turn in turns)
            metrics["policy/token_entropy"] = sum(sum(turn.entropies) for turn in turns) / count if count else 0.0
        else:
            total = sum(float((s.entropy * b.mask).sum()) for s, b in zip(stats, layout.batches))
            count = sum(float(b.mask.sum()) for b in layout.batches)
            metrics["policy/token_entropy"] = total / count if count else 0.0
        return stats

    def _filter(self, trajectories, layout: Layout, stats, metrics: dict, all_returns: np.ndarray,
                runner=None) -> "Prepared":
        """The batch with this rank's sample indices to train on and the groups any rank kept (of the
        training runner's batch, or of the probe's own ``runner``, which leaves the run's state be).
        ``all_returns``: all ranks' P x G returns to train on (``_returns``)."""
        cfg, filtering = self.config, self.config.filtering
        training = runner is None
        runner = runner or self.runner
        groups = len(runner.group_envs)
        keep = None  # with filter_level="trajectory": the kept trajectories, all ranks' P x G
        if not (training or cfg.probe.filter):  # the probe's own batch, whole
            kept = np.arange(len(all_returns))
        elif filtering.level == "trajectory":
            keep = select_trajectories(all_returns, filtering)
            kept = np.flatnonzero(keep.any(axis=1))
        else:  # across ranks the filter ranks every group of the global batch; each rank trains its own kept ones
            returns = all_returns[self.rank * groups:(self.rank + 1) * groups]
            scores = scores_for(filtering.metric, returns, trajectories, layout, stats)
            scores = all_gather_rows(scores[:, None], self.world)[:, 0]
            # a random control's draw: alike on every rank, its own per iteration
            kept = select(scores, filtering, rng=np.random.default_rng([cfg.rollout.seed, self.iteration, 1]))
        metrics.update(filter_stats(all_returns, kept))
        metrics["filter/kept_trajectory_ratio"] = metrics["filter/kept_ratio"] if keep is None else float(keep.mean())
        if not training:
            return self._kept(layout, stats, kept, all_returns, groups, keep)
        # a probe alone (exit_after_gradient_analysis) leaves the run folder as it was
        if cfg.log_group_rv_table and self.rank == 0 and not cfg.probe.only:
            self._log_group_rv(all_returns, kept, runner)
        self.rl.empty_filter_streak = 0 if len(kept) else self.rl.empty_filter_streak + 1
        metrics["filter/empty_streak"] = float(self.rl.empty_filter_streak)
        if filtering.strategy != "none" and 0 < metrics["filter/rv_std_over_mean"] <= LOW_RV_RATIO:
            warnings.warn(f"iteration {self.iteration + 1}: Std(RV)/Mean(RV) = "
                          f"{metrics['filter/rv_std_over_mean']:.2f} <= {LOW_RV_RATIO}: reward variance is "
                          "flat across prompts, so filtering is unlikely to help", stacklevel=2)
        return self._kept(layout, stats, kept, all_returns, groups, keep)

    def _kept(self, layout: Layout, stats, kept, returns, groups: int, keep=None) -> "Prepared":
        """``keep``: the trajectory-level filter's P x G mask (None: every trajectory of a kept group)."""
        mine = {int(g) - self.rank * groups for g in kept if self.rank * groups <= g < (self.rank + 1) * groups}
        flat = None if keep is None else keep[self.rank * groups:(self.rank + 1) * groups].reshape(-1)
        chosen = [i for i, s in enumerate(layout.samples)  # trajectories in the order of the returns' rows
                  if s.group in mine and (flat is None or flat[s.trajectory])]
        return Prepared(layout, stats, chosen, np.asarray(kept, dtype=int), returns, groups)

    # == the gradient probe ======================================================================
    def _probe_of(self, batch: Prepared | None, advantages: dict) -> dict:
        """The gradient probe on the iteration's kept batch, or on a batch of its own (rolled out with
        its own seeds, filtered as the run filters unless ``gradient_analysis_filter`` is off, never
        trained on) when the config asks for one."""
        cfg = self.config
        if not self._own_probe_batch():
            return self._probe(batch, advantages)
        runner = self._analysis_runner()
        self.model.eval()
        with gathered(self.scorer, self.sharded):
            trajectories = runner.collect(progress=lambda turn, active: self._phase(
                f"gradient probe: rollout turn {turn + 1}/{cfg.rollout.chat.max_turns}", episodes=active))
        scratch: dict[str, float] = {}  # the analysis batch's own statistics do not describe the training batch
        own = self._prepare(trajectories, scratch, runner)
        return self._probe(own, self._advantages(own, scratch) if len(own.kept) else {})

    def _own_probe_batch(self) -> bool:
        cfg = self.config
        return cfg.probe.env_groups is not None or cfg.probe.group_size is not None

    def _analysis_runner(self):
        """The probe's own rollout runner (built once): the run's envs in the run's proportions, its own
        groups and group size, env seeds far from the training and validation ones."""
        if self.analysis_runner is None:
            cfg = self.config
            mix = self.runner.mix
            total = cfg.probe.env_groups or sum(mix.values())
            scaled = {env_id: max(1, round(total * n / sum(mix.values()))) for env_id, n in mix.items()}
            config = replace(cfg.rollout, group_size=cfg.probe.group_size or cfg.rollout.group_size,
                             seed=cfg.rollout.seed + ANALYSIS_SEED_OFFSET + self.rank * RANK_SEED_STRIDE)
            self.analysis_runner = make_runner(scaled, self.rollout_policy, config)
        return self.analysis_runner

    def _probe(self, batch: Prepared, advantages: dict) -> dict:
        """``trainers.gradient_probe``'s metrics on ``batch``: per reward-variance bucket of its kept groups
        and per loss term, the norm of the term's gradient, with no optimizer step."""
        cfg = self.config
        if not len(batch.kept):
            return {"grad_norm/all/sample_count": 0.0}
        stds = reward_std(batch.returns)[batch.kept]
        mine: dict[int, list[int]] = {}  # a kept group (all-rank index) -> this rank's samples of it
        for i in batch.chosen:
            mine.setdefault(self.rank * batch.groups + batch.layout.samples[i].group, []).append(i)
        total = all_reduce([len(batch.chosen), 0], self.world)[0]
        policy_params = self.optimizer.param_groups[0]["params"]
        metrics: dict[str, float] = {}
        self.model.train()
        with gradient_probe.rng_kept():
            split = gradient_probe.buckets(stds, cfg.probe.bucket_mode, cfg.probe.num_buckets)
            for name, positions in split.items():
                indices = [i for g in batch.kept[positions] for i in mine.get(int(g), [])]
                count, tokens, _ = all_reduce([len(indices), int(sum(batch.layout.mask(i).sum() for i in indices)), 0],
                                              self.world)
                prefix, spread = f"grad_norm/{name}", stds[positions]
                metrics.update({f"{prefix}/sample_count": float(count), f"{prefix}/sample_pct": count / max(total, 1),
                                f"{prefix}/group_count": float(len(positions)),
                                f"{prefix}/reward_std_mean": float(spread.mean()),
                                f"{prefix}/reward_std_min": float(spread.min()),
                                f"{prefix}/reward_std_max": float(spread.max())})
                for term, parts in gradient_probe.terms(cfg).items():
                    step = self._backward(indices, batch.layout, batch.stats, advantages, parts,
                                          phase=f"gradient probe: {name}, {term} term, micro-batch")
                    if step is None:  # no generated token in the bucket
                        continue
                    norm = float(torch.nn.utils.clip_grad_norm_(policy_params, float("inf")))
                    loss = all_reduce([step.get("loss/total", 0.0), 0], self.world)[0]  # an idle rank has no parts
                    metrics.update({f"{prefix}/{term}": norm, f"{prefix}/per_sample/{term}": norm / count,
                                    f"{prefix}/per_token/{term}": norm / tokens, f"{prefix}/loss/{term}": float(loss)})
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        return metrics

    def _needs_old_pass(self, kept_samples: int) -> bool:
        """Whether the update needs the no-grad pass. It does not when the update is on-policy (one
        epoch, one optimizer step: the old log-probs are the current ones, detached), there is no KL
        reference and no critic whose values the advantages need."""
        cfg = self.config
        steps = update_steps(kept_samples, cfg.mini_batch_size, cfg.num_minibatches, cfg.batch_adjust)
        steps = all_reduce([steps], self.world)[0]  # every rank takes the busiest rank's steps
        return cfg.ppo_epochs * steps > 1 or self.ref_scorer is not None or cfg.advantage == "gae"

    @torch.no_grad()
    def _old_stats(self, batch) -> OldPass:
        logp, entropy, value = self._token_outputs(self.scorer, batch)
        ref_logp = None if self.ref_scorer is None else self._token_outputs(self.ref_scorer, batch)[0].cpu()
        return OldPass(logp.cpu(), entropy.cpu(), None if value is None else value.cpu(), ref_logp)

    # == the update ===============================================================================
    def _update(self, layout: Layout, stats, chosen, advantages) -> dict:
        cfg = self.config
        self.model.train()
        shuffle = torch.Generator().manual_seed(cfg.rollout.seed * 1_000_003 + self.iteration)
        # The policy and the critic clip their gradients apart, as verl's actor and critic do.
        policy_params, *critic_params = [group["params"] for group in self.optimizer.param_groups]
        steps = []  # per optimizer step: the loss parts summed over its micro-batches
        done = 0
        for _ in range(cfg.ppo_epochs):
            order = [chosen[j] for j in torch.randperm(len(chosen), generator=shuffle).tolist()]
            batches = self._minibatches(order, shuffle)
            for minibatch in batches:
                self._progress("update: minibatch", done, cfg.ppo_epochs * len(batches))
                done += 1
                step = self._backward(minibatch, layout, stats, advantages)
                if step is None:
                    continue
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

    def _backward(self, indices, layout: Layout, stats, advantages, terms=None,
                  phase: str | None = None) -> dict[str, float] | None:
        """The gradient of the loss of ``indices`` (this rank's share of an all-rank minibatch), from
        zero, summed over micro-batch backward passes; the loss parts (None: no rank has a generated
        token, and nothing ran). ``terms``: backward only these ``loss_terms`` (default: all); ``phase``:
        the progress shown per micro-batch (a minibatch of the update shows its own)."""
        cfg = self.config
        mb = cfg.micro_batch_size
        # micro-batches of like lengths pad less; the minibatch's loss is their sum, whatever the grouping
        indices = sorted(indices, key=lambda i: len(layout.samples[i].ids))
        masks = [layout.mask(i) for i in indices]
        counted = [sum(int(m.sum() > 0) for m in masks), int(sum(m.sum() for m in masks))]
        # A sample whose advantage is 0 on every token adds nothing to the task term, its loss or its
        # gradient; where no other term runs, its passes are left out (it still counts in the
        # normalisers, so the gradient is exactly the same): a group whose episodes all scored alike.
        # The logged loss parts (entropy, approx_kl) then cover the samples that ran.
        if self._task_term_only(terms):
            indices = [i for i in indices if bool(advantages[i].advantages.any())]
        # Normalisers and micro-batch counts of the whole (all-rank) minibatch: every rank
        # must run as many backward passes as the others, or DDP waits forever.
        sequences, tokens, micro = all_reduce(counted + [-(-len(indices) // mb)], self.world)
        if tokens == 0:
            return None
        norm = alg.Normalizer(sequences=sequences, tokens=tokens,
                              max_length=cfg.rollout.chat.max_turns * cfg.rollout.sampling.max_new_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        step: dict[str, float] = {}
        if micro == 0:  # every sample left out: the gradient is zero, and the step still takes it
            self._idle_backward(layout.samples)
            step = {"loss/policy": 0.0, "loss/clip_frac": 0.0, "loss/total": 0.0}  # the task term's, exactly
        for k in range(micro):
            if phase:
                self._progress(phase, k, micro)
            part = [int(i) for i in indices[k * mb:(k + 1) * mb]]
            if not part:  # this rank has run out: a pass that adds nothing
                self._idle_backward(layout.samples)
                continue
            for key, value in self._micro_loss(part, layout, stats, advantages, norm, terms).items():
                step[key] = step.get(key, 0.0) + value
        return step

    def _task_term_only(self, terms) -> bool:
        """Whether a backward of ``terms`` (None: the whole loss) runs the task term alone (no entropy
        bonus, KL or critic term): only then does a zero advantage make a sample's gradient zero."""
        cfg = self.config
        running = {"task"} | {name for name, on in (("entropy", cfg.entropy_coef), ("kl", cfg.beta > 0),
                                                    ("value", cfg.advantage == "gae")) if on}
        return (running if terms is None else running & set(terms)) <= {"task"}

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

    def _micro_loss(self, indices, layout: Layout, stats, advantages, norm, terms=None) -> dict[str, float]:
        """Backward on a micro-batch's share of the minibatch loss (or of its ``terms``); return its parts."""
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
        targets = [advantages[i] for i in indices]
        named, parts = alg.loss_terms(
            cfg, batch.mask.to(self.device), norm, logp, entropy, old_logp, stack([t.advantages for t in targets]),
            ref_logp=stack([layout.stat(stats, "ref_logp", i) for i in indices]) if cfg.beta > 0 else None,
            values=values if critic else None,
            old_values=stack([layout.stat(stats, "values", i) for i in indices]) if critic else None,
            returns=stack([t.returns for t in targets]) if critic else None)
        loss = sum(named.values()) if terms is None else sum(named[t] for t in terms if t in named)
        parts["loss/total"] = loss.item()
        # DDP averages gradients over ranks; the loss is a share of the all-rank sum, so undo the mean.
        (loss * self.world).backward()
        return parts
