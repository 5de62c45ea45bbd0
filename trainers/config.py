"""Trainer hyperparameters. Field names follow TRL's GRPOConfig where TRL has one."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from ragen_envs.agent.rollout import RolloutConfig
from trainers import filtering
from trainers.filtering import METRICS, ORDERS, PROB_MODES, STRATEGIES

# The option sets live here, not beside their torch code, so the CLI builds its parser without torch.
ALGORITHMS = ("ppo", "grpo", "dapo", "drgrpo")
LOSS_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo")  # loss aggregations of trainers.algorithms.aggregate
SCALES = ("group", "batch", "none")
PRECISIONS = ("auto", "bf16", "no")

# Per algorithm: the defaults of the fields left as None.
ALGORITHM_DEFAULTS = {
    "ppo": {"loss_type": "dapo", "scale_rewards": "none", "epsilon_high": None, "beta": 0.001},
    "grpo": {"loss_type": "grpo", "scale_rewards": "group", "epsilon_high": None, "beta": 0.001},
    "dapo": {"loss_type": "dapo", "scale_rewards": "group", "epsilon_high": 0.28, "beta": 0.0},
    "drgrpo": {"loss_type": "dr_grpo", "scale_rewards": "none", "epsilon_high": None, "beta": 0.001},
}


@dataclass
class TrainerConfig:
    # -- what to train -----------------------------------------------------------------------
    algorithm: Literal[ALGORITHMS] = "grpo"  # ppo | grpo | dapo | drgrpo
    # rollout -> filter -> update cycles in all, resumed ones included (TRL's max_steps)
    num_iterations: int = field(default=10, metadata={"flag": "iterations"})
    # the run folder (metrics, resolved config, checkpoints, plot); None: a new runs/<date>-<time>-<algo>-<env>
    output_dir: str | None = None
    # replace a run already in output_dir (its metrics, config, checkpoints); without it such a folder is refused
    overwrite_output_dir: bool = field(default=False, metadata={"flag": "overwrite"})

    # -- rollouts (RAGEN-2 runs: P = 8 prompts x G = 16 samples); its seed seeds the whole run ---
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    # -- optimisation ------------------------------------------------------------------------
    learning_rate: float = 1e-6  # policy learning rate (AdamW)
    critic_learning_rate: float = 1e-5  # PPO value head learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping
    ppo_epochs: int = 1  # passes over each batch (TRL's num_iterations, mu)
    # sequences per optimizer step (RAGEN's ppo_mini_batch_size): the kept batch is padded to a multiple of
    # it and split, so keeping fewer groups means fewer steps, as in the reference; None: num_minibatches
    # steps per epoch whatever is kept
    mini_batch_size: int | None = 32
    # how a kept batch that is no multiple of mini_batch_size is fixed: copy random kept sequences (RAGEN's
    # default) or delete some
    batch_adjust: Literal["copy", "delete"] = "copy"
    num_minibatches: int = 1  # optimizer steps per epoch when mini_batch_size is None
    micro_batch_size: int = 2  # sequences per forward/backward (gradient accumulation)
    # "bf16": fp32 master weights with bf16 autocast; "no": fp32 throughout; "auto": bf16 on GPUs and on
    # CPUs with native bf16 (avx512_bf16 / amx), else fp32 (benchmarks/precision.py: without native bf16
    # a forward+backward ran 27x slower under bf16 autocast here)
    mixed_precision: Literal[PRECISIONS] = "auto"

    # -- the objective -----------------------------------------------------------------------
    epsilon: float = 0.2  # lower clip of the ratio (and upper, unless epsilon_high)
    epsilon_high: float | None = None  # upper clip; None: algorithm default (DAPO 0.28, else epsilon)
    beta: float | None = None  # KL(pi || ref) coefficient, k3 estimator; None: 0.001, DAPO 0
    entropy_coef: float = 0.0  # entropy bonus coefficient
    loss_type: Literal[LOSS_TYPES] | None = None  # grpo | dapo | bnpo | dr_grpo; None: algorithm default
    scale_rewards: Literal[SCALES] | None = None  # group | batch | none; None: algorithm default
    gamma: float = 1.0  # PPO discount (RAGEN uses 1)
    lam: float = 1.0  # PPO GAE lambda (RAGEN uses 1)
    vf_coef: float = 0.5  # PPO value loss weight
    cliprange_value: float = 0.2  # PPO value clipping

    # -- SNR-aware filtering (trainers/filtering.py: RAGEN's released selection rules) --------
    filter: Literal[STRATEGIES] = "none"  # none | top_p | top_k | top_k_abs | min_p
    # rho: share of the summed score (top_p; >= 1 keeps all), of the groups (top_k), a count (top_k_abs)
    filter_value: float = 0.9
    # group score: std of returns (RAGEN's code) | variance (the paper's text) | mean | sum | entropy |
    # entropy_std | length
    filter_metric: Literal[METRICS] = "std"
    filter_prob_mode: Literal[PROB_MODES] = "linear"  # top_p over the scores themselves, or their softmax
    filter_order: Literal[ORDERS] = "largest"  # keep the highest scores, or the lowest (an ablation)
    include_zero: bool = True  # False: drop zero-score groups before ranking
    # stop the run after this many iterations in a row in which the filter keeps nothing (0: never)
    filter_empty_stop: int = 5

    # -- diagnostics, logging, checkpoints ---------------------------------------------------
    mi_every: int = 5  # MI proxies at the first iteration and every this many (RAGEN's compute_freq; 0: never)
    mi_first_turn_pairs: int = 64  # first-turn (X, Z) pairs drawn for the MI proxies (RAGEN's num_samples; 0: all)
    mi_trajectory_pairs: int = 64  # trajectory-scope draws with replacement (RAGEN's num_samples; 0: off)
    logging_steps: int = 1  # print the metrics table every this many iterations
    save_steps: int = 0  # checkpoint every this many iterations (0: only at the end)
    # keep only the newest N checkpoints (None: all); a 135M-parameter checkpoint takes 1.6 GB
    save_total_limit: int | None = None
    # write the iteration's trajectories to rollouts/iteration-<n>.jsonl every this many iterations and
    # at the last (0: never); `ragen view RUN_DIR` shows them
    save_rollouts_steps: int = 5
    # a checkpoint folder (its parent becomes output_dir when that is None), or "latest" in output_dir
    resume_from_checkpoint: str | None = field(default=None, metadata={"flag": "resume"})

    def __post_init__(self):
        def check(name, ok, what):
            if not ok:
                raise ValueError(f"{name} must be {what}, got {getattr(self, name)!r}")

        check("algorithm", self.algorithm in ALGORITHMS, f"one of {ALGORITHMS}")
        check("filter_metric", self.filter_metric in METRICS, f"one of {METRICS}")
        filtering.check(self.filter, self.filter_value, self.filter_prob_mode, self.filter_order)
        if self.rollout.group_size < 2:
            raise ValueError(f"rollout.group_size must be >= 2 (group statistics need two samples), "
                             f"got {self.rollout.group_size}")
        for name in ("num_iterations", "ppo_epochs", "num_minibatches", "micro_batch_size"):
            check(name, getattr(self, name) >= 1, ">= 1")
        for name in ("mi_every", "mi_first_turn_pairs", "mi_trajectory_pairs", "logging_steps", "save_steps",
                     "save_rollouts_steps", "filter_empty_stop"):
            check(name, getattr(self, name) >= 0, ">= 0")
        check("save_total_limit", self.save_total_limit is None or self.save_total_limit >= 1, ">= 1 or None")
        for name in ("critic_learning_rate", "max_grad_norm", "epsilon"):
            check(name, getattr(self, name) > 0, "> 0")
        for name in ("weight_decay", "entropy_coef", "vf_coef", "cliprange_value"):
            check(name, getattr(self, name) >= 0, ">= 0")
        check("epsilon_high", self.epsilon_high is None or self.epsilon_high > 0, "> 0 or None")
        check("beta", self.beta is None or self.beta >= 0, ">= 0 or None")
        check("gamma", 0 <= self.gamma <= 1, "in [0, 1]")
        check("lam", 0 <= self.lam <= 1, "in [0, 1]")
        if self.overwrite_output_dir and self.resume_from_checkpoint:
            raise ValueError("overwrite_output_dir and resume_from_checkpoint exclude each other: "
                             "overwriting would delete the checkpoint to resume from")
        check("mixed_precision", self.mixed_precision in PRECISIONS, f"one of {PRECISIONS}")
        check("mini_batch_size", self.mini_batch_size is None or self.mini_batch_size >= 1, ">= 1 or None")
        check("batch_adjust", self.batch_adjust in ("copy", "delete"), "copy or delete")
        check("learning_rate", self.learning_rate > 0, "> 0")
        check("loss_type", self.loss_type is None or self.loss_type in LOSS_TYPES, f"one of {LOSS_TYPES}")
        check("scale_rewards", self.scale_rewards is None or self.scale_rewards in SCALES, f"one of {SCALES}")
        defaults = ALGORITHM_DEFAULTS[self.algorithm]
        if self.loss_type is None:
            self.loss_type = defaults["loss_type"]
        if self.scale_rewards is None:
            self.scale_rewards = defaults["scale_rewards"]
        if self.epsilon_high is None:
            self.epsilon_high = defaults["epsilon_high"] or self.epsilon
        if self.beta is None:
            self.beta = defaults["beta"]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainerConfig":
        """The inverse of ``to_dict`` (nested dicts become the nested configs)."""
        from ragen_envs.agent import ChatEnvConfig, SamplingConfig

        data = dict(data)
        rollout = dict(data.pop("rollout", {}))
        rollout["chat"] = ChatEnvConfig(**rollout.get("chat", {}))
        rollout["sampling"] = SamplingConfig(**rollout.get("sampling", {}))
        return cls(**data, rollout=RolloutConfig(**rollout))
