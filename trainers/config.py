"""Trainer hyperparameters. Field names follow TRL's GRPOConfig where TRL has one."""

from __future__ import annotations

import functools
import importlib.util
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from ragen_envs.agent.chat_env import ChatEnvConfig
from ragen_envs.agent.rollout import RolloutConfig
from ragen_envs.base import bounded, check_bounds, check_choices, check_positive_int, declared
from ragen_envs.diagnose.filtering import FilterConfig
from ragen_envs.extras import install_hint, installed
from trainers.env_settings import ORGANISM_SFT_PARTS, PRESET_PARTS

# What a setting is to a run, declared on its field (``role`` metadata; LEARNS when not declared): LEARNS, it
# changes the path the weights take; MEASURES, it changes how far a run goes or what it measures, not what
# it learns (a resume may change it; a study compares it); PLACE, where and how a run writes (neither). A
# field that learns only under other settings declares ``learns_if``, a test on the run's record.
LEARNS, MEASURES, PLACE = "learns", "measures", "place"


def setting(default, role: str = LEARNS, **metadata):
    """A dataclass field with its role (and other metadata such as ``flag`` or ``help``) declared beside it."""
    return field(default=default, metadata={**metadata, "role": role})


# Settings that travel together are one object nested in TrainerConfig, a group (``cfg.filtering``, a
# FilterConfig). Each of a group's fields keeps the flat name it had before the group was nested
# (``metadata["flat"]``, else its own name): TrainerConfig takes it as a keyword argument and has it as an
# attribute (``TrainerConfig(filter_value=0.5).filter_value``), a run's record (``to_dict``: config.json, a
# study cell's config) keeps it flat under that name, so old records load and compare as they did, and it
# names the flag (``--filter-value``). The rollout is nested too, but not a group: its record nests.


def group(cls, **metadata):
    """A TrainerConfig field holding the group ``cls`` (a dataclass of settings that travel together), with
    other metadata (its ``help``) declared beside it."""
    return field(default_factory=cls, metadata={**metadata, "group": True})


def flat_name(f) -> str:
    """The name a group's field ``f`` goes by outside the group (in TrainerConfig and its record)."""
    return f.metadata.get("flat", f.name)


def _flat_names(cls):
    """Over @dataclass: ``cls`` takes its groups' settings by their flat names as keyword arguments (over the
    group given, if one is) and has them as attributes (set: the group replaced, checked again); a group
    given as a dict becomes its dataclass."""
    hints = typing.get_type_hints(cls)
    groups = [g.name for g in fields(cls) if g.metadata.get("group")]
    cls.FLAT_NAMES = {flat_name(f): (name, f.name) for name in groups for f in fields(hints[name])}
    named = [flat_name(f) for name in groups for f in fields(hints[name])] + [f.name for f in fields(cls)]
    if len(set(named)) < len(named):
        raise TypeError(f"{cls.__name__}: flat names taken twice: {sorted({n for n in named if named.count(n) > 1})}")
    generated = cls.__init__

    @functools.wraps(generated)
    def __init__(self, *args, **kwargs):
        for name in groups:
            if isinstance(kwargs.get(name), dict):
                kwargs[name] = hints[name](**kwargs[name])
        given: dict[str, dict] = {}
        for key in [k for k in kwargs if k in cls.FLAT_NAMES]:
            name, inner = cls.FLAT_NAMES[key]
            given.setdefault(name, {})[inner] = kwargs.pop(key)
        for name, values in given.items():
            kwargs[name] = replace(kwargs[name], **values) if kwargs.get(name) is not None else hints[name](**values)
        generated(self, *args, **kwargs)

    def alias(name: str, inner: str) -> property:
        def get(self):
            return getattr(getattr(self, name), inner)

        def put(self, value):
            setattr(self, name, replace(getattr(self, name), **{inner: value}))

        return property(get, put, doc=f"``{name}.{inner}``, by its flat name")

    cls.__init__ = __init__
    for flat, (name, inner) in cls.FLAT_NAMES.items():
        setattr(cls, flat, alias(name, inner))
    return cls


CRITIC_LR_RATIO = 10.0  # RAGEN's critic learning rate over the actor's (config/base.yaml: 1e-5 and 1e-6)
# The option sets live here, not beside their torch code, so the CLI builds its parser without torch.
ALGORITHMS = ("ppo", "grpo", "dapo", "drgrpo")
LOSS_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo", "seq_sum")  # loss aggregations of trainers.algorithms.aggregate
ADVANTAGES = ("gae", "group")
CRITICS = ("separate", "shared")
SCALES = ("group", "batch", "none")
PRECISIONS = ("auto", "bf16", "no")
BUCKET_MODES = ("quantile", "fixed_rv")  # the gradient probe's bucketing (trainers/gradient_probe.py)
NORM_GROUPINGS = ("state", "batch", "inductive")  # reward normalization (trainers/rewards.py)
NORM_METHODS = ("identity", "mean", "mean_std", "asym_clip")
LOSS_SCALINGS = ("none", "linear", "sqrt")
KL_TYPES = ("low_var_kl", "kl", "abs", "mse")  # trainers.algorithms.kl_estimate (verl's kl_penalty)
PROBE_TERMS = ("task", "entropy", "kl")  # the loss terms it backpropagates alone, then their "total"

# Per algorithm: the defaults of the fields left as None, from RAGEN's main-table runs
# (scripts/runs/run_main_table_diff_algo.sh over config/base.yaml):
#
# | ours   | RAGEN's run | advantage           | loss aggregation (verl)       | clip high | KL  |
# |--------|-------------|---------------------|-------------------------------|-----------|-----|
# | ppo    | PPO         | GAE with a critic   | token-mean ("dapo")           | 0.28      | off |
# | dapo   | DAPO        | GAE with a critic   | token-mean ("dapo")           | 0.28      | off |
# | grpo   | GRPO        | group, / group std  | seq-mean-token-mean ("grpo")  | 0.28      | off |
# | drgrpo | DrGRPO      | group, no std       | seq-mean-token-sum ("seq_sum")| 0.28      | off |
#
# All: clip low 0.2, dual clip 3, entropy bonus 0.001, learning rate 1e-6 (critic 1e-5), gamma = lambda = 1.
ALGORITHM_DEFAULTS = {
    "ppo": {"advantage": "gae", "loss_type": "dapo", "scale_rewards": "none"},
    "dapo": {"advantage": "gae", "loss_type": "dapo", "scale_rewards": "none"},
    "grpo": {"advantage": "group", "loss_type": "grpo", "scale_rewards": "group"},
    "drgrpo": {"advantage": "group", "loss_type": "seq_sum", "scale_rewards": "none"},
}


@dataclass(frozen=True)
class EvalConfig:
    """Validation's settings (RAGEN's ``trainer.test_freq``, ``val_before_train``): held-out episodes, never trained
    on. ``TrainerConfig.evaluation``; flat names ``eval_steps``, ``eval_episodes``, ``eval_seed``,
    ``eval_temperature``."""
    steps: int = bounded(0, min=0, role=MEASURES, flat="eval_steps",
                         help="play them before the first iteration, every this many and at the last (0: never)")
    episodes: int = bounded(512, min=1, role=MEASURES, flat="eval_episodes",
                            help="one episode per env seed (RAGEN's es_manager.val: 512 groups of one)")
    seed: int = setting(123, MEASURES, flat="eval_seed", help="their env seeds start here (RAGEN's seed.val)")
    temperature: float = bounded(0.5, min=0, role=MEASURES, flat="eval_temperature",
                                 help="their sampling temperature (RAGEN's rollout.val_kwargs)")

    def __post_init__(self):
        check_bounds(self, flat_name)


@dataclass(frozen=True)
class GradientProbeConfig:
    """The gradient probe's settings (``trainers/gradient_probe.py``; RAGEN's ``gradient_analysis_*``): each loss
    term's gradient norm by reward-variance bucket, measured without a step, so none changes what a run learns.
    ``TrainerConfig.probe``; flat names ``gradient_analysis_every``, ..., ``exit_after_gradient_analysis``."""
    every: int = bounded(0, min=0, role=MEASURES, flat="gradient_analysis_every", help="probe the kept batch before "
                         "the update at the first iteration and every this many after (1, 1 + N, ...; RAGEN's "
                         "gradient_analysis_every, on there every 50; 0: never); no step, no change to the run")
    num_buckets: int = bounded(6, min=1, role=MEASURES, flat="gradient_analysis_num_buckets",
                               help="quantile buckets of kept groups by reward std")
    bucket_mode: Literal[BUCKET_MODES] = setting("quantile", MEASURES, flat="gradient_analysis_bucket_mode",
                                                 help="quantile: equal numbers of groups sorted by reward std | "
                                                 "fixed_rv: RAGEN's std intervals [0,1), ..., [5,inf)")
    env_groups: int | None = bounded(None, min=1, role=MEASURES, flat="gradient_analysis_env_groups",
                                     help="groups of a separate batch rolled out for the probe only, never trained "
                                     "on (None: the training batch)")
    group_size: int | None = bounded(None, min=2, why="a reward std needs two samples", role=MEASURES,
                                     flat="gradient_analysis_group_size", help="that batch's group size (None: the "
                                     "run's; with env_groups None too, the probe uses the training batch)")
    filter: bool = setting(True, MEASURES, flat="gradient_analysis_filter", help="that batch filtered as the run "
                           "filters (RAGEN's probe); False: every group of it, zero-variance ones included, so the "
                           "buckets span the low-variance groups the paper contrasts (needs that batch)")
    only: bool = setting(False, MEASURES, flat="exit_after_gradient_analysis", flag="gradient_analysis_only",
                         help="probe this call's first iteration, write its metrics and stop: no update, no "
                         "checkpoint (RAGEN's exit_after_gradient_analysis; with --resume it probes a checkpoint)")

    def __post_init__(self):
        check_choices(self, flat_name)
        check_bounds(self, flat_name)
        if not self.filter and self.env_groups is None and self.group_size is None:
            raise ValueError("gradient_analysis_filter=False probes a batch of the probe's own whole: it needs "
                             "gradient_analysis_env_groups or gradient_analysis_group_size (the training batch "
                             "trains on what the filter kept)")


@dataclass(frozen=True)
class SaveConfig:
    """What a run saves and how often: its checkpoints (TRL's ``save_*``) and the episodes it played. Where it
    writes, not what it learns. ``TrainerConfig.saving``; flat names ``save_strategy``, ``save_steps``,
    ``save_total_limit``, ``save_rollouts_steps``."""
    strategy: Literal["steps", "no"] = setting("steps", PLACE, flat="save_strategy", help="\"steps\": a checkpoint "
                                               "every save_steps iterations and at the end; \"no\": none (sweeps "
                                               "that keep only metrics)")
    steps: int = bounded(0, min=0, role=PLACE, flat="save_steps",
                         help="checkpoint every this many iterations (0: only at the end)")
    total_limit: int | None = bounded(None, min=1, role=PLACE, flat="save_total_limit", help="keep only the newest "
                                      "N checkpoints (None: all); a 135M-parameter checkpoint takes 1.6 GB")
    rollouts_steps: int = bounded(5, min=0, role=PLACE, flat="save_rollouts_steps", help="write the iteration's "
                                  "trajectories to rollouts/iteration-<n>.jsonl every this many iterations and at the "
                                  "last (0: never); `ragen view RUN_DIR` shows them")

    def __post_init__(self):
        check_choices(self, flat_name)
        check_bounds(self, flat_name)


@dataclass(frozen=True)
class LoRAConfig:
    """LoRA's settings (RAGEN's ``lora.*``): low-rank adapters trained instead of the weights (``trainers/lora.py``
    makes peft's own LoraConfig of them). ``TrainerConfig.lora``; flat names ``lora_rank``, ``lora_alpha``,
    ``lora_target_modules``."""
    rank: int = bounded(0, min=0, flat="lora_rank", help="the adapters' rank, 0: off (RAGEN's lora.rank); > 0 trains "
                        "only them (peft, trainers/lora.py), the KL reference is the model with them off, and a "
                        "checkpoint keeps the adapter beside the merged model")
    alpha: int = bounded(64, above=0, flat="lora_alpha",
                         help="the adapters' scale is alpha / rank (RAGEN's lora.alpha)")
    target_modules: str = setting("all-linear", flat="lora_target_modules", help="comma-separated module names, or "
                                  "\"all-linear\": every linear layer but the LM head (peft's meaning; RAGEN's "
                                  "lora.target_modules)")

    def __post_init__(self):
        check_bounds(self, flat_name)
        if not self.target_modules.strip(" ,"):
            raise ValueError(f"lora_target_modules must be module names or 'all-linear', got {self.target_modules!r}")
        if self.rank and not installed("peft"):  # said before any model loads
            raise ImportError(f"lora_rank > 0 (--lora-rank) needs peft, which is not installed: {install_hint('lora')}")


def _penalised(run: dict) -> bool:
    return bool(run["use_kl_in_reward"]) and run["kl_ctrl_coef"] > 0


@dataclass(frozen=True)
class KLRewardConfig:
    """The KL penalty in the reward (verl's ``algorithm.use_kl_in_reward``, ``kl_penalty`` and ``kl_ctrl``, which
    RAGEN's base.yaml keeps, off with coefficient 0): each generated token's reward less coef x its KL estimate
    to the initial model, before the advantages (GAE sees it token by token; group advantages take the
    trajectory's sum off its return). The filter ranks the env's returns, without it. Beside the KL loss
    (``beta``), not in its place. ``TrainerConfig.kl_reward``; flat names ``use_kl_in_reward``, ``kl_penalty``,
    ``kl_ctrl_type``, ``kl_ctrl_coef``, ``kl_ctrl_target``, ``kl_ctrl_horizon``."""
    on: bool = setting(False, flat="use_kl_in_reward", help="take the KL penalty off the rewards (verl's "
                       "algorithm.use_kl_in_reward; RAGEN's runs: off, and RAGEN's own call to verl's "
                       "apply_kl_penalty passes an argument verl 0.6.1 does not take)")
    penalty: Literal[KL_TYPES] = setting("kl", flat="kl_penalty", learns_if=_penalised,
                                         help="the per-token estimate (verl's algorithm.kl_penalty): kl (k1), abs, "
                                         "mse (k2), low_var_kl (k3)")
    ctrl: Literal["fixed", "adaptive"] = setting("fixed", flat="kl_ctrl_type", learns_if=_penalised,
                                                 help="fixed: the coefficient stays; adaptive: verl's "
                                                 "AdaptiveKLController moves it towards kl_ctrl_target")
    coef: float = bounded(0.0, min=0, flat="kl_ctrl_coef", help="the coefficient, or the adaptive one's start "
                          "(verl's algorithm.kl_ctrl.kl_coef; RAGEN's base.yaml 0, its filtering run 0.001 with "
                          "the penalty off)")
    target: float = bounded(0.1, above=0, flat="kl_ctrl_target", learns_if=_penalised,
                            help="adaptive: the KL per token it steers to (verl's target_kl)")
    horizon: int = bounded(10000, min=1, flat="kl_ctrl_horizon", learns_if=_penalised,
                           help="adaptive: sequences over which the coefficient moves by up to 20% (verl's horizon)")

    def __post_init__(self):
        check_choices(self, flat_name)
        check_bounds(self, flat_name)


@_flat_names
@dataclass
class TrainerConfig:
    # -- run: algorithm, length, folder ------------------------------------------------------
    algorithm: Literal[ALGORITHMS] = setting("grpo", help="ppo | grpo | dapo | drgrpo")
    num_iterations: int = bounded(10, min=1, flag="iterations", role=MEASURES, help="rollout -> filter -> update "
                                  "cycles in all, resumed ones included (TRL's max_steps)")
    output_dir: str | None = setting(None, PLACE, help="the run folder (metrics, resolved config, checkpoints, "
                                     "plot); None: a new runs/<date>-<time>-<algo>-<env>")
    overwrite_output_dir: bool = setting(False, PLACE, flag="overwrite", help="replace a run already in output_dir "
                                         "(its metrics, config, checkpoints); without it such a folder is refused")

    # -- rollout: P prompt groups x G samples (RAGEN-2: 8 x 16); its seed seeds the whole run ---
    rollout: RolloutConfig = declared(factory=RolloutConfig, help="P prompt groups x G samples: their envs' turns "
                                      "and sampling (RolloutConfig); its seed seeds the whole run")

    # -- optimisation ------------------------------------------------------------------------
    learning_rate: float = bounded(1e-6, above=0, help="policy learning rate (AdamW)")
    critic_learning_rate: float | None = bounded(None, above=0, learns_if=lambda run: run["advantage"] == "gae",
                                                 help="critic learning rate (value head, and its trunk when "
                                                 "separate); None: CRITIC_LR_RATIO x learning_rate, RAGEN's ratio "
                                                 "(critic 1e-5 over actor 1e-6), so a preset or flag that raises the "
                                                 "actor's rate raises it too")
    weight_decay: float = bounded(0.0, min=0, help="AdamW weight decay")
    max_grad_norm: float = bounded(1.0, above=0, help="gradient clipping")
    freeze_layers: int = bounded(0, min=0, help="train only the top: the embeddings and this many bottom decoder "
                                 "layers stay frozen (0: train all). A CPU option: backward and optimizer state shrink "
                                 "with the trained share (trainers/freeze.py)")
    ppo_epochs: int = bounded(1, min=1, help="passes over each batch (TRL's num_iterations, mu)")
    mini_batch_size: int | None = bounded(32, min=1, help="sequences per optimizer step (RAGEN's ppo_mini_batch_size): "
                                          "the kept batch is padded to a multiple of it and split, so keeping fewer "
                                          "groups means fewer steps, as in the reference; None: num_minibatches steps "
                                          "per epoch whatever is kept")
    batch_adjust: Literal["copy", "delete"] = setting("copy", help="how a kept batch that is no multiple of "
                                                      "mini_batch_size is fixed: copy random kept sequences (RAGEN's "
                                                      "default) or delete some")
    num_minibatches: int = bounded(1, min=1, help="optimizer steps per epoch when mini_batch_size is None")
    micro_batch_size: int = bounded(2, min=1, help="sequences per forward/backward (gradient accumulation)")

    # -- LoRA: train low-rank adapters instead of the weights (RAGEN's lora.*; rank 0: off) ------
    lora: LoRAConfig = group(LoRAConfig, help="lora_rank, lora_alpha, lora_target_modules")

    # -- devices: data parallel and precision -------------------------------------------------
    data_parallel: Literal["ddp", "fsdp"] = setting("ddp", help="under torchrun: \"ddp\" keeps a full copy of the "
                                                    "model on every rank; \"fsdp\" shards weights, gradients and "
                                                    "optimizer state over the ranks (PyTorch's FSDP2, fully_shard), "
                                                    "for models larger than one device")
    mixed_precision: Literal[PRECISIONS] = setting(
        "auto", help="\"bf16\": fp32 master weights with bf16 autocast; \"no\": fp32 throughout; \"auto\": bf16 on "
        "GPUs and on CPUs with native bf16 (avx512_bf16 / amx) for models of width >= 512 (trainers/model.py), else "
        "fp32 (benchmarks/speed/precision.py: without native bf16 a forward+backward ran 27x slower under bf16 "
        "autocast)")
    gradient_checkpointing: bool = setting(False, MEASURES, help="recompute each decoder layer's activations in the "
                                           "update's backward pass instead of keeping them (Hugging Face's gradient "
                                           "checkpointing, no KV cache): only the layers' inputs stay, for about one "
                                           "more forward pass of compute; the loss and gradients stay the same")
    fsdp_cpu_offload: bool = setting(False, MEASURES, help="with data_parallel=\"fsdp\": the weight, gradient and "
                                     "optimizer-state shards live in CPU memory and each layer comes to the GPU for "
                                     "its pass (FSDP2's CPUOffloadPolicy); the optimizer steps on the CPU, slowly")

    # -- algorithm: advantage, clipping, KL, entropy ------------------------------------------
    advantage: Literal[ADVANTAGES] | None = setting(None, help="advantages: gae (a critic) | group (group-relative); "
                                                    "None: the algorithm's (the table in trainers/config.py)")
    critic: Literal[CRITICS] = setting("separate", help="with gae: the critic is a separate copy of the model with a "
                                       "value head (RAGEN/verl), or a value head on the policy's own trunk")
    critic_backprop: bool = setting(False, help="shared critic only: let the value loss train the policy's trunk too")
    epsilon: float = bounded(0.2, above=0, help="lower clip of the ratio")
    epsilon_high: float | None = bounded(0.28, above=0, help="upper clip (RAGEN's clip_ratio_high); None: epsilon")
    dual_clip: float | None = bounded(3.0, above=1, help="cap of the loss at -c A where A < 0 (verl's clip_ratio_c); "
                                      "None: off")
    beta: float = bounded(0.0, min=0, help="KL(pi || ref) coefficient (RAGEN's kl_loss_coef with use_kl_loss; its "
                          "runs: off)")
    kl_loss_type: Literal[KL_TYPES] = setting(
        "low_var_kl", learns_if=lambda run: run["beta"] != 0,
        help="the per-token KL estimate: low_var_kl, k3 = exp(ref - logp) - (ref - logp) - 1 (RAGEN's main table and "
        "gradient probe) | kl, k1 = logp - ref (verl's \"kl\", base.yaml's, which RAGEN's top-p and KL sweeps keep) "
        "| abs | mse, k2 (verl's other two)")
    kl_reward: KLRewardConfig = group(KLRewardConfig, help="the KL penalty in the reward instead, or as well "
                                      "(use_kl_in_reward, kl_penalty, kl_ctrl_*: KLRewardConfig)")
    entropy_coef: float = bounded(0.001, min=0, help="entropy bonus coefficient (RAGEN's entropy_coeff)")
    loss_type: Literal[LOSS_TYPES] | None = setting(None, help="grpo | dapo | bnpo | dr_grpo | seq_sum; None: the "
                                                    "algorithm's (the table in trainers/config.py)")
    scale_rewards: Literal[SCALES] | None = setting(None, help="group | batch | none; None: the algorithm's")
    gamma: float = bounded(1.0, min=0, max=1, help="PPO discount (RAGEN uses 1)")
    lam: float = bounded(1.0, min=0, max=1, help="PPO GAE lambda (RAGEN uses 1)")
    vf_coef: float = bounded(0.5, min=0, help="value loss weight (gae)")
    cliprange_value: float = bounded(0.5, min=0, help="value clipping (verl's critic default)")

    # -- filter: SNR-aware filtering (RAGEN's released selection rules, ragen_envs/diagnose/filtering.py) --
    filtering: FilterConfig = group(FilterConfig, help="which groups the filter keeps: filter (its strategy), "
                                    "filter_value, ..., include_zero (FilterConfig)")
    # Not in FilterConfig, which says only what the filter keeps (what filter_preview and the integrations
    # take): this setting stops the run, and filter_loss_scaling (below) scales the update by the kept share.
    filter_empty_stop: int = bounded(5, min=0, help="stop the run after this many iterations in a row in which "
                                     "the filter keeps nothing (0: never)")

    # -- RAGEN's reward and advantage options (config/base.yaml; each off, as there) -----------------
    reward_normalization_grouping: Literal[NORM_GROUPINGS] = setting(
        "state", help="rewards normalised before the filter and the advantages see them, within each prompt group "
        "(\"state\"), the whole batch (\"batch\") or each env (\"inductive\") (RAGEN's reward_normalization.grouping)")
    reward_normalization_method: Literal[NORM_METHODS] = setting(
        "identity", help="identity (off) | mean: R - mean | mean_std: (R - mean) / std, 0 where the std is 0 | "
        "asym_clip: mean_std clipped to [-1, 3] (RAGEN's reward_normalization.method)")
    use_turn_scores: bool = setting(False, help="each turn's reward on its own last token, not the episode's sum on "
                                    "the last one: PPO's GAE sees when a reward came (RAGEN's "
                                    "agent_proxy.use_turn_scores)")
    bi_level_gae: bool = setting(False, help="PPO: GAE at two levels, over turns (discount high_level_gamma) and "
                                 "within each turn (gamma), the turn's last token taking the turn-level return "
                                 "(RAGEN's bi_level_gae, trainers/algorithms.py)")
    high_level_gamma: float = bounded(0.95, min=0, max=1, help="the turn-level discount of bi_level_gae")
    soft_advantage_reweight: bool = setting(False, help="group advantages x the group's reward std / the largest "
                                            "kept group's: low-variance prompts weigh less instead of being dropped "
                                            "(RAGEN's soft_advantage_reweight)")
    filter_loss_scaling: Literal[LOSS_SCALINGS] = setting(
        "none", help="advantages x the share of groups the filter kept (linear) or its square root (sqrt): the "
        "update's size follows how much was kept (RAGEN's filter_loss_scaling)")
    grpo_advantage_length_weight: bool = setting(False, help="group advantages / (the sample's generated tokens / "
                                                 "their mean over the kept samples) (RAGEN's "
                                                 "grpo_advantage_length_weight)")
    zero_task_advantage: bool = setting(False, help="every advantage 0: only the entropy and KL terms train the "
                                        "policy, RAGEN's task-free ablation (the critic still learns the returns)")
    log_group_rv_table: bool = setting(False, help="write each iteration's per-group reward std and whether the "
                                       "filter kept it to group_rv.csv in the run folder (RAGEN's "
                                       "trainer.log_group_rv_table, a W&B table there)")

    # -- MI: the collapse diagnostics ---------------------------------------------------------
    mi_every: int = bounded(5, min=0, help="MI proxies at the first iteration and every this many (RAGEN's "
                            "compute_freq; 0: never)")
    mi_first_turn_pairs: int = bounded(64, min=0, help="first-turn (X, Z) pairs drawn for the MI proxies (RAGEN's "
                                       "num_samples; 0: all)")
    mi_trajectory_pairs: int = bounded(64, min=0, help="trajectory-scope draws with replacement (RAGEN's "
                                       "num_samples; 0: off)")
    # -- gradient probe: each loss term's gradient norm by reward-variance bucket (trainers/gradient_probe.py) --
    probe: GradientProbeConfig = group(GradientProbeConfig, help="gradient_analysis_*")
    # -- validation: held-out episodes, never trained on (RAGEN's trainer.test_freq, val_before_train) --
    evaluation: EvalConfig = group(EvalConfig, help="eval_steps, eval_episodes, eval_seed, eval_temperature")
    # -- output: logging, plot, checkpoints, resume --------------------------------------------
    logging_steps: int = bounded(1, min=0, role=PLACE, help="print the metrics table every this many iterations")
    report_to: Literal["auto", "tensorboard", "wandb"] = setting(
        "auto", PLACE, help="where metrics go beside metrics.jsonl/csv. \"auto\": TensorBoard (the run folder's "
        "tensorboard/) when installed; \"tensorboard\": it is wanted, a missing package is an error before anything "
        "loads; \"wandb\": Weights & Biases (trainers/tracking.py: metrics, config, an episode table), TensorBoard "
        "as under auto")
    plot: bool = setting(True, PLACE, help="draw the run's curves to metrics.png when train() ends (a few seconds of "
                         "matplotlib)")
    saving: SaveConfig = group(SaveConfig, help="save_strategy, save_steps, save_total_limit, save_rollouts_steps")
    resume_from_checkpoint: str | None = setting(None, PLACE, flag="resume", help="a checkpoint folder (its parent "
                                                 "becomes output_dir when that is None), or \"latest\" in output_dir")
    allow_config_changes: bool = setting(False, PLACE, flag="allow_changes", help="on resume, run with settings that "
                                         "differ from the run's config.json (kept there in its \"history\", with the "
                                         "iterations each ran) instead of refusing them")

    def __post_init__(self):
        check_choices(self)  # every Literal-typed field against its choices
        check_bounds(self)  # every numeric field against the bounds declared with it
        if self.rollout.group_size < 2:
            raise ValueError(f"rollout.group_size must be >= 2 (group statistics need two samples), "
                             f"got {self.rollout.group_size}")
        tracker = self.report_to  # a tracker named is required; "auto" takes TensorBoard where installed
        if tracker != "auto" and importlib.util.find_spec(tracker) is None:  # its package and extra share its name
            raise ValueError(f"report_to={tracker!r} (--report-to {tracker}): {tracker} is not installed; "
                             f"{install_hint(tracker)}")
        if self.fsdp_cpu_offload and self.data_parallel != "fsdp":
            raise ValueError("fsdp_cpu_offload offloads FSDP2's shards: it needs data_parallel='fsdp' (under "
                             "torchrun); without sharding there is nothing to offload")
        if self.overwrite_output_dir and self.resume_from_checkpoint:
            raise ValueError("overwrite_output_dir and resume_from_checkpoint exclude each other: "
                             "overwriting would delete the checkpoint to resume from")
        defaults = ALGORITHM_DEFAULTS[self.algorithm]
        for name in ("advantage", "loss_type", "scale_rewards"):
            if getattr(self, name) is None:
                setattr(self, name, defaults[name])
        if self.epsilon_high is None:
            self.epsilon_high = self.epsilon
        self._check_ragen_options()

    def _check_ragen_options(self) -> None:
        """Combinations RAGEN's code refuses (or would silently ignore) are errors here (after the
        algorithm's defaults are in)."""
        advantage = self.advantage
        for name in ("soft_advantage_reweight", "grpo_advantage_length_weight"):
            if getattr(self, name) and advantage != "group":
                raise ValueError(f"{name} acts on group advantages (RAGEN applies it under GRPO only); "
                                 f"advantage is {advantage!r}")
        if self.bi_level_gae and self.kl_reward.on:
            raise ValueError("use_kl_in_reward with bi_level_gae: its turn ends are the tokens that carry a reward "
                             "(RAGEN's rule), and the penalty gives every token one")
        if self.bi_level_gae and advantage != "gae":
            raise ValueError(f"bi_level_gae is a GAE (advantage='gae', PPO's); advantage is {advantage!r}")
        if self.use_turn_scores and self.reward_normalization_method != "identity":
            raise ValueError("reward normalization acts on episode returns, not turn scores (RAGEN refuses "
                             "the pair too): use_turn_scores needs reward_normalization_method='identity'")

    @classmethod
    def settings(cls) -> dict:
        """The fields of a run's record (``to_dict``) by their names there: the groups' by their flat names."""
        hints = typing.get_type_hints(cls)
        return {k: v for f in fields(cls) for k, v in (
            {flat_name(g): g for g in fields(hints[f.name])} if f.metadata.get("group") else {f.name: f}).items()}

    @classmethod
    def resume_free(cls, run: dict) -> set[str]:
        """The settings a resume may change for a run whose record (``to_dict``) is ``run``: those that do
        not change what it learns (declared MEASURES or PLACE, or whose ``learns_if`` fails for it)."""
        return {k for k, f in cls.settings().items() if f.metadata.get("role", LEARNS) != LEARNS} | cls.inert(run)

    @classmethod
    def run_place(cls, run: dict) -> set[str]:
        """The settings a study may ignore when it reuses a run like ``run``: where and how the run writes
        (PLACE), and those whose ``learns_if`` fails for it. What it measures still counts."""
        return {k for k, f in cls.settings().items() if f.metadata.get("role") == PLACE} | cls.inert(run)

    @classmethod
    def inert(cls, run: dict) -> set[str]:
        """The settings that do nothing under the rest of ``run`` (their ``learns_if`` fails)."""
        return {k for k, f in cls.settings().items() if "learns_if" in f.metadata and not f.metadata["learns_if"](run)}

    @property
    def critic_lr(self) -> float:
        """The critic's learning rate: ``critic_learning_rate``, else CRITIC_LR_RATIO x ``learning_rate``."""
        if self.critic_learning_rate is not None:
            return self.critic_learning_rate
        return float(f"{CRITIC_LR_RATIO * self.learning_rate:.12g}")  # 1e-05, not 9.999999999999999e-06

    def to_dict(self) -> dict:
        """The run's record (config.json, a study cell's ``config``): the groups' settings flat, by their flat
        names, as runs recorded them before the groups were nested (so records old and new compare key by
        key); the rollout nested. ``from_dict`` takes it back, or a record with the groups nested."""
        hints, whole, out = typing.get_type_hints(type(self)), asdict(self), {}
        for f in fields(self):
            if f.metadata.get("group"):
                out.update({flat_name(g): whole[f.name][g.name] for g in fields(hints[f.name])})
            else:
                out[f.name] = whole[f.name]
        return out

    @classmethod
    def flag(cls, path: str) -> str:
        """The command-line flag of a dotted field ("rollout.sampling.temperature" -> "--temperature");
        "env" and "model" are flags of their own; a group's setting may be named by its flat name."""
        head, _, rest = path.partition(".")
        parts = [*cls.FLAT_NAMES.get(head, (head,)), *([rest] if rest else [])]  # a group's setting by its flat name
        config, name = cls, path
        for part in ".".join(parts).split("."):
            by_name = {f.name: f for f in fields(config)}
            if part not in by_name:
                return f"--{part.replace('_', '-')}"
            name = by_name[part].metadata.get("flag", flat_name(by_name[part]))
            config = typing.get_type_hints(config).get(part)
        return f"--{name.replace('_', '-')}"

    @classmethod
    def from_preset(cls, name: str, env: str | None = None, **overrides) -> "TrainerConfig":
        """A preset's config (``preset``), with top-level fields overridden by ``overrides``."""
        return cls.from_dict({**preset(name, env), **overrides})

    @classmethod
    def from_dict(cls, data: dict) -> "TrainerConfig":
        """The inverse of ``to_dict`` (nested dicts become the nested configs)."""
        from ragen_envs.agent import ChatEnvConfig, SamplingConfig

        data = dict(data)
        rollout = dict(data.pop("rollout", {}))
        rollout["chat"] = ChatEnvConfig(**rollout.get("chat", {}))
        rollout["sampling"] = SamplingConfig(**rollout.get("sampling", {}))
        return cls(**data, rollout=RolloutConfig(**rollout))  # a group's settings flat, or the group as a dict


CPU_QUICK_CHAT = {"max_turns": 3}  # the cpu-quick preset's turns and reply budget, which SFT's defaults match
CPU_QUICK_TOKENS = 64


@dataclass
class SFTConfig:
    episodes: int = bounded(60, min=1, help="oracle episodes per env")
    imperfect: float = bounded(0.3, min=0, max=1, help="share of turns that play a random valid action instead of "
                               "the oracle's")
    multi_move: float = bounded(0.0, min=0, max=1, help="share of the oracle's turns that play its next moves up to "
                                "the reply's allowance (the chat's max_actions_per_turn) instead of one; 0: one move a "
                                "reply, so RL has to learn when two moves a reply pay")
    epochs: int = bounded(1, min=1, help="passes over the demonstrations")
    batch_size: int = bounded(2, min=1, help="episodes per optimizer step (each episode is one sequence of all its "
                              "turns)")
    learning_rate: float = bounded(2e-4, above=0, help="AdamW learning rate")
    lr_schedule: Literal["constant", "cosine"] = declared(
        "constant", help="\"cosine\": a linear warmup over the first 5% of steps, then a cosine decay to 0 (training "
        "from scratch needs it); \"constant\": the rate throughout")
    freeze_layers: int = bounded(20, min=0, help="bottom decoder layers kept frozen, with the embeddings (0: train "
                                 "them all)")
    seed: int = declared(0, help="env seeds start here; shuffling and the imperfect turns derive from it")
    output_dir: str = declared("runs/warm-start", help="the warm-started model (and tokenizer) is saved here")
    overwrite_output_dir: bool = declared(False, flag="overwrite", help="replace a warm start made with other "
                                          "settings in output_dir (the same settings are reused as they are)")
    max_new_tokens: int = declared(CPU_QUICK_TOKENS, help="the reply budget each prompt states: the RL run's "
                                   "--max-new-tokens, so prompts match exactly")
    chat: ChatEnvConfig = declared(factory=lambda: ChatEnvConfig(**CPU_QUICK_CHAT), help="turns and format, as in "
                                   "the RL runs (prompts state the turns left); defaults: the cpu-quick preset's")

    def __post_init__(self):
        check_bounds(self)


# The model organism's architecture (`ragen sft --from-scratch`, trainers/organism.py): its tokenizer's
# vocabulary and corpus, its decoder's sizes. About 0.6M parameters, so an iteration at RAGEN's scale
# (8 x 16, 5 turns, MI scored) takes about 10 s on 2 CPU cores
@dataclass
class OrganismArchitecture:
    layers: int = declared(2, help="decoder layers")
    width: int = declared(128, help="hidden size (the MLP is 3x wider)")
    heads: int = declared(2, help="attention heads (half as many key/value heads)")
    vocab_size: int = declared(4000, help="at most this BPE vocabulary, learnt on the envs' text, special tokens "
                               "included")
    corpus_episodes: int = declared(100, help="oracle episodes per env whose text the tokenizer learns")
    max_context: int = declared(4096, help="positions the model takes")

    def __post_init__(self):
        for name in ("layers", "width", "heads", "vocab_size", "corpus_episodes", "max_context"):
            check_positive_int(name, getattr(self, name))
        if self.width % self.heads or self.heads % 2 and self.heads > 1:
            raise ValueError(f"width ({self.width}) must divide into heads ({self.heads}), an even number or 1")


# How the organism learns the demonstrations (SFTConfig fields, `ragen sft --from-scratch`'s defaults):
# every layer, many steps at a high rate with warmup and decay, which a decoder this small needs to
# learn to copy the state into its reasoning (about 140 s on 2 cores); fewer random turns than the
# warm start's, for more of that signal; RAGEN's 5 turns.
ORGANISM_SFT = {"episodes": 2500, "epochs": 2, "batch_size": 4, "learning_rate": 1.2e-2, "lr_schedule": "cosine",
                "imperfect": 0.15, "freeze_layers": 0, "chat": {"max_turns": 5}}


def organism_sft_settings(env_ids=()) -> dict:
    """ORGANISM_SFT with the envs' own parts over it (``trainers/env_settings.py``'s ``ORGANISM_SFT_PARTS``:
    an env whose organism needs more demonstrations to learn it)."""
    return _merged(ORGANISM_SFT, {k: v for e in env_ids for k, v in ORGANISM_SFT_PARTS.get(e, {}).items()})


def organism_sft(env_ids=(), **fields) -> SFTConfig:
    """The SFTConfig of ``organism_sft_settings(env_ids)``, with ``fields`` (top-level SFTConfig fields) over it."""
    settings = {**organism_sft_settings(env_ids), **fields}
    chat = settings.pop("chat")
    return SFTConfig(**settings, chat=chat if isinstance(chat, ChatEnvConfig) else ChatEnvConfig(**chat))


# Named settings: nested dicts of TrainerConfig fields (the shape of a run's config.json), with each env's
# own part in ``trainers/env_settings.py``'s ``PRESET_PARTS``, keyed by its catalogue id.
# "ragen2-main" is RAGEN's main-table run (config/base.yaml, the per-env configs and
# scripts/runs/run_main_table_diff_algo.sh): P = 8 groups x G = 16, 400 tokens a turn, 5 turns of up to
# 2 actions (10 actions an episode) unless the env's part says otherwise; top-p 0.9 over the softmax of
# the groups' reward std, mini-batches of 32, 400 iterations; training seeds from 10000 (RAGEN's
# seed.train); validation before the first iteration and every 10 (base.yaml's test_freq). "cpu-quick"
# is a few minutes on 2 CPU cores for the warm-started default model.
# "organism" is ragen2-main with ORGANISM_RL over it, for the model organism (trainers/organism.py,
# `make demo`): every layer trained, at a rate for its size, MI scored every iteration; about 10 s an
# iteration on 2 CPU cores.
PRESETS = ("ragen2-main", "cpu-quick", "organism")
# ragen2-main's checkpoints: every 100 iterations as RAGEN's runs save (trainer.save_freq), the newest 2 kept
# (one to resume and the one before it; a 3B model's checkpoint with its AdamW state is about 36 GB)
RAGEN_SAVE_STEPS, RAGEN_SAVE_TOTAL_LIMIT = 100, 2
ORGANISM_RL = {"learning_rate": 1e-3, "freeze_layers": 0, "num_iterations": 40, "mi_every": 1}
# RAGEN's validation (EvalConfig's defaults) as rollout settings, for `ragen eval --preset`
VALIDATION = {"ragen2-main": {"n_groups": EvalConfig.episodes, "group_size": 1, "seed": EvalConfig.seed,
                              "sampling": {"temperature": EvalConfig.temperature}}}
VALIDATION["organism"] = VALIDATION["ragen2-main"]


def preset(name: str, env: str | None = None) -> dict:
    """The settings of preset ``name`` for ``env`` (the run's single env, for per-env settings)."""
    if name == "cpu-quick":
        base = {"num_iterations": 6, "filter": "top_p", "filter_value": 0.9, "learning_rate": 1e-5,
                "mini_batch_size": 8, "mi_every": 1, "freeze_layers": 20,
                "rollout": {"n_groups": 2, "group_size": 4, "chat": dict(CPU_QUICK_CHAT),
                            "sampling": {"max_new_tokens": CPU_QUICK_TOKENS, "temperature": 1.0}}}
    elif name == "ragen2-main":
        base = {"num_iterations": 400, "filter": "top_p", "filter_value": 0.9, "filter_prob_mode": "softmax",
                "filter_metric": "std", "include_zero": True, "mini_batch_size": 32, "learning_rate": 1e-6,
                "eval_steps": 10, "save_steps": RAGEN_SAVE_STEPS, "save_total_limit": RAGEN_SAVE_TOTAL_LIMIT,
                "rollout": {"n_groups": 8, "group_size": 16, "seed": 10000,
                            "chat": {"max_turns": 5, "max_actions_per_turn": 2},
                            "sampling": {"max_new_tokens": 400, "temperature": 1.0}}}
    elif name == "organism":
        return _merged(preset("ragen2-main", env), ORGANISM_RL)
    else:
        raise ValueError(f"preset must be one of {PRESETS}, got {name!r}")
    own = dict(PRESET_PARTS.get(env, {}).get(name, {}))
    env_kwargs = own.pop("env_kwargs", None)
    if env_kwargs:
        own = _merged(own, {"rollout": {"env_kwargs": {env: dict(env_kwargs)}}})
    return _merged(base, own)


def eval_preset(name: str, env: str | None = None) -> dict:
    """RolloutConfig fields of preset ``name``'s validation for ``env`` (``ragen eval --preset``): the
    run's rollout settings for the env, with the preset's validation groups and seeds."""
    return _merged(preset(name, env)["rollout"], VALIDATION.get(name, {}))


def _merged(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s values, nested dicts merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
