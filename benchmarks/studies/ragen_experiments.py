"""RAGEN's experiment scripts, here: each of mll-lab-nu/RAGEN's ``scripts/runs/*.sh`` (at 20daedc, described
in its ``docs/experiment_*.md``) as a set of cells, one training run per setting and seed, run and resumed
cell by cell through findings.py (a stopped experiment goes on where it stopped).

    python benchmarks/studies/ragen_experiments.py main-table          # run_main_table_diff_algo.sh
    python benchmarks/studies/ragen_experiments.py top-p-sweep         # run_top_p_sweep.sh
    python benchmarks/studies/ragen_experiments.py kl-sweep            # run_kl_sweep.sh
    python benchmarks/studies/ragen_experiments.py entropy-sweep       # run_entropy_sweep.sh
    python benchmarks/studies/ragen_experiments.py slip-sweep          # run_frozen_lake_slipper_rate_sweep.sh
    python benchmarks/studies/ragen_experiments.py gradient-analysis   # run_sokoban_ppo_filter_grad_analysis.sh,
                                                                       # then its _probe_ckpt.sh on the final checkpoint
    python benchmarks/studies/ragen_experiments.py filtering-final     # run_filtering_final.sh
    python benchmarks/studies/ragen_experiments.py diff-model --models M1,M2   # run_main_table_diff_model.sh
    python benchmarks/studies/ragen_experiments.py diff-size --models M1,M2    # run_main_table_diff_size.sh
    python benchmarks/studies/ragen_experiments.py search-benchmark    # run_search_benchmark.sh
    python benchmarks/studies/ragen_experiments.py webshop-small --combos 1,2,3,4  # run_webshop_small_combos.sh
    python benchmarks/studies/ragen_experiments.py webshop-release     # run_webshop_release_combos.sh
    python benchmarks/studies/ragen_experiments.py ablation            # the paper's Sokoban ablation table
                                                                       # (which groups the filter keeps, by which
                                                                       # metric; no script)
    python benchmarks/studies/ragen_experiments.py stress              # its stress tests: one reward-std quartile
                                                                       # only, the filter inside groups (no script)
    python benchmarks/studies/ragen_experiments.py collapse-frozenlake # issue 66's designs of a collapse the filter
    python benchmarks/studies/ragen_experiments.py collapse-sokoban    # should prevent (no script; collapse.json)
    python benchmarks/studies/ragen_experiments.py collapse-slip
Each takes RAGEN's options by the same names (``--tasks``, ``--algos``, ``--filters``, ``--values``,
``--include-zero``, ``--kl-loss-type``, ``--checkpoint-step``, ``--models``, ``--combos``, ``--filter-strategy``)
and the findings flags (``--help``); ``--reuse FOLDER`` copies in the cells another study has trained alike
(the entropy sweep's coefficient 0 is the KL sweep's 0; diff-model's cells of a model are the main table's
PPO cells of that ``--model``).

Models. diff-model, diff-size and webshop-small compare models: each of their cells names its own (its
``model`` label), trained from it and measured against its own untrained start. diff-model and diff-size
take them by ``--models`` (RAGEN's short names mapped as its scripts map them, ``model_path``: Qwen2.5-7B is
Qwen/Qwen2.5-7B, Llama-3.2-3B-Instruct meta-llama's; hub ids and folders as they are), webshop-small from its
``--combos`` (RAGEN's four model-algorithm pairs); ``--model`` puts one model in their place. Without any they
stop with one line that names RAGEN's defaults: those are hub models at RAGEN's scale (a GPU), not to be
started unasked, and the organism is one model, whose table would compare nothing. search-benchmark takes
``--models`` too, but its subject is the task: without it, ``--model`` or the organism as everywhere else;
webshop-release has RAGEN's one model, ``--model``.

Scales. With ``--model`` (or ``--models``, ``--combos``: real models; on a GPU with ``--backend vllm``):
RAGEN's own, the ragen2-main preset for the task's env: 400 iterations of 8 groups x 16, the env's turns
and reply budget (where the script sets no others: ``EXPERIMENTS``), learning rate 1e-6 on every layer,
validation (512 episodes, temperature 0.5) before the first iteration and every 10, one seed as RAGEN
runs. Without it: the organism preset on the task's model organism (``trainers/organism.py``, built on
first use): the same, but 40 iterations, learning rate 1e-3, MI every iteration, no in-run validation and
three seeds. A script's own iterations hold at both scales (the gradient analysis 101, the search
benchmark 200, the WebShop ones 100).
``--quick``: two iterations of 2 x 4, to see the machinery. Every cell is then played greedily on held-out
episodes (``findings.evaluate``) beside its untrained start on the same episodes.

The settings of each experiment are RAGEN's script's overrides (``EXPERIMENTS``). Departures: none in the
settings; our KL estimates are unclipped (verl clips k3 to [-10, 10]); RAGEN's early stop on a failing
validation is not here (the filter's empty-batch stop is, ``filter_empty_stop``). Cells checkpoint every
``findings.CELL_SAVE_STEPS`` iterations to resume, whatever the script's save_freq. What the scripts set for
their GPUs only (micro-batch sizes, vLLM's memory share, context and tensor parallelism, Ray's CPUs,
entropy_from_logits_with_chunking, checkpoint contents) is ours, none changing the update. search-benchmark:
RAGEN's SearchQA is HotpotQA over a dense-retrieval server (its --retrieval-port); here it is the catalogue's
``search`` task, questions over country facts searched with BM25 in process; its optional --mini-batch,
--micro-batch, --collapse-freq and --tp are not flags here (the scale flags and ``--backend`` are); its
one --filter-value is ``--values``, which may list several. WebShop is the catalogue's generated shop, not
WebShop's product data. diff-size maps its names as the other scripts do (RAGEN's prefixes Qwen/ to every
name, which differs only where that names no model). The scripts' validation episodes (128 or 256) are the
in-run validation's; the held-out play after training is the scale's.
Outputs go to benchmarks/results/ragen-<experiment>[-quick]/: results.csv/json, <experiment>.png, the proxies
over iterations of every cell trained here (curves.csv/png, where the run folders are); for the
ablation, stress tests and sweeps contrasts.json (each arm minus the reference arm by seed, the trend over the
quartiles or the swept values: ``REFERENCE``); for the gradient analysis each run's gradients.png (``ragen plot
--gradients``) and each cell's probes.jsonl (its probes' rows, beside result.json to commit, since the run
folder stays local), from which the trends over seeds are read.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

import findings
from ragen_envs.diagnose.filtering import STRATEGIES
from ragen_envs.registry import env_for_task, ragen_tasks
from trainers.config import KL_TYPES

ALGORITHMS = {"PPO": "ppo", "DAPO": "dapo", "GRPO": "grpo", "DrGRPO": "drgrpo"}
# every script's filter: top-p over the groups' reward std, largest first, whole groups, no loss scaling
FILTER = {"filter": "top_p", "filter_metric": "std", "filter_order": "largest", "filter_loss_scaling": "none"}
SOFTMAX = {**FILTER, "filter_prob_mode": "softmax"}
# the scripts' common_overrides: the KL loss off (its type low-var-kl, its coefficient then unused), entropy 0.001
COMMON = {"beta": 0.0, "kl_loss_type": "low_var_kl", "entropy_coef": 0.001}


def filtered(on: bool, top_p: float = 0.9, include_zero: bool = False) -> dict:
    """The scripts' filter/nofilter pair: top-p ``top_p`` (zero-variance groups as ``include_zero`` says),
    or top-p 1.0 with them, which keeps every group through the same code path."""
    if on:
        return {"filter_value": top_p, "include_zero": include_zero}
    return {"filter_value": 1.0, "include_zero": True}


def main_table(args) -> list:
    """run_main_table_diff_algo.sh: each task x algorithm x filter; KL off, entropy 0.001, top-p 0.9 over the
    softmax with zero-variance groups kept (so nofilter, top-p 1.0, keeps all)."""
    return [(task, f"{algo}-{name}", {"task": task, "algo": algo, "filter": name},
             {"algorithm": ALGORITHMS[algo], **SOFTMAX, **filtered(name == "filter", include_zero=True), **COMMON})
            for task in args.tasks for algo in args.algos for name in args.filters]


def top_p_sweep(args) -> list:
    """run_top_p_sweep.sh: PPO on Sokoban, KL 0.001 (``--kl-loss-type``, RAGEN's: verl's plain estimate) and
    entropy 0.001; each top-p value without zero-variance groups, and nofilter (1.0 with them): two
    different 1.0 conditions."""
    return [(args.tasks[0], f"top_p{v}", {"top_p": v},
             {"algorithm": "ppo", **SOFTMAX, **filtered(v != "nofilter", 1.0 if v == "nofilter" else float(v)),
              "beta": 0.001, "kl_loss_type": args.kl_loss_type, "entropy_coef": 0.001}) for v in args.values]


def kl_sweep(args) -> list:
    """run_kl_sweep.sh: PPO on Sokoban, each KL coefficient (0: no reference pass) by ``--kl-loss-type``,
    entropy 0, the filter at top-p 1 (``--include-zero``: with zero-variance groups, RAGEN's default)."""
    labels = {"kl_loss_type": args.kl_loss_type, "include_zero": args.include_zero}
    return [(args.tasks[0], f"kl{v}", {"kl": v, **labels},
             {"algorithm": "ppo", **SOFTMAX, "filter_value": 1.0, "include_zero": args.include_zero,
              "beta": float(v), "kl_loss_type": args.kl_loss_type, "entropy_coef": 0.0}) for v in args.values]


def entropy_sweep(args) -> list:
    """run_entropy_sweep.sh: PPO on Sokoban, each entropy coefficient, KL off, the filter at top-p 1."""
    return [(args.tasks[0], f"entropy{v}", {"entropy": v, "include_zero": args.include_zero},
             {"algorithm": "ppo", **SOFTMAX, "filter_value": 1.0, "include_zero": args.include_zero,
              "beta": 0.0, "entropy_coef": float(v)}) for v in args.values]


def slip_sweep(args) -> list:
    """run_frozen_lake_slipper_rate_sweep.sh: PPO on FrozenLake (coordinates), each slip (1 - RAGEN's
    success_rate) x filter (top-p 0.9 without zero-variance groups) and nofilter; KL and entropy 0."""
    return [(args.tasks[0], f"slip{v}-{name}", {"slip": v, "filter": name},
             {"algorithm": "ppo", **SOFTMAX, **filtered(name == "filter"), "beta": 0.0, "entropy_coef": 0.0,
              "env_kwargs": {"slip": float(v)}}) for v in args.values for name in args.filters]


def gradient_analysis(args) -> list:
    """run_sokoban_ppo_filter_grad_analysis.sh: PPO (or ``--algos GRPO``) on Sokoban, top-p 0.9 over the
    reward stds themselves without zero-variance groups, KL off, entropy 0.001, the probe every 50 iterations
    (1, 51, 101; ``--probe-every``) on its own batch of 128 x 16, filtered as the run filters (``--probe-whole``:
    every group of it, zero-variance ones too); checkpoints as often and at the end, for the probe after.
    ``--quick`` probes every iteration's training batch."""
    probing = {"gradient_analysis_every": 1, "save_steps": 1} if args.quick else {
        "gradient_analysis_every": args.probe_every, "gradient_analysis_env_groups": 128,
        "gradient_analysis_group_size": 16, "gradient_analysis_filter": not args.probe_whole,
        "save_steps": args.probe_every}
    return [(args.tasks[0], algo, {"algo": algo},
             {"algorithm": ALGORITHMS[algo], **FILTER, "filter_prob_mode": "linear", **filtered(True),
              "beta": 0.0, "entropy_coef": 0.001, **probing, "save_total_limit": None}) for algo in args.algos]


ABLATION = {  # the filter of each arm of the paper's ablation, over the main table's top-p 0.9 softmax
    "none": filtered(False),
    "largest": filtered(True, include_zero=True),
    "smallest": {**filtered(True, include_zero=True), "filter_order": "smallest"},
    "mean": {**filtered(True, include_zero=True), "filter_metric": "mean"},
    "entropy": {**filtered(True, include_zero=True), "filter_metric": "entropy"},
    # RAGEN's softmax over near-equal entropies keeps every group, so "entropy" is no filter in effect; this
    # one keeps the 3 of 8 highest-entropy groups, as many as "largest" keeps on average (0.38)
    "entropy_top_k": {**filtered(True, include_zero=True), "filter": "top_k", "filter_value": 0.375,
                      "filter_metric": "entropy"},
    # the control of "largest": on each batch as many groups as it keeps, drawn at random, so that "which
    # groups" and "fewer update steps" can be told apart (issue 66)
    "random_k": {**filtered(True, include_zero=True), "filter_control": "random"},
}


STRESS = {  # the paper's stress tests of the filter: one reward-std quartile of the groups only (q1: the
    # highest), and the ablation's "largest" filter inside each group, over its trajectories' |R - mean|
    **{f"q{q}": {**filtered(True, include_zero=True), "filter": "top_k", "filter_value": 0.25,
                 "filter_skip": (q - 1) * 0.25} for q in range(1, 5)},
    "trajectory": {**filtered(True, include_zero=True), "filter_level": "trajectory"},
}


def ablation(args, arms: dict = ABLATION) -> list:
    """The paper's Sokoban ablation (no script of RAGEN's): PPO as the main table runs it (KL off, entropy
    0.001, top-p 0.9 over the softmax with zero-variance groups), with no filter, the largest reward std
    kept (the paper's filter), the smallest, and the largest reward mean or token entropy instead (by top-p,
    and by entropy also as many groups as the reward-std filter keeps: ``entropy_top_k``), and the control
    of ``largest``: as many groups as it keeps, drawn at random (``random_k``)."""
    unknown = [v for v in args.values if v not in arms]
    if unknown:
        raise SystemExit(f"{args.experiment} --values: {', '.join(unknown)} is not one of {', '.join(arms)}")
    return [(args.tasks[0], f"filter-{v}", {"filter": v},
             {"algorithm": "ppo", **SOFTMAX, **arms[v], "beta": 0.0, "kl_loss_type": "low_var_kl",
              "entropy_coef": 0.001}) for v in args.values]


# run_filtering_final.sh's fifteen filters, by its run names: (metric, strategy, value, order); its
# reward_variance is the std here (RAGEN's code ranks by std), its entropy_variance entropy_std
FILTERING_FINAL = {
    **{f"rv_tp{v}": ("std", "top_p", v, "largest") for v in (1.0, 0.95, 0.9, 0.5)},
    **{f"rv_mp{v}": ("std", "min_p", v, "largest") for v in (0.1, 0.05, 0.2)},
    **{f"rv_tk{v}{suffix}": ("std", "top_k", v, order) for v in (0.25, 0.5)
       for suffix, order in (("_rev", "smallest"), ("", "largest"))},
    "ent_tp0.9": ("entropy", "top_p", 0.9, "largest"), "entv_tp0.9": ("entropy_std", "top_p", 0.9, "largest"),
    "len_tp0.9": ("length", "top_p", 0.9, "largest"), "len_tp0.9_rev": ("length", "top_p", 0.9, "smallest"),
}


def filtering_final(args) -> list:
    """run_filtering_final.sh: PPO on Sokoban, each of its filters (``FILTERING_FINAL``), zero-variance groups
    dropped, top-p over the scores themselves (base.yaml's linear mode), no loss scaling, entropy 0.001 (base.yaml).
    KL off: the script sets algorithm.kl_ctrl.kl_coef and kl_loss_coef to 0.001, but neither use_kl_in_reward
    (verl's default False) nor use_kl_loss (base.yaml's False) is on, so neither coefficient acts there."""
    unknown = [v for v in args.values if v not in FILTERING_FINAL]
    if unknown:
        raise SystemExit(f"{args.experiment} --values: {', '.join(unknown)} is not one of {', '.join(FILTERING_FINAL)}")
    return [(args.tasks[0], v, {"filter": v},
             {"algorithm": "ppo", **FILTER, "filter": strategy, "filter_metric": metric, "filter_value": value,
              "filter_order": order, "filter_prob_mode": "linear", "include_zero": False, "beta": 0.0,
              "use_kl_in_reward": False, "entropy_coef": 0.001})
            for v in args.values for metric, strategy, value, order in [FILTERING_FINAL[v]]]


def model_path(name: str) -> str:
    """A model of ``--models`` as RAGEN's scripts name it (their get_model_path): a hub id or path (with "/",
    or a folder here) as it is, Llama-3.2-3B-Instruct meta-llama's, any other name Qwen's (Qwen/<name>)."""
    if "/" in name or Path(name).is_dir():
        return name
    return "meta-llama/Llama-3.2-3B-Instruct" if name == "Llama-3.2-3B-Instruct" else f"Qwen/{name}"


def diff_models(args) -> list:
    """run_main_table_diff_model.sh and run_main_table_diff_size.sh: the main table's PPO cells (the same
    overrides: KL off, entropy 0.001, top-p 0.9 over the softmax with zero-variance groups kept, nofilter
    top-p 1.0) of each task and filter mode, for each model (``--models``), each cell trained on its own."""
    ppo = main_table(argparse.Namespace(**{**vars(args), "algos": ["PPO"]}))
    return [(task, f"{name}-{findings.model_slug(model)}", {"model": model, **labels}, fields)
            for model in args.models for task, name, labels, fields in ppo]


SEARCH_ALGORITHMS = ("PPO", "GRPO")  # run_search_benchmark.sh's get_algo_overrides sets these two only


def filter_label(strategy: str, value: float) -> str:
    """run_search_benchmark.sh's name of its filter: nofilter at 1.0, else the strategy and value."""
    return "nofilter" if value == 1.0 else f"{strategy}{value:g}"


def search_benchmark(args) -> list:
    """run_search_benchmark.sh: SearchQA (the catalogue's ``search`` task), each model (``--models``; without,
    ``--model`` or the organism) and algorithm (PPO, GRPO), the filter at each ``--values`` (its
    --filter-value, default 1.0: all groups) by ``--filter-strategy`` (default top_p) over the reward stds
    themselves (base.yaml's linear mode) with zero-variance groups kept (base.yaml's include_zero); KL off,
    entropy 0.001, 200 iterations of 16 x 8 and 5 turns, validation on 256 episodes (config/_9_search.yaml)."""
    unknown = [a for a in args.algos if a not in SEARCH_ALGORITHMS]
    if unknown:
        raise SystemExit(f"{args.experiment} --algos: {', '.join(unknown)} is not one of RAGEN's script's "
                         f"{', '.join(SEARCH_ALGORITHMS)}")
    try:
        values = [float(v) for v in args.values]
    except ValueError:
        raise SystemExit(f"{args.experiment} --values: filter values, numbers (got {','.join(args.values)})")
    return [(args.tasks[0], "-".join([algo, label] + ([findings.model_slug(model)] if model else [])),
             {**({"model": model} if model else {}), "algo": algo, "filter": label},
             {"algorithm": ALGORITHMS[algo], **FILTER, "filter": args.filter_strategy, "filter_value": v,
              "filter_prob_mode": "linear", "include_zero": True, **COMMON, "eval_episodes": 256})
            for model in args.models or [None] for algo in args.algos for v in values
            for label in [filter_label(args.filter_strategy, v)]]


# run_webshop_small_combos.sh's combos, by its --combos numbers: (model, algorithm)
WEBSHOP_COMBOS = {"1": ("Qwen2.5-3B-Instruct", "PPO"), "2": ("Qwen2.5-3B-Instruct", "GRPO"),
                  "3": ("Qwen2.5-7B-Instruct", "PPO"), "4": ("Llama-3.2-3B-Instruct", "PPO")}


def combos(args) -> list[tuple[str, str]]:
    """webshop-small's (model, algorithm) pairs of ``--combos`` (default: all four), each model by RAGEN's
    name rule (``model_path``); with ``--model``, it in every combo's place (one pair per algorithm)."""
    chosen = [WEBSHOP_COMBOS[c] for c in args.combos or WEBSHOP_COMBOS]
    return list(dict.fromkeys((args.model or model_path(model), algo) for model, algo in chosen))


def webshop_small(args) -> list:
    """run_webshop_small_combos.sh: WebShop, each combo (model and algorithm) x filter (top-p 0.9 over the
    reward stds themselves without zero-variance groups) and nofilter (1.0 with them); KL off, entropy
    0.001, 12 turns, 100 iterations of 8 x 16 in minibatches of 16, validation on 128 episodes."""
    return [(args.tasks[0], f"{algo}-{name}-{findings.model_slug(model)}",
             {"model": model, "algo": algo, "filter": name},
             {"algorithm": ALGORITHMS[algo], **FILTER, "filter_prob_mode": "linear", **filtered(name == "filter"),
              **COMMON, "eval_episodes": 128})
            for model, algo in combos(args) for name in args.filters]


# run_webshop_release_combos.sh's filter modes: (strategy, value), each over the reward stds themselves
WEBSHOP_RELEASE = {"topk25": ("top_k", 0.25), "topp09": ("top_p", 0.9), "topp095": ("top_p", 0.95),
                   "nofilter": ("top_p", 1.0)}


def webshop_release(args) -> list:
    """run_webshop_release_combos.sh: GRPO on WebShop (its one model, Qwen2.5-3B-Instruct: ``--model``, else
    the organism), each filter mode (``WEBSHOP_RELEASE``) in the linear mode with zero-variance groups kept;
    KL off, entropy 0.001, 100 iterations of 16 x 8 (minibatches of 32), 9 turns, validation on 256 episodes."""
    return [(args.tasks[0], f"GRPO-{name}", {"filter": name},
             {"algorithm": "grpo", **FILTER, "filter": strategy, "filter_value": value, "filter_prob_mode": "linear",
              "include_zero": True, **COMMON, "eval_episodes": 256})
            for name in args.filters for strategy, value in [WEBSHOP_RELEASE[name]]]


def stress(args) -> list:
    """The paper's stress tests on the ablation's settings: training on one quartile of the groups by reward
    std, and the filter at the trajectory level (its prompt-level twin is the ablation's ``largest``, which
    ``--values`` takes here too, as every ablation arm)."""
    return ablation(args, {**ABLATION, **STRESS})


# Issue 66's designs of a run that should collapse without the filter and not with it (no RAGEN script; each
# study README pre-registers its prediction and verdict). The arms: no filter; top-p 0.9 over the groups'
# reward stds themselves, zero-variance groups dropped (the paper's rule: the fewest groups holding 90 % of
# the variance); RAGEN's code's rule, top-p 0.9 over their softmax with zero-variance groups ranked; and the
# control of the paper's rule: as many groups as it keeps, drawn at random.
TOP_P_LINEAR = {**FILTER, "filter_prob_mode": "linear", **filtered(True)}
COLLAPSE_ARMS = {"none": filtered(False), "top_p_linear": TOP_P_LINEAR,
                 "top_p_softmax": {**SOFTMAX, **filtered(True, include_zero=True)},
                 "random_k": {**TOP_P_LINEAR, "filter_control": "random"},
                 # the slip sweep's rule (the frozenlake preset's), zero-variance groups kept in the ranking, and
                 # its random control
                 "top_p_with_zero": {**TOP_P_LINEAR, **filtered(True, include_zero=True)},
                 "random_k_with_zero": {**TOP_P_LINEAR, **filtered(True, include_zero=True),
                                        "filter_control": "random"}}
DESIGNS = {
    # B: FrozenLake (coordinates), its binary reward, half one-move maps and half six-move ones in the 10-move
    # budget (most groups all-win or all-lose: zero reward variance), Dr. GRPO (a zero-variance group's
    # advantage is exactly 0, so only the entropy bonus acts on it), entropy 0.02 under the reply cap
    "collapse-frozenlake": {"algorithm": "drgrpo", "beta": 0.0, "entropy_coef": 0.02, "mi_every": 2,
                            "env_kwargs": {"solution_lengths": [1, 6]}},
    # A: the slip sweep's one collapse-and-rescue (FrozenLake at slip 0.8, the organism preset: GRPO, MI every
    # iteration), run twice as long with more seeds and a random control
    "collapse-slip": {"env_kwargs": {"slip": 0.8}},
    # C: Sokoban (coordinates), +1 on the solve only, one-push levels and eight-move ones in the 10-move
    # budget, PPO with its critic at 10x the actor, KL (k3) 0.01 to the start and entropy 0.01
    "collapse-sokoban": {"algorithm": "ppo", "beta": 0.01, "kl_loss_type": "low_var_kl", "entropy_coef": 0.01,
                         "mi_every": 2, "env_kwargs": {"reward": "success", "solution_lengths": [1, 8]}},
}


def collapse_design(args) -> list:
    """Issue 66's designs A (``collapse-slip``), B (``collapse-frozenlake``) and C (``collapse-sokoban``):
    ``DESIGNS``' settings, each arm of ``COLLAPSE_ARMS`` (``--values``); MI every iteration or two, for
    ``findings.collapse_iteration``."""
    unknown = [v for v in args.values if v not in COLLAPSE_ARMS]
    if unknown:
        raise SystemExit(f"{args.experiment} --values: {', '.join(unknown)} is not one of {', '.join(COLLAPSE_ARMS)}")
    return [(args.tasks[0], f"filter-{v}", {"filter": v}, {**DESIGNS[args.experiment], **COLLAPSE_ARMS[v]})
            for v in args.values]


# name: (cells, its defaults: tasks, algorithms, values, filter modes, iterations (None: the preset's), and
# groups and group_size where the experiment's batch is not the preset's; models (RAGEN's default --models,
# which a model comparison asks for by name) and combos; max_turns where the script's are not the task's;
# minibatches per batch where its minibatch is not a quarter of it)
EXPERIMENTS = {
    "main-table": (main_table, dict(tasks="sokoban,frozenlake,webshop,metamathqa,countdown",
                                    algos="PPO,DAPO,GRPO,DrGRPO", filters="filter,nofilter")),
    "top-p-sweep": (top_p_sweep, dict(tasks="sokoban", values="1.0,0.98,0.95,0.9,0.8,0.6,0.4,nofilter")),
    "kl-sweep": (kl_sweep, dict(tasks="sokoban", values="0,0.001,0.003,0.01,0.03,0.1")),
    "entropy-sweep": (entropy_sweep, dict(tasks="sokoban", values="0,0.001,0.003,0.01,0.03,0.1")),
    "slip-sweep": (slip_sweep, dict(tasks="frozenlake", values="1,0.5,0.2,0.1,0.05,0.02,0",
                                    filters="filter,nofilter")),
    "gradient-analysis": (gradient_analysis, dict(tasks="sokoban", algos="PPO", iterations=101)),
    "filtering-final": (filtering_final, dict(tasks="sokoban", values=",".join(FILTERING_FINAL))),
    # run_main_table_diff_model.sh's tasks leave webshop out (its usage text lists it), _diff_size.sh's keep it
    "diff-model": (diff_models, dict(tasks="sokoban,frozenlake,metamathqa,countdown", filters="filter,nofilter",
                                     models="Qwen2.5-3B-Instruct")),
    "diff-size": (diff_models, dict(tasks="sokoban,frozenlake,webshop,metamathqa,countdown", filters="filter,nofilter",
                                    models="Qwen2.5-0.5B,Qwen2.5-1.5B,Qwen2.5-3B,Qwen2.5-7B")),
    # its STEPS=200 (its usage text says 400)
    "search-benchmark": (search_benchmark, dict(tasks="search", algos="PPO", values="1.0", iterations=200,
                                                models="Qwen2.5-3B-Instruct")),
    # its ppo_mini_batch_size=16 of 8 x 16: 8 minibatches
    "webshop-small": (webshop_small, dict(tasks="webshop", filters="filter,nofilter", combos=",".join(WEBSHOP_COMBOS),
                                          iterations=100, max_turns=12, minibatches=8)),
    "webshop-release": (webshop_release, dict(tasks="webshop", filters=",".join(WEBSHOP_RELEASE), iterations=100,
                                              groups=16, group_size=8)),
    "ablation": (ablation, dict(tasks="sokoban", values=",".join(ABLATION))),
    "stress": (stress, dict(tasks="sokoban", values=",".join(STRESS))),
    "collapse-frozenlake": (collapse_design, dict(tasks="frozenlake", values="none,top_p_linear,random_k",
                                                  iterations=200, groups=16, group_size=8)),
    "collapse-sokoban": (collapse_design, dict(tasks="sokoban", iterations=150,
                                               values="none,top_p_linear,top_p_softmax,random_k")),
    "collapse-slip": (collapse_design, dict(tasks="frozenlake", values="none,top_p_with_zero,random_k_with_zero",
                                            iterations=80, seeds=4)),
}
# the probe of a checkpoint (run_sokoban_ppo_filter_grad_analysis_probe_ckpt.sh): KL and entropy both on
PROBE = {"beta": 0.001, "kl_loss_type": "low_var_kl", "entropy_coef": 0.001}
COLUMNS = ["seed", "val_success", "val_start_success", "val_lift", "val_random_success", "train_success",
           "retrieval_acc", "retrieval_chance", "mi_zscore_ema", "token_entropy", "kept_ratio", "wall_s"]
PANELS = (("val_success", "held-out success (greedy)"), ("retrieval_acc", "Retrieval-Acc"),
          ("token_entropy", "token entropy (nats)"), ("kept_ratio", "kept share of groups"))


def listed(choices=None):
    """An argparse type: a comma-separated list, each item one of ``choices`` (None: any)."""
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if choices is not None and t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list"
                                             + (f" of {', '.join(choices)}" if choices else ""))
        return items
    parse.__name__ = "list"
    return parse


def parse_args(argv=None):
    p = findings.parser(__doc__)
    p.add_argument("experiment", choices=sorted(EXPERIMENTS))
    p.add_argument("--tasks", type=listed(ragen_tasks()), default=None,
                   help="RAGEN's task names (default: the experiment's; the sweeps take the first)")
    p.add_argument("--algos", type=listed(ALGORITHMS), default=None, help="main table, gradient analysis")
    p.add_argument("--filters", type=listed(("filter", "nofilter", *WEBSHOP_RELEASE)), default=None,
                   help="main table, slip sweep, diff-model, diff-size, webshop-small (filter, nofilter); "
                        f"webshop-release ({', '.join(WEBSHOP_RELEASE)})")
    p.add_argument("--models", type=listed(), default=None,
                   help="diff-model, diff-size, search-benchmark: each cell's model, by RAGEN's short names "
                        "(Qwen2.5-7B: Qwen/Qwen2.5-7B; Llama-3.2-3B-Instruct: meta-llama's), hub ids or folders")
    p.add_argument("--combos", type=listed(WEBSHOP_COMBOS), default=None, help="webshop-small: its (model, "
                   "algorithm) combos, " + ", ".join(f"{k}: {m} {a}" for k, (m, a) in WEBSHOP_COMBOS.items()))
    p.add_argument("--filter-strategy", choices=[s for s in STRATEGIES if s != "none"], default="top_p",
                   help="search benchmark: the filter's strategy, at each --values (RAGEN's --filter-value)")
    p.add_argument("--values", type=listed(), default=None, help="the swept values (default: RAGEN's)")
    p.add_argument("--include-zero", action=argparse.BooleanOptionalAction, default=True,
                   help="KL and entropy sweeps: zero-variance groups kept (RAGEN's default) or dropped")
    # RAGEN's sweep scripts keep verl's plain estimate (k1), whose loss has zero expected gradient: it adds
    # noise, not a pull toward the reference; low_var_kl (k3) is the penalty the paper's argument is about
    p.add_argument("--kl-loss-type", choices=KL_TYPES, default="kl",
                   help="top-p and KL sweeps: the KL estimator (default: RAGEN's scripts' kl, k1)")
    p.add_argument("--probe-every", type=int, default=50, help="gradient analysis: the probe's iterations, "
                   "1, 1 + this, ... (RAGEN's gradient_analysis_every)")
    p.add_argument("--probe-whole", action="store_true", help="gradient analysis: probe every group of the "
                   "probe's batch, zero-variance ones too, not only those the filter keeps (RAGEN's)")
    p.add_argument("--checkpoint-step", type=int, default=None,
                   help="gradient analysis: the checkpoint probed after training (default: the final one)")
    args = p.parse_args(argv)
    defaults = EXPERIMENTS[args.experiment][1]
    for key in ("tasks", "algos", "filters", "values"):
        if getattr(args, key) is None and key in defaults:
            setattr(args, key, listed()(defaults[key]))
    if "filters" in defaults and not set(args.filters) <= set(listed()(defaults["filters"])):
        raise SystemExit(f"{args.experiment} --filters: each one of {defaults['filters']}")
    args.models = cell_models(args, defaults)
    return args


# the experiments that compare models: they train those named (--models, webshop-small's --combos) or the one
# --model, and ask for them rather than run the organism, which is one model
COMPARES_MODELS = ("diff-model", "diff-size", "webshop-small")


def cell_models(args, defaults: dict) -> list[str] | None:
    """Each cell's model where an experiment takes them (``--models``, RAGEN's names by ``model_path``;
    webshop-small's ``--combos``; else ``--model`` alone), in order; None where its cells share ``--model``
    (or the organism). A model comparison without any says so and stops (SystemExit)."""
    from trainers.organism import is_organism

    if args.models and args.model:
        raise SystemExit("give --models or --model, not both")
    if args.models and "models" not in defaults:
        raise SystemExit(f"{args.experiment} takes no --models (diff-model, diff-size and search-benchmark do)")
    if args.experiment not in COMPARES_MODELS and not args.models:
        return None
    if args.experiment == "webshop-small":
        if not (args.combos or args.model):
            raise SystemExit(f"webshop-small trains its combos' models at RAGEN's scale: choose them with --combos "
                             f"(RAGEN's: {defaults['combos']}) or train one model with --model")
        models = [model for model, _ in combos(args)]
    elif args.models:
        models = [model_path(m) for m in args.models]
    elif args.model:
        models = [args.model]
    else:
        raise SystemExit(f"{args.experiment} compares models at RAGEN's scale: name them with --models (RAGEN's: "
                         f"{defaults['models']}) or one with --model; the organism is one model")
    models = list(dict.fromkeys(models))
    if len({is_organism(m) for m in models}) > 1:
        raise SystemExit(f"--models: {', '.join(models)} mixes model organisms and real models, which train at "
                         "different scales")
    return models


def cells(args) -> dict[str, list]:
    """Per task: its cells ``(name, labels, scale, seed, fields)``, seeds outermost (a stopped experiment has
    whole seeds)."""
    make, defaults = EXPERIMENTS[args.experiment]
    arms = make(args)
    out = {}
    for task, _, _, _ in arms:
        s = findings.preset_scale(args, env_for_task(task), defaults.get("iterations"))
        if not args.quick:  # the experiment's own batch, where the flags leave it
            s = replace(s, **{k: defaults[k] for k in ("groups", "group_size", "seeds") if k in defaults
                              and getattr(args, k) is None})
        if "max_turns" in defaults and args.max_turns is None:  # the script's turns, at every scale
            s = replace(s, max_turns=defaults["max_turns"])
        batch = {"mini_batch_size": max(1, s.groups * s.group_size // defaults["minibatches"])} \
            if "minibatches" in defaults else {}
        out[task] = [(f"{name}-seed{seed}", {**labels, "seed": seed}, s, seed, {**fields, **batch})
                     for seed in range(s.seeds) for t, name, labels, fields in arms if t == task]
    return out


def probe(args, folder, model: str, env: str, cell, config) -> None:
    """RAGEN's checkpoint probe of a finished training cell: its ``--checkpoint-step`` (default: final)
    checkpoint probed once with KL and entropy on, into the run's gradient_probe.jsonl; skipped when there."""
    from dataclasses import replace

    from trainers import Trainer
    from trainers.checkpoint import all_checkpoints
    from trainers.metrics import PROBE_FILE, read_metrics

    run = folder / cell[0] / "run"
    step = args.checkpoint_step or config.num_iterations
    path = run / f"checkpoint-{step}"
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint (saved: {[p.name for p in all_checkpoints(run)]})")
    if any(r.get("iteration") == step + 1 for r in read_metrics(run, PROBE_FILE)):
        return
    probe_config = replace(config, output_dir=str(run), resume_from_checkpoint=str(path), overwrite_output_dir=False,
                           exit_after_gradient_analysis=True, allow_config_changes=True, **PROBE)
    Trainer(model, env, probe_config, device=args.device).train()


PROBES = "probes.jsonl"  # a cell's probe rows beside its result.json: the run folder is not committed


def keep_probes(cell_folder) -> None:
    """The run's probe rows (the trained iterations' and the checkpoint's), copied beside result.json."""
    from trainers.metrics import probe_records

    rows = probe_records(cell_folder / "run")
    (cell_folder / PROBES).write_text("".join(json.dumps(r) + "\n" for r in rows))


def gradient_trends(out, folder, task: str, task_cells) -> dict:
    """Finding 4's numbers over the seeds: per probe (by iteration; the checkpoint probe, KL and entropy on,
    is the last) and loss term, each bucket's mean norm, and the rank correlation of the norm with the bucket
    (1: lowest reward std) over seeds as ``findings.rank_correlation`` sums it up (a Fisher z interval inside
    [-1, 1], or how many seeds agree); to <task>-gradient-trends.json and .png."""
    from trainers.metrics import probe_buckets, pyplot, read_metrics

    by_probe: dict[int, dict[str, list]] = {}  # iteration -> term or "reward_std" -> per seed, norms by bucket
    for cell in task_cells:
        for r in read_metrics(folder / cell[0], PROBES):
            buckets = probe_buckets(r)
            for term in ("task", "entropy", "kl", "reward_std_mean"):
                if buckets and f"grad_norm/bucket_1/{term}" in r:
                    by_probe.setdefault(r["iteration"], {}).setdefault(term, []).append(
                        [r[f"grad_norm/bucket_{b}/{term}"] for b in buckets])
    result = {}
    for iteration, terms in sorted(by_probe.items()):
        result[str(iteration)] = {}
        for term, seeds in terms.items():
            width = min(len(norms) for norms in seeds)
            rhos = [findings.spearman(np.arange(width), norms[:width]) for norms in seeds]
            summary = findings.rank_correlation(rhos, width)  # an interval inside [-1, 1], or the seeds' count
            result[str(iteration)][term] = {"bucket_means": np.mean([n[:width] for n in seeds], axis=0).tolist(),
                                            "spearman": rhos, "spearman_mean": summary["rho"],
                                            "interval": [summary["low"], summary["high"]],
                                            "reading": findings.rank_correlation_text(summary)}
    if not result:
        raise ValueError(f"{folder}: no gradient probe in the {PROBES} of {[cell[0] for cell in task_cells]}")
    (out / f"{task}-gradient-trends.json").write_text(json.dumps(result, indent=2) + "\n")
    plt = pyplot()
    terms = [t for t in ("task", "entropy", "kl", "reward_std_mean") if any(t in v for v in result.values())]
    fig, axes = plt.subplots(1, len(terms), figsize=(3.8 * len(terms), 3.4), squeeze=False)
    for ax, term in zip(axes[0], terms):
        for iteration, values in result.items():
            if term in values:
                means = values[term]["bucket_means"]
                rho = "" if term == "reward_std_mean" else f" (rank corr. {values[term]['spearman_mean']:+.2f})"
                ax.plot(range(1, len(means) + 1), means, marker="o", label=f"iteration {iteration}{rho}")
        ax.set_title("reward std (bucket mean)" if term == "reward_std_mean" else f"{term} gradient norm",
                     fontsize=10)
        ax.set_xlabel("bucket (1: lowest reward std)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"gradient norm by reward-std bucket, mean of {len(task_cells)} seed(s)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{task}-gradient-trends.png", dpi=100)
    plt.close(fig)
    return result


# per experiment that has one: its setting (a label of its rows) and the arm the others are paired with;
# the figures compared (the paper's ablation reports success, MI and entropy)
REFERENCE = {"ablation": ("filter", "none"), "stress": ("filter", "largest"), "top-p-sweep": ("top_p", "nofilter"),
             "kl-sweep": ("kl", "0"), "entropy-sweep": ("entropy", "0"),
             **{name: ("filter", "none") for name in DESIGNS}}
CONTRASTED = ("val_success", "retrieval_acc", "mi_est", "token_entropy")


def rank(arm: str) -> float | None:
    """An arm's place on its setting's scale, for the trend: a quartile's number (q1 = 1, the highest
    reward std) or a sweep's value; None for an arm off the scale (no filter, the prompt-level filter)."""
    try:
        return float(arm[1:]) if arm[:1] == "q" else float(arm)
    except ValueError:
        return None


def contrasts(rows: list[dict], key: str, reference: str) -> dict:
    """Per arm (the rows' ``key``) and figure: its mean with a t interval over seeds, and its difference from
    the ``reference`` arm paired by seed (both arms of a seed start alike and play the same held-out
    episodes); with three or more arms on a scale (``rank``), each seed's rank correlation of the figure
    with it ("trend", over the seeds that have every such arm), summed up by ``findings.rank_correlation``."""
    by = {(str(r[key]), r["seed"]): r for r in rows}
    arms = list(dict.fromkeys(str(r[key]) for r in rows))
    out = {}
    for arm in arms:
        seeds = sorted(seed for a, seed in by if a == arm)
        out[arm] = {}
        for figure in CONTRASTED:
            own = [by[arm, seed][figure] for seed in seeds]
            paired = [by[arm, seed][figure] - by[reference, seed][figure] for seed in seeds
                      if (reference, seed) in by]
            out[arm][figure] = {"mean": findings.t_interval(own), f"minus_{reference}": findings.t_interval(paired),
                                "seeds": len(own), "paired_seeds": len(paired)}
    scale = sorted((a for a in arms if rank(a) is not None), key=rank)
    if len(scale) > 2:
        seeds = sorted({seed for a, seed in by if a in scale})
        whole = [seed for seed in seeds if all((a, seed) in by for a in scale)]
        out["trend"] = {"arms": scale, **{figure: findings.rank_correlation(
            [findings.spearman([rank(a) for a in scale], [by[a, seed][figure] for a in scale]) for seed in whole],
            len(scale)) for figure in CONTRASTED}}
    return out


def contrasts_text(result: dict, reference: str) -> str:
    """``contrasts``' figures, a line per arm: each figure's mean, then minus the reference's [interval]."""
    lines = [f"arm: {', '.join(CONTRASTED)} (mean; minus {reference}, paired by seed [95 % t interval])"]
    for arm, figures in result.items():
        if arm == "trend":
            lines.append(f"rank corr. with {', '.join(figures['arms'])}: " + "; ".join(
                f"{figure} {findings.rank_correlation_text(figures[figure])}" for figure in CONTRASTED))
            continue
        lines.append(f"{arm}: " + "; ".join(
            f"{figure} {f['mean'][0]:.3f} ({f[f'minus_{reference}'][0]:+.3f} [{f[f'minus_{reference}'][1]:+.3f}, "
            f"{f[f'minus_{reference}'][2]:+.3f}])" for figure, f in figures.items()))
    return "\n".join(lines)


def collapse_summary(rows: list[dict], reference: str = "none") -> dict:
    """Per arm of a collapse design: each seed's iteration of template collapse (``findings.collapse_iteration``;
    None: not by its last iteration, censored there), how many seeds collapsed, the same for the input
    dependence lost whatever the entropy did (``input_loss_iteration``; cells run before it existed have none),
    and its held-out success minus the ``reference`` arm's on the same boards (``findings.paired_bootstrap``
    over seeds and boards)."""
    by_arm: dict[str, list[dict]] = {}
    for row in rows:
        by_arm.setdefault(str(row["filter"]), []).append(row)
    wins = {arm: {r["seed"]: r["val_wins"] for r in arm_rows if r.get("val_wins")} for arm, arm_rows in by_arm.items()}
    out = {}
    for arm, arm_rows in by_arm.items():
        times = {r["seed"]: r.get("collapse_iteration") for r in sorted(arm_rows, key=lambda r: r["seed"])}
        lost = {r["seed"]: r.get("input_loss_iteration") for r in sorted(arm_rows, key=lambda r: r["seed"])}
        out[arm] = {"collapse_iteration": times, "collapsed": sum(t is not None for t in times.values()),
                    "input_loss_iteration": lost, "lost_input": sum(t is not None for t in lost.values()),
                    "seeds": len(times), "censored_at": max((r.get("last_iteration") or 0) for r in arm_rows),
                    f"val_success_minus_{reference}": findings.paired_bootstrap(wins[arm], wins.get(reference, {}))}
    return out


def collapse_text(summary: dict, reference: str = "none") -> str:
    """``collapse_summary`` a line per arm."""
    lines = []
    for arm, a in summary.items():
        times, lost = (", ".join(f"seed {k}: {'-' if t is None else t}" for k, t in a[key].items())
                       for key in ("collapse_iteration", "input_loss_iteration"))
        mean, low, high = a[f"val_success_minus_{reference}"]
        lines.append(f"{arm}: collapsed in {a['collapsed']} of {a['seeds']} seeds ({times}; '-': not by iteration "
                     f"{a['censored_at']}); lost its input dependence in {a['lost_input']} ({lost}); held-out "
                     f"success minus {reference} {mean:+.3f} [{low:+.3f}, {high:+.3f}] (bootstrap over seeds and "
                     "boards)")
    return "\n".join(lines)


def plot(out, rows: list[dict], labels: list[str], title: str) -> None:
    """Each panel's mean over seeds per setting (its ``labels``, named by those that differ), in the table's
    order, each seed's value as a small dot beside it and, from three seeds, the t interval as error bars
    (with two, t = 12.7 makes the bars dwarf the panel); the untrained start beside the held-out success."""
    from trainers.metrics import pyplot

    plt = pyplot()
    shown = findings.telling(rows, labels)
    name = lambda row: "\n".join(str(row[k]) for k in shown)  # noqa: E731
    names = list(dict.fromkeys(map(name, rows)))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 4.2))
    for ax, (key, heading) in zip(axes, PANELS):
        series = [(key, "o", None)] + ([("val_start_success", "k_", "untrained start")] if key == "val_success" else [])
        for offset, (column, style, legend) in enumerate(series):
            values = [[r.get(column, float("nan")) for r in rows if name(r) == n] for n in names]
            stats = [(m, lo, hi) if len(v) > 2 else (m, np.nan, np.nan)
                     for v, (m, lo, hi) in zip(values, map(findings.t_interval, values))]
            mean = np.array([m for m, _, _ in stats])
            spread = np.nan_to_num([[m - lo for m, lo, _ in stats], [hi - m for m, _, hi in stats]])
            x = np.arange(len(names)) + 0.15 * offset
            bars = ax.errorbar(x, mean, yerr=spread, fmt=style, capsize=3, label=legend)
            for at, seeds in zip(x, values):
                ax.plot([at + 0.06] * len(seeds), seeds, ".", color=bars[0].get_color(), alpha=0.5, markersize=4)
        ax.set_xticks(range(len(names)), names, fontsize=7, rotation=90 if len(names) > 8 else 0)
        ax.set_title(heading)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    by_task = cells(args)
    first = next(iter(by_task.values()))
    out = findings.results_folder(args, f"ragen-{args.experiment}", first[0][2])
    rows = []
    for task, task_cells in by_task.items():
        env = env_for_task(task)
        # where every cell names its own model (a model comparison), no other is needed
        model = findings.warm_model(args, env) if any("model" not in c[1] for c in task_cells) else None
        folder = out / task  # each task's own starts and cells
        folder.mkdir(exist_ok=True)
        configure = partial(findings.preset_config, args, env)  # (scale, seed, fields) -> TrainerConfig
        rows += [{"task": task, **row} for row in findings.run_cells(args, folder, model, task_cells, env, configure)]
        if args.experiment == "gradient-analysis":
            from trainers.metrics import plot_gradients

            for cell in task_cells if not args.finished_only else []:
                probe(args, folder, model, env, cell, configure(cell[2], cell[3], dict(cell[4])))
                keep_probes(folder / cell[0])
                print(plot_gradients(folder / cell[0] / "run", out=out / f"{task}-{cell[0]}-gradients.png"))
            probed = [cell for cell in task_cells if (folder / cell[0] / PROBES).is_file()]
            if probed:  # --finished-only: from the committed rows, the run folders may be gone
                gradient_trends(out, folder, task, probed)
    labels = [k for k in dict.fromkeys(k for t in by_task.values() for c in t for k in c[1]) if k != "seed"]
    labels = (["task"] if len(by_task) > 1 and "task" not in labels else []) + labels
    title = f"RAGEN's {args.experiment} ({findings.preset_name(args)} scale; means over the later iterations)"
    findings.write_table(out, rows, (["task"] if "task" not in labels else []) + labels + COLUMNS, title)
    if rows:
        plot(out / f"{args.experiment}.png", rows, labels, title)
    # over iterations: every cell that has trained, a stopped one too (its line ends where it stopped)
    runs = [({"task": task, **cell[1]} if len(by_task) > 1 else cell[1], findings.metrics_file(out / task, cell[0]))
            for task, task_cells in by_task.items() for cell in task_cells]
    findings.curves(out, [run for run in runs if run[1].is_file()], f"RAGEN's {args.experiment} over iterations")
    key, reference = REFERENCE.get(args.experiment, (None, None))
    if key and rows:  # without the reference arm among them, the trend still stands
        result = contrasts(rows, key, reference)
        (out / "contrasts.json").write_text(json.dumps(result, indent=2) + "\n")
        print(contrasts_text(result, reference))
    if args.experiment in DESIGNS and rows:
        summary = collapse_summary(rows)
        (out / "collapse.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(collapse_text(summary))
    settings = {f"{task}/{c[0]}": c[4] for task, t in by_task.items() for c in t}  # each cell's trainer fields
    (out / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
