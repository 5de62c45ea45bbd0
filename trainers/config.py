"""Trainer hyperparameters. Field names follow TRL's GRPOConfig where TRL has one."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trainers.algorithms import LOSS_TYPES
from trainers.filtering import METRICS, STRATEGIES

ALGORITHMS = ("ppo", "grpo", "dapo", "drgrpo")

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
    algorithm: str = "grpo"  # ppo | grpo | dapo | drgrpo
    num_iterations: int = 10  # rollout -> advantages -> filter -> update cycles (TRL calls this max_steps)
    output_dir: str = "runs/ragen"  # metrics, checkpoints and plot go here
    seed: int = 0  # env seeds, sampling and minibatch shuffling derive from it

    # -- rollouts (RAGEN-2 runs: P = 8 prompts x G = 16 samples) ------------------------------
    num_prompts: int = 8  # P: prompt groups per iteration
    num_generations: int = 4  # G: rollouts per prompt group (group size)
    max_turns: int = 5  # model replies per episode
    max_actions_per_turn: int = 2  # actions one reply may hold
    max_completion_length: int = 128  # new tokens per turn
    temperature: float = 1.0  # sampling temperature; the losses use the same temperature
    top_p: float = 1.0  # nucleus sampling
    enable_think: bool = True  # ask for <think>...</think> before <answer>
    format_penalty: float = -0.1  # reward of a reply without a valid action
    env_kwargs: dict = field(default_factory=dict)  # env id -> keyword arguments

    # -- optimisation ------------------------------------------------------------------------
    learning_rate: float = 1e-6  # policy learning rate (AdamW)
    critic_learning_rate: float = 1e-5  # PPO value head learning rate
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # gradient clipping
    ppo_epochs: int = 1  # passes over each batch (TRL's num_iterations, mu)
    num_minibatches: int = 1  # optimizer steps per epoch
    micro_batch_size: int = 2  # sequences per forward/backward (gradient accumulation)
    # "bf16": fp32 master weights with bf16 autocast; "no": fp32 throughout; "auto": bf16 on GPUs and on
    # CPUs with native bf16 (avx512_bf16 / amx), else fp32 (benchmarks/precision.py: without native bf16
    # a forward+backward ran 27x slower under bf16 autocast here)
    mixed_precision: str = "auto"

    # -- the objective -----------------------------------------------------------------------
    epsilon: float = 0.2  # lower clip of the ratio (and upper, unless epsilon_high)
    epsilon_high: float | None = None  # upper clip; None: algorithm default (DAPO 0.28, else epsilon)
    beta: float | None = None  # KL(pi || ref) coefficient, k3 estimator; None: 0.001, DAPO 0
    entropy_coef: float = 0.0  # entropy bonus coefficient
    loss_type: str | None = None  # grpo | dapo | bnpo | dr_grpo; None: algorithm default
    scale_rewards: str | None = None  # group | batch | none; None: algorithm default
    gamma: float = 1.0  # PPO discount (RAGEN uses 1)
    lam: float = 1.0  # PPO GAE lambda (RAGEN uses 1)
    vf_coef: float = 0.5  # PPO value loss weight
    cliprange_value: float = 0.2  # PPO value clipping

    # -- SNR-aware filtering -----------------------------------------------------------------
    filter: str = "none"  # none | top_p | top_k
    filter_value: float = 0.9  # rho: share of reward variance (top_p) or of groups (top_k)
    filter_metric: str = "variance"  # variance (the paper) | std (RAGEN's released code)
    include_zero: bool = True  # False: drop zero-variance groups before ranking

    # -- diagnostics, logging, checkpoints ---------------------------------------------------
    mi_every: int = 1  # MI proxies every this many iterations (0: never)
    mi_trajectory_pairs: int = 16  # (X, Z) pairs of the trajectory-scope MI (0: off)
    logging_steps: int = 1  # print the metrics table every this many iterations
    save_steps: int = 0  # checkpoint every this many iterations (0: only at the end)
    resume_from_checkpoint: str | None = None  # a checkpoint folder, or "latest" in output_dir

    def __post_init__(self):
        def check(name, ok, what):
            if not ok:
                raise ValueError(f"{name} must be {what}, got {getattr(self, name)!r}")

        check("algorithm", self.algorithm in ALGORITHMS, f"one of {ALGORITHMS}")
        check("filter", self.filter in STRATEGIES, f"one of {STRATEGIES}")
        check("filter_metric", self.filter_metric in METRICS, f"one of {METRICS}")
        check("filter_value", 0 < self.filter_value <= 1, "in (0, 1]")
        check("num_generations", self.num_generations >= 2, ">= 2 (group statistics need two samples)")
        for name in ("num_iterations", "num_prompts", "max_turns", "max_completion_length", "ppo_epochs",
                     "num_minibatches", "micro_batch_size"):
            check(name, getattr(self, name) >= 1, ">= 1")
        check("mixed_precision", self.mixed_precision in ("auto", "bf16", "no"), "'auto', 'bf16' or 'no'")
        check("learning_rate", self.learning_rate > 0, "> 0")
        check("loss_type", self.loss_type is None or self.loss_type in LOSS_TYPES, f"one of {LOSS_TYPES}")
        check("scale_rewards", self.scale_rewards in (None, "group", "batch", "none"), "group, batch or none")
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
