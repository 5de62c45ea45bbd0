"""The trainer: rollout -> advantages -> SNR-aware filter -> update, for ``num_iterations``.

    from trainers import Trainer, TrainerConfig
    Trainer(None, "Ragen/FrozenLake-v0", TrainerConfig(algorithm="grpo", filter="top_p")).train()

One iteration, top to bottom (``Trainer.iteration``):
1. Roll out P prompt groups x G samples with the current policy (``RolloutRunner``, or
   ``AsyncRolloutRunner`` with ``rollout.asynchronous``).
2. Every ``mi_every`` iterations, before filtering: the MI proxies (first-turn and trajectory scope).
   Then one no-grad pass over all sequences: old log-probs, token entropy, reference log-probs (KL)
   and values (PPO).
3. Score the groups (``filter_metric``: the std of their returns by default) and keep them by ``filter``
   (``trainers.filtering``, RAGEN's selection rules); stop after ``filter_empty_stop`` empty ones in a row.
4. Advantages: GAE over generated tokens (PPO) or group-relative (GRPO, DAPO, Dr. GRPO).
5. ``ppo_epochs`` passes over the kept groups in minibatches of ``mini_batch_size`` sequences.

Filtering and step size: as in RAGEN's released code, the minibatch has a fixed size: the kept
sequences are padded with random copies (``batch_adjust="copy"``) to a multiple of
``mini_batch_size`` and split, so keeping fewer groups means fewer optimizer steps and a shorter
iteration (the paper's 26-41% shorter steps). Every loss is an average (over tokens, sequences, or a
constant per sequence for Dr. GRPO). ``mini_batch_size=None`` instead keeps ``num_minibatches`` steps
per epoch whatever the filter kept (filtering then shrinks each minibatch, not the number of steps).
A batch where nothing is kept (all scores 0 under top_p) is skipped and logged so.

Several processes (``torchrun --nproc_per_node N -m ragen_envs.cli train ...``) train data-parallel
with PyTorch's DistributedDataParallel: each rank rolls out its own P groups (its own seeds), the
filter ranks all ranks' groups together, each rank updates on its own kept groups, and gradients are
summed across ranks with the loss normalisers of the whole batch, so N ranks x P groups train like one
process with N x P groups (except PPO's advantage whitening, which stays per rank). Rank 0 logs its
own rollout metrics and the global filter statistics, and writes the checkpoints.
``data_parallel="fsdp"`` shards the model instead (FSDP2, ``trainers/distributed.py``): the same
update, with each rank holding a shard of weights, gradients and optimizer state.
"""

from __future__ import annotations

import copy
import json
import random
import time
import warnings
from contextlib import nullcontext
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from ragen_envs.agent import progress
from ragen_envs.agent.backends.transformers import TransformersPolicy, pick_device
from ragen_envs.agent.baseline import random_success
from ragen_envs.agent.default_model import load_model
from ragen_envs.agent.rollout import check_envs, make_runner
from ragen_envs.agent.trajectory import save_jsonl, summarize
from trainers import algorithms as alg
from trainers import checkpoint, run_folder
from trainers.batch import Batch, Sample, collate, trajectory_samples
from trainers.config import TrainerConfig
from trainers.distributed import (RANK_SEED_STRIDE, all_gather_rows, all_reduce, broadcast, full_state, full_weights,
                                  gathered, init_distributed, load_optimizer, shard)
from trainers.filtering import LOW_RV_RATIO, REWARD_METRICS, filter_stats, group_scores, per_group, select
from trainers.freeze import freeze_bottom
from trainers.metrics import MetricsLogger, plot_run
from trainers.mi import MIZScoreEMA, cross_loglik, mi_metrics, mi_metrics_code
from trainers.scoring import TokenScorer


class Trainer:
    """Args:
        model: a path or id, a loaded causal LM (then pass ``tokenizer``), or None for the default.
        env: an env id, or a dict env id -> number of prompt groups (a mix; overrides rollout.n_groups).
        config: the hyperparameters.
        callbacks: objects with ``on_iteration_end(trainer, iteration, metrics)``.
        Resuming (``config.resume_from_checkpoint``) takes the same initial ``model``: it is the KL
        reference, and the checkpoint's weights are loaded over it.
        rollout_policy: another backend to generate rollouts (e.g. ``VLLMPolicy``), or a function with
            no arguments that builds it (called after the env, run folder and config are checked, so a
            bad argument is reported before a slow engine loads); it gets the new weights after each
            update through its ``load_weights``. Default: the trained model itself.
    """

    def __init__(self, model=None, env: str | dict[str, int] = "Ragen/Sokoban-v0",
                 config: TrainerConfig | None = None, tokenizer=None, callbacks=(), device: str | None = None,
                 rollout_policy=None):
        cfg = config or TrainerConfig()
        self.rank, self.world = init_distributed()
        # What the resolved config records: the model as given (None: the embedded default).
        self.model_name = None if model is None else str(model) if isinstance(model, (str, Path)) \
            else getattr(model.config, "_name_or_path", None)
        # Everything that can be checked without the model is checked before it loads.
        self.device = pick_device(device)
        mix = check_envs(env, cfg.rollout)
        self.output_dir = self._run_folder(cfg, mix)
        self.config = cfg = replace(cfg, output_dir=str(self.output_dir))
        resume, resume_state = None, None
        if cfg.resume_from_checkpoint:
            resume = checkpoint.find(self.output_dir, cfg.resume_from_checkpoint)
            resume_state = checkpoint.validate(resume, cfg.algorithm, self.model_name)
        else:
            old_run = run_folder.check(self.output_dir, cfg.overwrite_output_dir)
            all_reduce([0], self.world)  # every rank has checked before rank 0 clears or writes
            if self.rank == 0:
                run_folder.clear(old_run)
        if model is None or isinstance(model, (str, Path)):
            model, tokenizer = load_model(model, torch.float32, tokenizer)
        if tokenizer is None:
            raise ValueError("pass the tokenizer together with a loaded model")
        self.model = model.to(self.device).float()  # fp32 master weights
        freeze_bottom(self.model, cfg.freeze_layers)  # before the critic copies the model
        self.tokenizer = tokenizer
        self.policy = TransformersPolicy(self.model, tokenizer, device=str(self.device))
        self.callbacks = list(callbacks)
        if callable(rollout_policy) and not hasattr(rollout_policy, "generate"):
            rollout_policy = rollout_policy()
        self.rollout_policy = rollout_policy or self.policy
        # Each rank rolls out its own groups.
        self.runner = make_runner(mix, self.rollout_policy,
                                  replace(cfg.rollout, seed=cfg.rollout.seed + self.rank * RANK_SEED_STRIDE))
        hidden = self.model.config.hidden_size
        gae = cfg.advantage == "gae"
        self.value_head = torch.nn.Linear(hidden, 1).to(self.device) if gae else None
        if self.value_head is not None:
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        # RAGEN's (verl's) critic is a model of its own, started from the same weights.
        self.critic_trunk = copy.deepcopy(self.model).train() if gae and cfg.critic == "separate" else None
        self.ref_scorer = None  # the frozen initial model, for the KL term
        if cfg.beta > 0:
            reference = copy.deepcopy(self.model).eval().requires_grad_(False)
            self.ref_scorer = TokenScorer(reference, None, cfg.rollout.sampling.temperature)
        self.scorer = TokenScorer(self.model, self.value_head, cfg.rollout.sampling.temperature,
                                  critic_trunk=self.critic_trunk, detach_value=not cfg.critic_backprop)
        self.train_scorer = self.scorer
        self.sharded = self.world > 1 and cfg.data_parallel == "fsdp"
        self._resume_tensors = None
        if self.sharded:
            if gae:
                raise ValueError("data_parallel='fsdp' trains the critic-free algorithms (grpo, dapo, drgrpo); "
                                 "PPO's critic is not sharded: use data_parallel='ddp'")
            if resume is not None:  # full weights go in before the model is cut into shards
                self._resume_tensors = checkpoint.load(resume, self.model)
            shard(self.scorer, self.model)  # the KL reference (above) stays a full copy on every rank
            # FSDP2 sets itself up on its first forward, which must go through the root (the scorer):
            # one tiny no-grad pass, the same on every rank.
            with torch.no_grad():
                warm = collate([Sample([tokenizer.eos_token_id] * 2, [0, 1], 0, 0, 0.0, True)], tokenizer.pad_token_id)
                self._token_outputs(self.scorer, warm)
            self.scorer.reshard()  # the root stays gathered after a forward; the optimizer must get its shards
        elif self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_scorer = DistributedDataParallel(self.scorer, device_ids=ids)
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": cfg.learning_rate}]
        if self.value_head is not None:
            critic = [p for p in [*self.value_head.parameters(),
                                  *(self.critic_trunk.parameters() if self.critic_trunk else [])] if p.requires_grad]
            groups.append({"params": critic, "lr": cfg.critic_learning_rate})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
        # Each scope and family smooths its own sigma.
        self.mi_emas = {name: MIZScoreEMA(variant="code" if name.endswith("_code") else "paper")
                        for name in ("first", "first_code", "traj", "traj_code")}
        self.iteration = 0
        self.empty_filter_streak = 0  # iterations in a row in which the filter kept nothing
        self.think_ids = list(tokenizer("<think>", add_special_tokens=False)["input_ids"])
        if resume is not None:
            self._load_checkpoint(resume, resume_state)
        self.plot_path: Path | None = None
        self._bar = None  # train()'s progress bar (rank 0)
        # Only rank 0 writes metrics and checkpoints.
        self.logger = MetricsLogger(self.output_dir, keep_iterations=self.iteration) if self.rank == 0 else None
        if self.rank == 0:
            self.write_config()

    def _run_folder(self, cfg: TrainerConfig, mix: dict[str, int]) -> Path:
        """The run folder: ``output_dir``; else a resumed checkpoint's parent; else a new folder."""
        if cfg.output_dir:
            return Path(cfg.output_dir)
        if cfg.resume_from_checkpoint == "latest":
            raise ValueError("resume_from_checkpoint='latest' needs output_dir, the run folder to resume")
        if cfg.resume_from_checkpoint:
            return Path(cfg.resume_from_checkpoint).parent
        return Path(broadcast(str(run_folder.new_folder(cfg.algorithm, list(mix))), self.world))

    def write_config(self) -> Path:
        """``config.json`` next to the metrics: every field resolved, plus env and model, so
        ``ragen train --config`` repeats the run."""
        path = self.output_dir / "config.json"
        record = {"model": self.model_name, "env": self.runner.mix, **self.config.to_dict()}
        path.write_text(json.dumps(record, indent=2) + "\n")
        return path

    # ==========================================================================================
    def train(self) -> list[dict]:
        """Train up to ``num_iterations`` in all; write the metrics, the last checkpoint and the plot.
        Returns this call's per-iteration metrics (empty when the run was already complete)."""
        cfg = self.config
        history = []
        saving = cfg.save_strategy == "steps"
        if self.iteration >= cfg.num_iterations:
            if self.rank == 0:
                print(f"{self.output_dir} is at iteration {self.iteration} and num_iterations is "
                      f"{cfg.num_iterations}: nothing to train (raise --iterations to continue)", flush=True)
            return history
        # rank 0's progress: a bar over the iterations, the current phase beside it
        self._bar = progress.bar(cfg.num_iterations, "it", "training") if self.rank == 0 else None
        self._phase("starting")
        while self.iteration < cfg.num_iterations:
            metrics = self.iteration_step()
            self.iteration += 1
            metrics["iteration"] = self.iteration
            history.append(metrics)
            for callback in self.callbacks:
                callback.on_iteration_end(self, self.iteration, metrics)
            # The streak comes from the global filter, so every rank stops at the same iteration.
            stop = bool(cfg.filter_empty_stop) and self.empty_filter_streak >= cfg.filter_empty_stop
            if self.logger is not None:
                self.logger.log(metrics)
                if cfg.logging_steps and self.iteration % cfg.logging_steps == 0:
                    self._bar.print(self.logger.table_row(metrics))
                self._phase("done" if self.iteration == cfg.num_iterations else "next")
            if saving and cfg.save_steps and self.iteration % cfg.save_steps == 0:
                self.save_checkpoint()  # on every rank: a sharded model is gathered first; rank 0 writes
            if self.logger is not None:
                if stop:
                    print(f"stopping early: the filter kept nothing for {self.empty_filter_streak} iterations in a "
                          f"row (filter_empty_stop={cfg.filter_empty_stop}; RAGEN's rollout_filter_empty_stop_steps)",
                          flush=True)
            if stop:
                break
        if saving and (not cfg.save_steps or self.iteration % cfg.save_steps):
            self.save_checkpoint()
        if self.rank == 0 and cfg.plot:
            self.plot_path = plot_run(self.output_dir)
        return history

    def _phase(self, phase: str, **more) -> None:
        if self._bar is not None:
            self._bar(self.iteration, phase=phase, **more)

    def iteration_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        self.model.eval()
        max_turns = cfg.rollout.chat.max_turns
        with gathered(self.scorer, self.sharded):
            trajectories = self.runner.collect(
                progress=lambda turn, active: self._phase(f"rollout turn {turn + 1}/{max_turns}", episodes=active))
        metrics = {f"rollout/{k}": v for k, v in summarize(trajectories).items() if k != "episodes"}
        metrics["time/rollout_s"] = time.perf_counter() - start
        chance = random_success(trajectories, cfg.rollout.chat, cfg.rollout.seed + self.iteration)
        if chance:  # the chance level on the same episodes (envs with a finite action set)
            metrics["rollout/random_success"] = float(np.mean(list(chance.values())))
        self._save_rollouts(trajectories)

        if self.mi_due():
            self._phase("MI scoring")
            mi_start = time.perf_counter()
            with gathered(self.scorer, self.sharded):
                metrics.update(self.mi_diagnostics(trajectories))
            metrics["time/mi_s"] = time.perf_counter() - mi_start

        samples = [s for i, t in enumerate(trajectories) for s in trajectory_samples(t, i)]
        mb = cfg.micro_batch_size
        batches = [collate(samples[i:i + mb], self.tokenizer.pad_token_id) for i in range(0, len(samples), mb)]
        # The no-grad pass (old log-probs, entropies, values, reference log-probs) runs only where
        # something needs it; entropies come from the sampler when it reports them.
        stats: list[dict | None] = [None] * len(batches)
        turns = [turn for t in trajectories for turn in t.turns]
        sampler_entropy = bool(turns) and all(turn.entropies is not None for turn in turns)
        stats_start = time.perf_counter()
        if cfg.filter_metric not in REWARD_METRICS + ("length",) or not sampler_entropy:
            with gathered(self.scorer, self.sharded):
                stats = [self._old_stats(b) for b in batches]
        metrics["time/stats_s"] = time.perf_counter() - stats_start
        if sampler_entropy:
            count = sum(len(turn.entropies) for turn in turns)
            metrics["policy/token_entropy"] = sum(sum(turn.entropies) for turn in turns) / count if count else 0.0
        else:
            metrics["policy/token_entropy"] = _masked_mean([s["entropy"] for s in stats], [b.mask for b in batches])

        filter_start = time.perf_counter()
        groups = len(self.runner.group_envs)
        returns = np.array([t.episode_return for t in trajectories]).reshape(groups, cfg.rollout.group_size)
        # Across ranks the filter ranks every group of the global batch; each rank trains its own kept ones.
        scores = all_gather_rows(self._group_scores(returns, trajectories, samples, batches, stats)[:, None],
                                 self.world)[:, 0]
        kept_global = select(scores, cfg.filter, cfg.filter_value, cfg.filter_prob_mode, cfg.filter_order,
                             cfg.include_zero)
        everywhere = all_gather_rows(returns, self.world)
        metrics.update(filter_stats(everywhere, kept_global))
        self.empty_filter_streak = 0 if len(kept_global) else self.empty_filter_streak + 1
        metrics["filter/empty_streak"] = float(self.empty_filter_streak)
        kept = kept_global[(kept_global >= self.rank * groups) & (kept_global < (self.rank + 1) * groups)]
        kept = kept - self.rank * groups
        if cfg.filter != "none" and 0 < metrics["filter/rv_std_over_mean"] <= LOW_RV_RATIO:
            warnings.warn(f"iteration {self.iteration + 1}: Std(RV)/Mean(RV) = "
                          f"{metrics['filter/rv_std_over_mean']:.2f} <= {LOW_RV_RATIO}: reward variance is "
                          "flat across prompts, so filtering is unlikely to help", stacklevel=2)
        keep = set(kept.tolist())
        chosen = [i for i, s in enumerate(samples) if s.group in keep]
        metrics["time/filter_s"] = time.perf_counter() - filter_start
        metrics["time/update_s"] = 0.0

        if len(kept_global):
            if self._needs_old_pass(len(chosen)):  # only the micro-batches that hold kept samples
                stats_start = time.perf_counter()
                with gathered(self.scorer, self.sharded):
                    for j in sorted({i // mb for i in chosen}):
                        stats[j] = stats[j] or self._old_stats(batches[j])
                metrics["time/stats_s"] += time.perf_counter() - stats_start
            self._phase("update")
            update_start = time.perf_counter()
            metrics.update(self._update(samples, batches, stats, chosen))
            metrics["time/update_s"] = time.perf_counter() - update_start
            if self.rollout_policy is not self.policy and hasattr(self.rollout_policy, "load_weights"):
                sync_start = time.perf_counter()
                self.rollout_policy.load_weights(full_weights(self.model, self.sharded))
                metrics["time/sync_s"] = time.perf_counter() - sync_start
        metrics["time/iteration_s"] = time.perf_counter() - start
        if "time/mi_s" in metrics:
            metrics["time/mi_share"] = metrics["time/mi_s"] / metrics["time/iteration_s"]
        return metrics

    def _needs_old_pass(self, kept_samples: int) -> bool:
        """Whether the update needs the no-grad pass. It does not when the update is on-policy (one
        epoch, one optimizer step: the old log-probs are the current ones, detached), there is no KL
        reference and no critic whose values the advantages need."""
        cfg = self.config
        if cfg.mini_batch_size is None:
            steps = cfg.num_minibatches
        elif cfg.batch_adjust == "copy":
            steps = -(-kept_samples // cfg.mini_batch_size)
        else:
            steps = kept_samples // cfg.mini_batch_size
        steps = all_reduce([steps], self.world)[0]  # every rank takes the busiest rank's steps
        return cfg.ppo_epochs * steps > 1 or self.ref_scorer is not None or cfg.advantage == "gae"

    def _group_scores(self, returns, trajectories, samples, batches, stats) -> np.ndarray:
        """This rank's score per group for the filter (``filter_metric``)."""
        metric = self.config.filter_metric
        if metric in REWARD_METRICS:
            return group_scores(returns, metric)
        groups = returns.shape[0]
        if metric == "length":
            return per_group([sum(len(turn.response_ids) for turn in t.turns) for t in trajectories], groups, "mean")
        # Mean token entropy per trajectory over its generated tokens (all its segments).
        mb = self.config.micro_batch_size
        total, count = np.zeros(len(trajectories)), np.zeros(len(trajectories))
        for i, sample in enumerate(samples):
            mask = batches[i // mb].mask[i % mb]
            total[sample.trajectory] += float((stats[i // mb]["entropy"][i % mb] * mask).sum())
            count[sample.trajectory] += float(mask.sum())
        return per_group(total / np.maximum(count, 1), groups, "mean" if metric == "entropy" else "std")

    def _save_rollouts(self, trajectories) -> None:
        """Rank 0's trajectories of every ``save_rollouts_steps``-th and of the last iteration."""
        n, every = self.iteration + 1, self.config.save_rollouts_steps
        if self.rank == 0 and every and (n % every == 0 or n == self.config.num_iterations):
            save_jsonl(trajectories, self.output_dir / "rollouts" / f"iteration-{n}.jsonl")

    # -- MI diagnostics ------------------------------------------------------------------------
    def mi_due(self) -> bool:
        """RAGEN's schedule: the first iteration, then every ``mi_every``-th (1-based)."""
        n, every = self.iteration + 1, self.config.mi_every
        return bool(every) and (n == 1 or n % every == 0)

    def mi_diagnostics(self, trajectories) -> dict:
        """First-turn scope: X_i = group i's first prompt up to and including <think>, Z_ik = the first
        turn's reasoning, ``mi_first_turn_pairs`` pairs drawn without replacement (0: all). Trajectory
        scope, as RAGEN draws it: ``mi_trajectory_pairs`` draws with replacement of a trajectory, then
        one of its turns with reasoning, each draw its own column (chance: 1 / distinct prompts).
        Both families of proxies are logged: ``mi/`` (the paper's formulas) and ``mi_code/`` (the
        released code's), and ``mi_traj/``, ``mi_traj_code/`` for the trajectory scope."""
        cfg = self.config
        rng = random.Random(cfg.rollout.seed * 1_000_003 + self.iteration)
        out = {}
        all_turns = [turn for t in trajectories for turn in t.turns]
        if all_turns:
            with_reasoning = [len(turn.reasoning_ids) for turn in all_turns if turn.reasoning_ids]
            out["mi/valid_thinking_rate"] = len(with_reasoning) / len(all_turns)
            out["mi/reasoning_tokens"] = float(np.mean(with_reasoning)) if with_reasoning else 0.0
        firsts = [(t.group, t.turns[0]) for t in trajectories if t.turns]
        out["mi/empty_reasoning_rate"] = (sum(not turn.reasoning_ids for _, turn in firsts) / len(firsts)
                                          if firsts else 1.0)
        valid = [(g, turn) for g, turn in firsts if turn.reasoning_ids]
        if cfg.mi_first_turn_pairs and len(valid) > cfg.mi_first_turn_pairs:
            valid = rng.sample(valid, cfg.mi_first_turn_pairs)
        by_group: dict[int, list] = {}
        for group, turn in sorted(valid, key=lambda pair: pair[0]):
            by_group.setdefault(group, []).append(turn)
        if len(by_group) > 1:
            prompts = [self._through_think(turns[0].prompt_ids) for turns in by_group.values()]
            reasonings = [[turn.reasoning_ids for turn in turns] for turns in by_group.values()]
            out.update(self._mi_families("mi", "first", *cross_loglik(self.policy, prompts, reasonings)))
        if cfg.mi_trajectory_pairs:
            turns_of = [[turn for turn in t.turns if turn.reasoning_ids] for t in trajectories]
            draws = min(cfg.mi_trajectory_pairs, sum(len(turns) for turns in turns_of))
            pairs = []
            for _ in range(draws):
                turns = turns_of[rng.randrange(len(turns_of))]
                if turns:  # a trajectory without reasoning wastes its draw, as in RAGEN
                    turn = rng.choice(turns)
                    pairs.append((turn.reasoning_prompt_ids, turn.reasoning_ids))
            if len(pairs) > 1:
                loglik, lengths = cross_loglik(self.policy, [x for x, _ in pairs], [[z] for _, z in pairs])
                if loglik.shape[0] > 1:
                    out.update(self._mi_families("mi_traj", "traj", loglik, lengths))
        return out

    def _mi_families(self, prefix: str, scope: str, loglik, lengths) -> dict:
        out = {f"{prefix}/{k}": v for k, v in mi_metrics(loglik, lengths).items()}
        out.update({f"{prefix}_code/{k}": v for k, v in mi_metrics_code(loglik, lengths).items()})
        out[f"{prefix}/mi_zscore_ema"] = self.mi_emas[scope].update(loglik, lengths)
        out[f"{prefix}_code/mi_zscore_ema"] = self.mi_emas[f"{scope}_code"].update(loglik, lengths)
        return out

    def _through_think(self, prompt_ids) -> list[int]:
        """A first-turn prompt up to and including <think> (already there when the prompt prefills it)."""
        ids = list(prompt_ids)
        return ids if ids[-len(self.think_ids):] == self.think_ids else ids + self.think_ids

    # -- forward passes ------------------------------------------------------------------------
    def _autocast(self):
        if _use_bf16(self.config.mixed_precision, self.device):
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _token_outputs(self, scorer, batch: Batch):
        ids, attn = batch.ids.to(self.device), batch.attention.to(self.device)
        with self._autocast():
            return scorer(ids, attn, batch.mask.to(self.device).bool(), batch.targets.to(self.device))

    @torch.no_grad()
    def _old_stats(self, batch: Batch) -> dict:
        logp, entropy, value = self._token_outputs(self.scorer, batch)
        out = {"logp": logp.cpu(), "entropy": entropy.cpu(), "values": None if value is None else value.cpu()}
        if self.ref_scorer is not None:
            out["ref_logp"] = self._token_outputs(self.ref_scorer, batch)[0].cpu()
        return out

    # -- the update ----------------------------------------------------------------------------
    def _advantages(self, samples, batches, stats, chosen) -> dict[int, torch.Tensor]:
        """Per chosen sample index: a (T-1,) advantage tensor (and PPO returns)."""
        cfg = self.config
        mb = cfg.micro_batch_size
        result = {}
        if not chosen:
            return result
        if cfg.advantage == "gae":
            # GAE runs over a trajectory's segments joined in order, so a segment cut by the context cap
            # bootstraps from the next one's values and gets the rewards that come after it.
            advs, rets = {}, {}
            by_trajectory: dict[int, list[int]] = {}
            for i in chosen:
                by_trajectory.setdefault(samples[i].trajectory, []).append(i)
            for parts in by_trajectory.values():
                rewards = torch.cat([batches[i // mb].rewards[i % mb] for i in parts])[None]
                values = torch.cat([stats[i // mb]["values"][i % mb] for i in parts])[None]
                mask = torch.cat([batches[i // mb].mask[i % mb] for i in parts])[None]
                a, r = alg.gae(rewards, values, mask, cfg.gamma, cfg.lam)
                offset = 0
                for i in parts:
                    n = batches[i // mb].mask[i % mb].numel()
                    advs[i], rets[i] = a[0, offset:offset + n], r[0, offset:offset + n]
                    offset += n
            flat = torch.cat([advs[i] for i in chosen])
            mask = torch.cat([batches[i // mb].mask[i % mb] for i in chosen])
            white = alg.whiten(flat, mask)
            offset = 0
            for i in chosen:
                n = advs[i].numel()
                result[i] = (white[offset:offset + n], rets[i])
                offset += n
            return result
        # One advantage per trajectory (a trajectory split by the context cap counts once), given to
        # every generated token of its sequences.
        first = {}
        for i in chosen:
            first.setdefault(samples[i].trajectory, samples[i])
        returns = torch.tensor([s.episode_return for s in first.values()], dtype=torch.float64)
        groups = torch.tensor([s.group for s in first.values()])
        per_trajectory = dict(zip(first, alg.group_advantages(returns, groups, cfg.scale_rewards).tolist()))
        for i in chosen:
            result[i] = (per_trajectory[samples[i].trajectory] * batches[i // mb].mask[i % mb], None)
        return result

    def _update(self, samples, batches, stats, chosen) -> dict:
        cfg = self.config
        mb = cfg.micro_batch_size
        advantages = self._advantages(samples, batches, stats, chosen)
        self.model.train()
        shuffle = torch.Generator().manual_seed(cfg.rollout.seed * 1_000_003 + self.iteration)
        max_length = cfg.rollout.chat.max_turns * cfg.rollout.sampling.max_new_tokens
        # The policy and the critic clip their gradients apart, as verl's actor and critic do.
        policy_params, *critic_params = [group["params"] for group in self.optimizer.param_groups]
        steps = []  # per optimizer step: the loss parts summed over its micro-batches
        for _ in range(cfg.ppo_epochs):
            order = [chosen[j] for j in torch.randperm(len(chosen), generator=shuffle).tolist()]
            for minibatch in self._minibatches(order, shuffle):
                masks = [batches[i // mb].mask[i % mb] for i in minibatch]
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
                        self._idle_backward(samples)
                        continue
                    for key, value in self._micro_loss(indices, samples, stats, advantages, norm).items():
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
        """The epoch's minibatches of sample indices. With ``mini_batch_size`` (RAGEN's rule) the kept
        samples are padded with random copies of themselves (or trimmed, ``batch_adjust="delete"``) to a
        multiple of it, so the number of steps follows what the filter kept; every rank takes as many
        steps as the busiest one (an empty minibatch runs an idle pass). Else ``num_minibatches`` splits."""
        cfg = self.config
        order = np.array(order, dtype=int)
        if cfg.mini_batch_size is None:
            return np.array_split(order, cfg.num_minibatches)
        size, remainder = cfg.mini_batch_size, len(order) % cfg.mini_batch_size
        if remainder and cfg.batch_adjust == "delete":
            order = order[:len(order) - remainder]
        elif remainder and len(order):
            missing = size - remainder
            picks = torch.randint(len(order), (missing,), generator=generator) if missing > len(order) \
                else torch.randperm(len(order), generator=generator)[:missing]
            order = np.concatenate([order, order[picks.numpy()]])
        chunks = [order[i:i + size] for i in range(0, len(order), size)]
        steps = all_reduce([len(chunks)], self.world)[0]
        return chunks + [order[:0]] * (steps - len(chunks))

    def _idle_backward(self, samples) -> None:
        """A zero-gradient pass, so this rank joins the others' gradient all-reduce."""
        batch = collate(samples[:1], self.tokenizer.pad_token_id)
        logp, entropy, values = self._token_outputs(self.train_scorer, batch)
        zero = 0.0 * (logp.sum() + entropy.sum() + (values.sum() if values is not None else 0.0))
        zero.backward()

    def _micro_loss(self, indices, samples, stats, advantages, norm) -> dict[str, float]:
        """Backward on a micro-batch's share of the minibatch loss; return its parts."""
        cfg = self.config
        mb = cfg.micro_batch_size
        batch = collate([samples[i] for i in indices], self.tokenizer.pad_token_id)
        width = batch.mask.shape[1]

        def stack(rows):  # per-sample (T_i-1,) tensors -> this micro-batch's (B, T-1)
            return torch.stack([_pad(r, width) for r in rows]).to(self.device).float()

        def pick(key):
            return stack([stats[i // mb][key][i % mb] for i in indices])

        mask = batch.mask.to(self.device)
        adv = stack([advantages[i][0] for i in indices])
        logp, entropy, values = self._token_outputs(self.train_scorer, batch)
        # on-policy without the no-grad pass: the old log-probs are these, before the step
        old_logp = pick("logp") if all(stats[i // mb] is not None for i in indices) else logp.detach()
        policy_tok, clipped = alg.clipped_policy_loss(logp, old_logp, adv, cfg.epsilon, cfg.epsilon_high,
                                                      cfg.dual_clip)
        loss = alg.aggregate(policy_tok, mask, cfg.loss_type, norm)
        parts = {"loss/policy": loss.item(), "loss/clip_frac": alg.aggregate(clipped, mask, "dapo", norm).item(),
                 "loss/approx_kl": alg.aggregate(old_logp - logp.detach(), mask, "dapo", norm).item()}
        if cfg.beta > 0:
            kl = alg.aggregate(alg.kl_k3(logp, pick("ref_logp")), mask, cfg.loss_type, norm)
            loss = loss + cfg.beta * kl
            parts["loss/kl"] = kl.item()
        ent = alg.aggregate(entropy, mask, cfg.loss_type, norm)
        parts["loss/entropy"] = ent.item()
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * ent
        if cfg.advantage == "gae":
            returns = stack([advantages[i][1] for i in indices])
            vloss = alg.aggregate(alg.clipped_value_loss(values, pick("values"), returns, cfg.cliprange_value),
                                  mask, "dapo", norm)
            loss = loss + cfg.vf_coef * vloss
            parts["loss/value"] = vloss.item()
        # DDP averages gradients over ranks; the loss is a share of the all-rank sum, so undo the mean.
        (loss * self.world).backward()
        parts["loss/total"] = loss.item()
        return parts

    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self) -> Path | None:
        """Write ``checkpoint-<iteration>`` in the output folder (rank 0 only), keeping the newest
        ``save_total_limit``."""
        weights, optimizer_state = full_state(self.model, self.optimizer, self.sharded)  # every rank gathers
        if self.rank != 0:
            return None
        # The reference model is the initial model, rebuilt from it on resume: not saved again.
        tensors = {"optimizer": optimizer_state,
                   "value_head": None if self.value_head is None else self.value_head.state_dict(),
                   "critic": None if self.critic_trunk is None else self.critic_trunk.state_dict()}
        meta = {"iteration": self.iteration, "calls": self.runner.calls,
                "mi_ema": {name: ema.state_dict() for name, ema in self.mi_emas.items()},
                "model": self.model_name, "config": asdict(self.config)}
        with progress.step(f"writing checkpoint-{self.iteration}") as note:
            path = checkpoint.save(self.output_dir, self.iteration, self.model, self.tokenizer, tensors, meta,
                                   keep=self.config.save_total_limit, state_dict=weights)
            note.append(f"{checkpoint.size_bytes(path) / 1e6:.0f} MB")
        return path

    def _load_checkpoint(self, path: Path, state: dict) -> None:
        """Continue from a checkpoint ``checkpoint.validate`` has accepted."""
        tensors = self._resume_tensors if self.sharded else checkpoint.load(path, self.model)
        try:
            load_optimizer(self.optimizer, tensors["optimizer"], self.sharded)
            if self.value_head is not None:
                self.value_head.load_state_dict(tensors["value_head"])
            if self.critic_trunk is not None:
                self.critic_trunk.load_state_dict(tensors["critic"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"checkpoint {path}: its optimizer state does not fit this model and algorithm "
                             f"({str(error).splitlines()[0]})") from None
        self.iteration = state["iteration"]
        # Every rank continues its own seed sequence from the call count.
        self.runner.calls = state["calls"]
        self.runner.next_seed = self.runner.config.seed + state["calls"] * len(self.runner.group_envs)
        saved = state["mi_ema"]
        saved = {"first": saved} if "sigma" in saved else saved  # a checkpoint with one EMA only
        for name, ema_state in saved.items():
            if name in self.mi_emas:
                self.mi_emas[name].load_state_dict(ema_state)


def _use_bf16(setting: str, device: torch.device) -> bool:
    if setting != "auto":
        return setting == "bf16"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _pad(x: torch.Tensor, length: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, length - x.shape[0]))


def _masked_mean(values: list[torch.Tensor], masks: list[torch.Tensor]) -> float:
    total = sum(float((v * m).sum()) for v, m in zip(values, masks))
    count = sum(float(m.sum()) for m in masks)
    return total / count if count else 0.0
