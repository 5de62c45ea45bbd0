"""What every RL run needs, whatever the algorithm: the model set up for training, the rollout runner, the
scorer behind every loss (DDP-wrapped or FSDP-sharded over the ranks), the optimizer, the iteration loop with
held-out validation and early stop, and checkpoints; the run's folder, record, metrics log and progress are its
``Run`` (``run.py``, which the SFT warm start uses too). ``Trainer`` (``trainer.py``) is the RL algorithm on
top: it defines ``iteration_step``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from ragen_envs.agent import vision
from ragen_envs.agent.backends.transformers import TransformersPolicy, pick_device
from ragen_envs.agent.async_rollout import make_runner
from ragen_envs.agent.baseline import held_out_config, play_held_out, summarise_held_out
from ragen_envs.agent.default_model import load_processor
from ragen_envs.agent.rollout import NO_MODEL, check_envs
from ragen_envs.agent.trajectory import rollouts_path, save_jsonl
from ragen_envs.registry import env_for
from trainers import checkpoint, lora
from trainers.batch import Sample, collate
from trainers.config import TrainerConfig
from trainers.distributed import (RANK_SEED_STRIDE, all_gather_rows, distribute, full_state, gathered,
                                  init_distributed, load_optimizer)
from trainers.metrics import PROBE_FILE, append_jsonl
from trainers.run import Run, resolve_folder
from trainers.scoring import build_scorers
from trainers.model import model_name, prepare_model, use_bf16


def nothing_to_train(folder, iteration: int, num_iterations: int) -> str:
    return (f"{folder} is at iteration {iteration} and num_iterations is {num_iterations}: nothing to train "
            "(raise --iterations to continue)")


def finished_iteration(cfg: TrainerConfig, model) -> int | None:
    """The iteration of the checkpoint ``cfg`` resumes, where the run has already reached
    ``num_iterations`` (so there is nothing to train, and no model need load); else None."""
    where = cfg.resume_from_checkpoint
    if not where or cfg.probe.only or not cfg.output_dir and where == "latest":
        return None  # nothing to resume, or a probe; the Trainer reports a "latest" without a folder
    found = checkpoint.find(Path(cfg.output_dir or Path(where).parent), where)
    iteration = checkpoint.validate(found, cfg.algorithm, model_name(model))["iteration"]
    return iteration if iteration >= cfg.num_iterations else None


def check_held_out(cfg: TrainerConfig, groups: int, envs: int, world: int) -> None:
    """A ValueError where a validation env seed is also a training one: validation takes ``eval_episodes``
    seeds per env, one after another from ``eval_seed``; each rank's rollouts take the next ``groups``
    seeds an iteration from its own start."""
    val = range(cfg.evaluation.seed, cfg.evaluation.seed + cfg.evaluation.episodes * envs)
    for rank in range(world):
        start = cfg.rollout.seed + rank * RANK_SEED_STRIDE
        trained = range(start, start + groups * cfg.num_iterations)
        if val.start < trained.stop and trained.start < val.stop:
            raise ValueError(f"the validation env seeds {val.start}-{val.stop - 1} (eval_seed, eval_episodes) overlap "
                             f"the training seeds {trained.start}-{trained.stop - 1} ({groups} groups an iteration "
                             f"from rollout seed {cfg.rollout.seed}): held-out episodes must never be trained on; "
                             f"move eval_seed or the rollout seed")


class TrainerBase:
    """Args:
        model: a path or id, a loaded causal LM (then pass ``tokenizer``), or None for the default; a
            vision-language model (a folder with a processor, or a loaded one with its processor as
            ``tokenizer``) trains on visual envs.
        env: an env id, or a dict env id -> number of prompt groups (a mix; overrides rollout.n_groups);
            None: the catalogue's default env.
        config: the hyperparameters.
        callbacks: objects with ``on_iteration_end(trainer, iteration, metrics)``.
        Resuming (``config.resume_from_checkpoint``) takes the same initial ``model``: it is the KL
        reference, and the checkpoint's weights (with LoRA, its adapter) are loaded over it.
        rollout_policy: another backend to generate rollouts (e.g. ``VLLMPolicy``), or a function with
            no arguments that builds it (called after the env, run folder and config are checked, so a
            bad argument is reported before a slow engine loads); it gets the new weights after each
            update through its ``load_weights``. Default: the trained model itself.
    """

    def __init__(self, model=None, env: str | dict[str, int] | None = None,
                 config: TrainerConfig | None = None, tokenizer=None, callbacks=(), device: str | None = None,
                 rollout_policy=None):
        cfg = config or TrainerConfig()
        self.rank, self.world = init_distributed()
        self.model_name = model_name(model)
        # Everything that can be checked without the model is checked before it loads.
        self.device = pick_device(device)
        mix = check_envs(env or env_for("default"), cfg.rollout, NO_MODEL if vision.is_processor(tokenizer) else model)
        if cfg.evaluation.steps:
            check_held_out(cfg, sum(mix.values()), len(mix), self.world)
        resume, resume_state = self._open_run(cfg, mix)
        cfg = self.config
        with self.run.removed_on_error():
            # freeze before the critic copies the model
            self.processor = tokenizer if vision.is_processor(tokenizer) else load_processor(model)
            if self.processor is not None:
                tokenizer = self.processor.tokenizer
            self.model, self.tokenizer = prepare_model(model, tokenizer, self.device, cfg.freeze_layers)
        if cfg.lora.rank:  # in place, before the critic copies the model (its copy gets adapters of its own)
            lora.add_adapters(self.model, cfg)
        self.policy = TransformersPolicy(self.model, self.tokenizer, device=str(self.device), processor=self.processor)
        self.callbacks = list(callbacks)
        if callable(rollout_policy) and not hasattr(rollout_policy, "generate"):
            rollout_policy = rollout_policy()
        self.rollout_policy = rollout_policy or self.policy
        # Each rank rolls out its own groups.
        self.runner = make_runner(mix, self.rollout_policy,
                                  replace(cfg.rollout, seed=cfg.rollout.seed + self.rank * RANK_SEED_STRIDE))
        self.scorer, self.ref_scorer = build_scorers(self.model, cfg, self.device, self.policy.banned)
        self.value_head, self.critic_trunk = self.scorer.value_head, self.scorer.critic_trunk
        self.sharded = self.world > 1 and cfg.data_parallel == "fsdp"
        self._resume_tensors = None
        if self.sharded:
            if self.value_head is not None:
                raise ValueError("data_parallel='fsdp' trains the critic-free algorithms (grpo, dapo, drgrpo); "
                                 "PPO's critic is not sharded: use data_parallel='ddp'")
            if resume is not None:  # full weights go in before the model is cut into shards
                self._resume_tensors = checkpoint.load(resume, self.model)
        eos = self.tokenizer.eos_token_id
        warm = collate([Sample([eos] * 2, [0, 1], 0, 0, 0.0, True)], self.tokenizer.pad_token_id)
        # decided once: every forward pass autocasts by it (the CPU check reads /proc/cpuinfo)
        self.bf16 = use_bf16(cfg.mixed_precision, self.device, self.model)
        self.train_scorer = distribute(self.scorer, self.model, self.world, self.sharded, self.device,
                                       lambda: self._token_outputs(self.scorer, warm),
                                       some_unused=self.processor is not None, cpu_offload=cfg.fsdp_cpu_offload,
                                       bf16=self.bf16)
        self.optimizer = self._optimizer()
        self.iteration = 0
        self.rl = checkpoint.RLState(kl_coef=cfg.kl_reward.coef)
        self.think_ids = list(self.tokenizer("<think>", add_special_tokens=False)["input_ids"])
        if resume is not None:
            self._load_checkpoint(resume, resume_state)
        self.unsaved_rollouts = None  # this iteration's trajectories, when rollouts/ is to keep them
        if not cfg.probe.only:  # a probe alone leaves the run's record and metrics be
            self.run.open_log(keep_iterations=self.iteration, report_to=cfg.report_to)

    def _open_run(self, cfg: TrainerConfig, mix: dict[str, int]):
        """Open the run folder (new, overwritten or resumed) as ``self.run``, with ``self.config`` naming
        it; the checkpoint to resume from and its validated state, or (None, None)."""
        folder = resolve_folder(cfg.output_dir, cfg.resume_from_checkpoint, cfg.algorithm, list(mix), self.world)
        self.config = cfg = replace(cfg, output_dir=str(folder))
        self.run = Run(folder, {"model": self.model_name, "env": mix, **cfg.to_dict()}, self.rank, self.world)
        if not cfg.resume_from_checkpoint:
            self.run.start(cfg.overwrite_output_dir)
            return None, None
        resume = checkpoint.find(folder, cfg.resume_from_checkpoint)
        state = checkpoint.validate(resume, cfg.algorithm, self.model_name)
        # the run's settings change only on purpose, and the change is kept in its record
        self.run.resume(state["iteration"], cfg.allow_config_changes, TrainerConfig.flag)
        return resume, state

    def _optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the trained weights, the critic's (value head and own trunk) at the critic's rate."""
        cfg = self.config
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": cfg.learning_rate}]
        if self.value_head is not None:
            critic = [p for p in [*self.value_head.parameters(),
                                  *(self.critic_trunk.parameters() if self.critic_trunk else [])] if p.requires_grad]
            groups.append({"params": critic, "lr": cfg.critic_lr})
        return torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)

    # The run's parts, by the names callers and tests use.
    @property
    def output_dir(self) -> Path:
        return self.run.folder

    @property
    def record(self) -> dict:
        """The run's record (config.json)."""
        return self.run.record

    @property
    def logger(self):
        """Rank 0's MetricsLogger, else None."""
        return self.run.logger

    @property
    def plot_path(self) -> Path | None:
        return self.run.plot_path

    def write_config(self) -> Path:
        return self.run.write_record()

    # == the loop =================================================================================
    def train(self) -> list[dict]:
        """Train up to ``num_iterations`` in all; write the metrics, the last checkpoint and the plot.
        Returns this call's per-iteration metrics (empty when the run was already complete)."""
        cfg = self.config
        history = []
        saving = cfg.saving.strategy == "steps"
        if cfg.probe.only:  # one probe of the weights as they are, then stop
            # numbered as the iteration it would have begun (an in-run probe's number for the same weights)
            metrics = {**self.iteration_step(), "iteration": self.iteration + 1}
            if self.rank == 0:
                path = self.output_dir / PROBE_FILE
                append_jsonl(path, [metrics])
                print(f"gradient probe of the weights after {self.iteration} iterations added to {path}; nothing "
                      f"trained, the run's metrics and checkpoints left as they were (--gradient-analysis-only)",
                      flush=True)
            return [metrics]
        if self.iteration >= cfg.num_iterations:
            if self.rank == 0:
                print(nothing_to_train(self.output_dir, self.iteration, cfg.num_iterations), flush=True)
            return history
        self.run.start_bar(cfg.num_iterations, "it", "training")
        if cfg.evaluation.steps and self.iteration == 0:  # the start, to compare the run with
            history.append(self._log({"iteration": 0, **self.validate()}, print_row=bool(cfg.logging_steps)))
        self._phase("starting")
        while self.iteration < cfg.num_iterations:
            metrics = self.iteration_step()
            self.iteration += 1
            metrics["iteration"] = self.iteration
            # The streak comes from the global filter, so every rank stops at the same iteration.
            stop = bool(cfg.filter_empty_stop) and self.rl.empty_filter_streak >= cfg.filter_empty_stop
            every = cfg.evaluation.steps
            if every and (self.iteration % every == 0 or self.iteration == cfg.num_iterations or stop):
                metrics.update(self.validate())
            history.append(metrics)
            for callback in self.callbacks:
                callback.on_iteration_end(self, self.iteration, metrics)
            self._log(metrics, print_row=bool(cfg.logging_steps) and self.iteration % cfg.logging_steps == 0)
            if self.unsaved_rollouts is not None:  # only now: an interrupted iteration leaves no file
                save_jsonl(self.unsaved_rollouts, rollouts_path(self.output_dir, self.iteration))
                self.unsaved_rollouts = None
            self._phase("done" if self.iteration == cfg.num_iterations else "next")
            if saving and cfg.saving.steps and self.iteration % cfg.saving.steps == 0:
                self.save_checkpoint()  # on every rank: a sharded model is gathered first; rank 0 writes
            if stop:
                if self.logger is not None:
                    print(f"stopping early: the filter kept nothing for {self.rl.empty_filter_streak} iterations in a "
                          f"row (filter_empty_stop={cfg.filter_empty_stop}; RAGEN's rollout_filter_empty_stop_steps)",
                          flush=True)
                break
        if saving and (not cfg.saving.steps or self.iteration % cfg.saving.steps):
            self.save_checkpoint()
        self.run.close(plot=cfg.plot)
        return history

    def _log(self, metrics: dict, print_row: bool = True) -> dict:
        return self.run.log(metrics, print_row)

    def validate(self, temperature: float | None = None) -> dict:
        """The held-out episodes: ``eval_episodes`` per env of the run (env seeds from ``eval_seed``, one after
        another over the envs), never trained on, played by the rollout policy at ``eval_temperature`` (or
        ``temperature``; the run's sampling seeds, so every validation draws alike), with random valid actions
        on the same episodes beside them. The ranks share the episodes out and every rank returns the
        metrics of all of them."""
        cfg = self.config
        start = time.perf_counter()
        self._phase("validation", episodes=cfg.evaluation.episodes * len(self.runner.mix))
        config = held_out_config(cfg.rollout, cfg.evaluation.episodes, cfg.evaluation.seed,
                                 cfg.evaluation.temperature if temperature is None else temperature)
        self.model.eval()
        with gathered(self.scorer, self.sharded):  # the ranks play different numbers of forwards
            rows = play_held_out(self.rollout_policy, {env_id: cfg.evaluation.episodes for env_id in self.runner.mix},
                                 config, cfg.evaluation.seed, part=(self.rank, self.world))
        played = summarise_held_out(all_gather_rows(rows, self.world))
        return {**{f"val/{k}": v for k, v in played.items()}, "time/eval_s": time.perf_counter() - start}

    def _phase(self, phase: str, **more) -> None:
        self.run.show(self.iteration, phase=phase, **more)

    def _progress(self, phase: str, done: int, total: int) -> None:
        self.run.progress(self.iteration, phase, done, total)

    def iteration_step(self) -> dict:
        """One iteration; its metrics. The algorithm's part."""
        raise NotImplementedError

    @staticmethod
    def _timed(metrics: dict, name: str, fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        metrics[f"time/{name}_s"] = time.perf_counter() - start
        return out

    # == forward passes ===========================================================================
    def _autocast(self):
        if self.bf16:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _token_outputs(self, scorer, batch):
        ids, attn = batch.ids.to(self.device), batch.attention.to(self.device)
        pixels = vision.pixel_inputs(self.processor, batch.images, self.device) if batch.images else {}
        with self._autocast():
            return scorer(ids, attn, batch.mask.to(self.device).bool(), batch.targets.to(self.device), **pixels)

    # == checkpoints ==============================================================================
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
        meta = {"iteration": self.iteration, **self.runner.state_dict(), **self.rl.state_dict(),
                "model": self.model_name, "config": self.config.to_dict()}
        written = []

        def write(folder: Path) -> None:
            # a vision-language model's processor: its checkpoint loads as one again
            written.append(checkpoint.save(folder, self.iteration, self.model, self.processor or self.tokenizer,
                                           tensors, meta, keep=self.config.saving.total_limit, state_dict=weights))

        # a full disk loses no weights
        self.run.save(write, f"checkpoint-{self.iteration}", f"writing checkpoint-{self.iteration}",
                      note=lambda: f"{checkpoint.size_bytes(written[-1]) / 1e6:.0f} MB")
        return written[-1]

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
        self.runner.load_state_dict(state)  # every rank continues its own seed sequence
        self.rl.load_state_dict(state, adaptive_kl=self.config.kl_reward.ctrl == "adaptive")
