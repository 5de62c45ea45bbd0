"""What the findings scripts share: the warm-started model, cells of training runs that resume, a
held-out evaluation, and results written as CSV, JSON, a PNG and a printed table.

A cell is one training run (one setting, one seed). Its ``result.json`` is written when it is done,
so a script that is stopped and started again skips the finished cells and reruns the unfinished one.
Run again with another ``--val-episodes``, a finished cell is only evaluated again, on its final
checkpoint's weights (even with ``--finished-only``; trained again where the checkpoint is gone, but
not with ``--finished-only``).
The untrained model plays each seed's held-out episodes too (``start-seed<seed>/``), so every row has
its run's lift over its start on the same maps. A study of several models (cells whose labels name their
``model``) trains each cell on its own and keeps each model's starts apart (``start-<model>-seed<seed>/``).
Every result records the cell's seed, full config and the commit its code was loaded from (``commit()``);
``config.json`` in the results folder records the script's arguments and the commit too.

Without ``--model`` the scripts train the demo env's model organism (``trainers/organism.py``: a
0.6M-parameter decoder built on first use, about 3 minutes, then cached) at RAGEN's main-table scale
(the ``organism`` preset: 8 x 16, 5 turns, its rate, every layer trained), about 10 s an
iteration on 2 CPU cores. With ``--model`` (a larger model, on a GPU with ``--backend vllm`` for the
rollouts) they train that model at ``FULL`` (its warm start's 3 turns and 64 tokens, learning rate
1e-5, the bottom 20 layers frozen unless ``--freeze-layers`` says otherwise); raise ``--iterations``,
``--groups``, ``--group-size`` there. ``--quick`` is two iterations of two groups, enough to see the
machinery and the proxies move, not to train.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import multiprocessing
import os
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ragen_envs.registry import env_for
from trainers.config import CPU_QUICK_CHAT, CPU_QUICK_TOKENS

RESULTS = Path(__file__).resolve().parents[1] / "results"  # benchmarks/results/: what every room writes
CELL_SAVE_STEPS = 5  # a cell's checkpoint interval: a stop loses at most this many iterations of it
HELD_OUT_SEED = 100_000  # held-out env seeds start here; training seeds (from 0, or RAGEN's 10000) stay below


@functools.cache
def commit() -> str | None:
    """The commit this process's code was loaded from: ``git rev-parse HEAD``, with ``+dirty`` where tracked
    files differ from it (results and other untracked files do not count); None outside a git checkout.
    Read once, at import (below), so a sweep whose cells are committed as they finish keeps its own."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return None
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if changed.returncode != 0 or changed.stdout.strip() else "")


commit()


# The warm start every script starts from: `make demo`'s (SFTConfig's defaults on the demo env, in the
# user cache), made on first use and then reused.
WARM_ENV = env_for("demo")


@dataclass
class Scale:
    iterations: int  # training iterations per cell
    groups: int  # P
    group_size: int  # G
    max_turns: int
    max_new_tokens: int
    val_episodes: int  # held-out episodes per cell, played greedily after training
    seeds: int  # seeds per setting


# turns and reply budget: the cpu-quick preset's, which the warm start was made with
TURNS, TOKENS = CPU_QUICK_CHAT["max_turns"], CPU_QUICK_TOKENS
QUICK = Scale(iterations=2, groups=2, group_size=4, max_turns=TURNS, max_new_tokens=TOKENS, val_episodes=8, seeds=1)
FULL = Scale(iterations=40, groups=4, group_size=8, max_turns=TURNS, max_new_tokens=TOKENS, val_episodes=32, seeds=3)
# an organism study plays this many held-out episodes per cell (about +-0.03 at p = 0.3), over this many seeds;
# the rest of its scale is the organism preset's (preset_scale)
ORGANISM_EPISODES, ORGANISM_SEEDS = 256, 3


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 iterations of 2 x 4 per cell, 1 seed")
    p.add_argument("--out", default=None, help="results folder (default: benchmarks/results/<script>[-quick])")
    p.add_argument("--model", default=None,
                   help="model to train (default: the demo env's model organism, built on first use)")
    p.add_argument("--backend", choices=("transformers", "vllm"), default="transformers",
                   help="rollout backend (vllm: the trainer trains with transformers and syncs weights)")
    p.add_argument("--device", default=None, help="training device (default: cuda when available)")
    for field in ("iterations", "groups", "group_size", "max_turns", "max_new_tokens", "val_episodes", "seeds"):
        p.add_argument(f"--{field.replace('_', '-')}", type=int, default=None, help=f"override the scale's {field}")
    p.add_argument("--freeze-layers", type=int, default=None,
                   help="bottom layers kept frozen (a CPU speed option; default: 20 with --model, else 0)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="default: 1e-5 with --model, else the organism preset's")
    p.add_argument("--finished-only", action="store_true",
                   help="train nothing: summarise the cells already finished (a sweep stopped part way); "
                        "those with a final checkpoint play --val-episodes where their result has another number")
    p.add_argument("--reuse", action="append", default=[], metavar="FOLDER",
                   help="another study's folder of finished cells (e.g. benchmarks/results/ragen-kl-sweep/sokoban): "
                        "a cell or start here with the same model, training config, seed and held-out episodes as "
                        "one there is copied from it, not trained (its copied_from says which); repeatable")
    p.add_argument("--workers", type=int, default=1,
                   help="cells trained at once, each in its own process on its share of the CPU cores")
    return p


def scale(args) -> Scale:
    """The scale of a study on the demo env: the organism preset's, or with a real ``--model`` QUICK / FULL."""
    if not real_model(args):
        return preset_scale(args, WARM_ENV)
    base = QUICK if args.quick else FULL
    return replace(base, **{k: getattr(args, k) for k in asdict(base) if getattr(args, k) is not None})


def training(args) -> dict:
    """The learning rate and frozen layers of the runs (``--learning-rate``, ``--freeze-layers``, else the
    model's defaults: see the module docstring)."""
    from trainers.config import ORGANISM_RL

    base = {"learning_rate": 1e-5, "freeze_layers": 20} if real_model(args) else \
        {k: ORGANISM_RL[k] for k in ("learning_rate", "freeze_layers")}
    given = {"learning_rate": args.learning_rate, "freeze_layers": args.freeze_layers}
    return {**base, **{k: v for k, v in given.items() if v is not None}}


def results_folder(args, script: str, s: Scale | None = None) -> Path:
    """The results folder, with ``config.json``: the script's arguments and scale (``s``, else ``scale(args)``)."""
    out = Path(args.out or RESULTS / (script + ("-quick" if args.quick else "")))
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.json"
    if not (getattr(args, "finished_only", False) and config.is_file()):  # a summary keeps the sweep's own record
        record = {"script": script, **vars(args), "scale": asdict(s or scale(args)), "commit": commit()}
        config.write_text(json.dumps(record, indent=2) + "\n")
    return out


def models(args) -> list:
    """The study's models: ``args.models`` where its cells each name their own (a study of several models,
    all real or all organisms), else ``[--model]`` (None: the env's organism)."""
    return list(getattr(args, "models", None) or [args.model])


def real_model(args) -> bool:
    """Whether ``--model`` (or the first of ``args.models``) names a real model; a model organism (``ragen sft
    --from-scratch``'s folder) runs at the organism's scale, as the default one does."""
    from trainers.organism import is_organism

    model = models(args)[0]
    return bool(model) and not is_organism(model)


def model_slug(model: str) -> str:
    """A model as a folder name part: its "/" as "__" (RAGEN's run names), leading "_" and "." dropped."""
    return model.replace("/", "__").lstrip("_.")


def preset_name(args) -> str:
    """The preset a RAGEN experiment runs at: RAGEN's own for a real ``--model``, else the organism's."""
    return "ragen2-main" if real_model(args) else "organism"


def preset_scale(args, env: str, iterations: int | None = None) -> Scale:
    """``preset_name(args)``'s scale for ``env`` (its P x G, turns and reply budget; ``iterations``, else its
    own): with ``--model`` one seed, as RAGEN runs, played on RAGEN's 512 validation episodes; for the
    organism ORGANISM_SEEDS and ORGANISM_EPISODES. ``--quick``: two iterations of 2 x 4. The scale flags go over it."""
    from trainers import TrainerConfig

    c = TrainerConfig.from_preset(preset_name(args), env)
    base = Scale(iterations=iterations or c.num_iterations, groups=c.rollout.n_groups,
                 group_size=c.rollout.group_size, max_turns=c.rollout.chat.max_turns,
                 max_new_tokens=c.rollout.sampling.max_new_tokens,
                 val_episodes=c.eval_episodes if real_model(args) else ORGANISM_EPISODES,
                 seeds=1 if real_model(args) else ORGANISM_SEEDS)
    if args.quick:
        base = replace(base, iterations=2, groups=2, group_size=4, val_episodes=8, seeds=1)
    return replace(base, **{k: getattr(args, k) for k in asdict(base) if getattr(args, k, None) is not None})


def preset_config(args, env: str, s: Scale, seed: int, fields: dict):
    """``preset_name(args)``'s TrainerConfig for ``env`` at scale ``s``, training seed the preset's + ``seed``,
    saved as a cell is (every CELL_SAVE_STEPS, the newest kept), with ``--learning-rate`` and
    ``--freeze-layers`` where given, then ``fields`` (``env_kwargs`` in the flat form, over the preset's).
    Minibatches stay a quarter of the batch (RAGEN's rule); the trainer validates only at RAGEN's scale."""
    from ragen_envs.agent.rollout import env_kwargs_by_id
    from trainers import TrainerConfig

    fields = dict(fields)
    base = TrainerConfig.from_preset(preset_name(args), env)
    r = base.rollout
    kwargs = {**env_kwargs_by_id({env: 1}, r.env_kwargs).get(env, {}), **fields.pop("env_kwargs", {})}
    rollout = replace(r, n_groups=s.groups, group_size=s.group_size, seed=r.seed + seed, env_kwargs=kwargs,
                      chat=replace(r.chat, max_turns=s.max_turns),
                      sampling=replace(r.sampling, max_new_tokens=s.max_new_tokens))
    same_batch = (s.groups, s.group_size) == (r.n_groups, r.group_size)
    given = {k: v for k, v in (("learning_rate", args.learning_rate), ("freeze_layers", args.freeze_layers))
             if v is not None}
    cell = dict(num_iterations=s.iterations, overwrite_output_dir=True,
                mini_batch_size=base.mini_batch_size if same_batch else max(1, s.groups * s.group_size // 4),
                eval_steps=base.eval_steps if real_model(args) and not args.quick else 0,
                save_steps=CELL_SAVE_STEPS, save_total_limit=1, save_rollouts_steps=0, logging_steps=0, plot=False)
    # made again from the preset, not replaced in ``base``: another algorithm gets its own defaults
    return TrainerConfig.from_preset(preset_name(args), env, **{**cell, **given, **fields, "rollout": asdict(rollout)})


def warm_model(args, env: str = WARM_ENV) -> str:
    """``--model``, else ``env``'s organism (built on first use, about 3 minutes on 2 cores for the demo env,
    then cached)."""
    if args.model:
        return args.model
    from trainers.organism import default_organism

    return default_organism([env])


def organism_parser(description: str) -> argparse.ArgumentParser:
    """The flags every organism study shares (``organism_learning.py``, ``template_collapse.py``)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--learning-rate", type=float, default=None, help="default: the organism preset's")
    p.add_argument("--model", default=None, help="default: the demo env's organism (built on first use)")
    p.add_argument("--out", default=None, help="results folder (default: benchmarks/results/<script>)")
    return p


def organism_setup(args, script: str) -> tuple[str, str, Path]:
    """An organism study's env (the demo env), model (``--model`` or the organism) and results folder."""
    out = Path(args.out or RESULTS / script)
    out.mkdir(parents=True, exist_ok=True)
    return WARM_ENV, warm_model(args), out


def organism_config(args, env: str, out: Path, **fields):
    """The organism preset's TrainerConfig for a study's run into ``out/runs``: metrics only (no validation
    unless ``fields`` ask for it), with ``--iterations`` and ``--learning-rate`` (when given) over the
    preset's, and ``fields`` over all of these."""
    from trainers import TrainerConfig

    fields = {"eval_steps": 0, "output_dir": str(out / "runs"), "overwrite_output_dir": True, "save_strategy": "no",
              "save_rollouts_steps": 0, "plot": False, "logging_steps": 0,
              **({"learning_rate": args.learning_rate} if args.learning_rate else {}), **fields}
    return TrainerConfig.from_preset("organism", env, num_iterations=args.iterations, **fields)


def warm_start_model() -> str:
    """The embedded SmolLM2-135M warm-started on the demo env (``make demo-smollm2``'s; made on first use,
    about 3 minutes on 2 cores, then cached)."""
    from trainers.config import SFTConfig
    from trainers.sft import warm_start, warm_start_dir

    out = warm_start_dir(WARM_ENV)
    warm_start(None, [WARM_ENV], SFTConfig(output_dir=str(out)))
    return str(out)


def trainer_config(s: Scale, seed: int, train: dict, **fields):
    """A TrainerConfig at scale ``s``: metrics, and the newest checkpoint to resume from; MI proxies every
    iteration; RAGEN's minibatch rule (the kept sequences padded with copies to a multiple of a quarter of
    the batch)."""
    from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
    from trainers import TrainerConfig

    rollout = RolloutConfig(n_groups=s.groups, group_size=s.group_size, seed=seed,
                            env_kwargs=fields.pop("env_kwargs", {}), chat=ChatEnvConfig(max_turns=s.max_turns),
                            sampling=SamplingConfig(max_new_tokens=s.max_new_tokens, temperature=1.0))
    # RAGEN's ratio of batch to minibatch (128 sequences, minibatches of 32): four optimizer steps an iteration
    base = dict(algorithm="grpo", num_iterations=s.iterations, mini_batch_size=max(1, s.groups * s.group_size // 4),
                mi_every=1, save_steps=CELL_SAVE_STEPS, save_total_limit=1, save_rollouts_steps=0, logging_steps=0,
                plot=False, overwrite_output_dir=True, rollout=rollout, **train)
    return TrainerConfig(**{**base, **fields})


def evaluate(policy, env: str, env_kwargs: dict, s: Scale, seed: int, chat=None) -> dict:
    """Greedy success on ``s.val_episodes`` held-out episodes (env seeds from ``val_seed`` = HELD_OUT_SEED +
    seed), with the success of random valid actions on the same episodes beside it, and each episode's
    outcome (``val_wins``, "1" won, "0" lost, by env seed): runs evaluated on the same maps compare map by map.
    ``chat``: the runs' ChatEnvConfig (None: the default one with ``s.max_turns``)."""
    from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
    from ragen_envs.agent.baseline import held_out_config, play_held_out, summarise_held_out

    rollout = RolloutConfig(env_kwargs=env_kwargs, chat=chat or ChatEnvConfig(max_turns=s.max_turns),
                            sampling=SamplingConfig(max_new_tokens=s.max_new_tokens))
    config = held_out_config(rollout, s.val_episodes, HELD_OUT_SEED + seed, temperature=0.0)
    rows = play_held_out(policy, env, config, seed)
    return {**{f"val_{k}": v for k, v in summarise_held_out(rows).items()}, "val_seed": config.seed,
            "val_wins": "".join("1" if won else "0" for won in rows[:, 0])}


# Student's t 0.975 quantiles for 1-10 degrees of freedom; beyond, 1.96 + 2.4/df is within 0.01 of it
T975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tied = x == value
        r[tied] = r[tied].mean()
    return r


def spearman(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.sum() < 3:
        return float("nan")
    a, b = ranks(x[keep]), ranks(y[keep])
    if a.std() == 0 or b.std() == 0:
        return float("nan")  # a constant has no rank order
    return float(np.corrcoef(a, b)[0, 1])


def t_interval(values) -> tuple[float, float, float]:
    """Mean and 95 % interval of independent runs' values (a t interval over runs: it holds the training
    noise between seeds as well as the held-out episodes' own); nan bounds for fewer than two runs."""
    values = np.asarray([v for v in values if v == v], dtype=float)
    if len(values) < 2:
        return (float(values.mean()) if len(values) else float("nan")), float("nan"), float("nan")
    df = len(values) - 1
    half = (T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean()), float(values.mean() - half), float(values.mean() + half)


def interval_text(mean: float, low: float, high: float, runs: int, digits: int = 3) -> str:
    """``+0.012 [-0.004, +0.025] over 3 seeds``; with one seed there is no interval, and it says so
    (never ``[+nan, +nan]``)."""
    if runs < 2 or low != low:
        return f"{mean:+.{digits}f} ({runs} seed: no interval)"
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}] over {runs} seeds"


# The standard error of atanh(Spearman's rho) over n pairs is about 1.06 / sqrt(n - 3) (Fieller, Hartley and
# Pearson 1957); 1 / sqrt(n - 3) is Pearson's r under bivariate normality, too narrow for ranks, which carry
# less than the values they rank.
SPEARMAN_SE = 1.06


def fisher_interval(rho: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Fisher z interval of one Spearman rank correlation over ``n`` pairs: tanh(atanh(rho) -+ z * 1.06 /
    sqrt(n - 3)), inside [-1, 1] by construction. (nan, nan) where there is none: n <= 3, or rho +-1
    (atanh infinite: say the count instead, ``rank_correlation``)."""
    if rho != rho or n <= 3 or abs(rho) >= 1:
        return float("nan"), float("nan")
    centre, half = float(np.arctanh(rho)), z * SPEARMAN_SE / np.sqrt(n - 3)
    return float(np.tanh(centre - half)), float(np.tanh(centre + half))


def rank_correlation(rhos, points: int) -> dict:
    """Rank correlations of the same two things over seeds (each seed's Spearman rho over ``points`` pairs: six
    reward-std buckets, four KL coefficients), summed up so that the interval never leaves [-1, 1]:

    - every seed of the same sign (two or more seeds), or any seed at rho +-1 (Fisher z infinite): the count,
      ``form`` "count" (``rank_correlation_text``: "+0.75 (positive in 3 of 3 seeds)");
    - otherwise a Fisher z interval, ``form`` "interval": the mean of atanh(rho) over seeds -+ the wider of the
      seeds' own t interval (their spread holds the training noise and each seed's sampling of its points) and
      the points' sampling alone, 1.96 * 1.06 / sqrt(seeds * (points - 3)) (a floor: from 2-3 seeds the spread
      can come out small by chance), back through tanh. With one seed, that seed's ``fisher_interval``.

    ``rho`` is the seeds' mean rho, the figure quoted beside the per-seed values; nan rhos (a constant) are
    dropped. Fisher's approximation is for independent pairs and grows rough below ten of them: at 4-6 points
    the interval is a guide to its width, not an exact 95 %."""
    values = np.array([r for r in rhos if r == r], dtype=float)
    k = len(values)
    out = {"rho": float(values.mean()) if k else float("nan"), "seeds": k, "points": points,
           "positive": int((values > 0).sum()), "negative": int((values < 0).sum()),
           "at_one": int((np.abs(values) >= 1).sum()), "low": float("nan"), "high": float("nan"), "form": "none"}
    if not k:
        return out
    if (k > 1 and (out["positive"] == k or out["negative"] == k)) or out["at_one"]:
        return {**out, "form": "count"}
    if k == 1:
        low, high = fisher_interval(values[0], points)
        return {**out, "low": low, "high": high, "form": "interval" if low == low else "none"}
    z = np.arctanh(values)
    spread = (T975[k - 2] if k - 1 <= len(T975) else 1.96 + 2.4 / (k - 1)) * z.std(ddof=1) / np.sqrt(k)
    floor = 1.96 * SPEARMAN_SE / np.sqrt(k * (points - 3)) if points > 3 else 0.0
    half = max(spread, floor)
    return {**out, "low": float(np.tanh(z.mean() - half)), "high": float(np.tanh(z.mean() + half)),
            "form": "interval"}


def rank_correlation_text(summary: dict, digits: int = 2) -> str:
    """``rank_correlation``'s summary in words: "+1.00 in 3 of 3 seeds", "+0.75 (positive in 3 of 3 seeds)",
    "+0.22 [-0.43, +0.73] (Fisher z, 3 seeds)", or "+0.20 (1 seed, 3 points: no interval)"."""
    rho, k = summary["rho"], summary["seeds"]
    seeds = f"{k} seed" + ("s" if k != 1 else "")
    if summary["form"] == "count":
        if summary["at_one"] == k and (summary["positive"] == k or summary["negative"] == k):
            return f"{rho:+.{digits}f} in {k} of {seeds}"
        sign = "positive" if rho >= 0 else "negative"
        return f"{rho:+.{digits}f} ({sign} in {summary[sign]} of {seeds})"
    if summary["form"] == "interval":
        return f"{rho:+.{digits}f} [{summary['low']:+.{digits}f}, {summary['high']:+.{digits}f}] (Fisher z, {seeds})"
    return f"{rho:+.{digits}f} ({seeds}, {summary['points']} points: no interval)"


# Template collapse as issue 66 pre-registers it: the 10-iteration mean Retrieval-Acc below 2x chance while the
# reasoning's entropy (token entropy and H(Z|X)) holds at 0.8x or more of its first 10 iterations' mean
COLLAPSE_WINDOW, COLLAPSE_CHANCE, COLLAPSE_HOLD = 10, 2.0, 0.8
COLLAPSE_HELD = ("policy/token_entropy", "mi/conditional_entropy")


def collapse_iteration(history: list[dict], window: int = COLLAPSE_WINDOW, held=COLLAPSE_HELD) -> int | None:
    """The first iteration at which a run's MI rows of the last ``window`` iterations show template collapse
    (``COLLAPSE_*``: mean Retrieval-Acc under 2x the mean chance, mean token entropy and mean H(Z|X) each at
    least 0.8x its mean over the run's first ``window`` iterations); None where it never does (a run censored
    at its end) or where the first window is near chance already (nothing to lose). Rows without MI
    (iterations between ``mi_every``) are skipped. ``held=()``: the input dependence lost, whatever the
    entropy did (design A's second reading: a reasoning that turns to one low-entropy template)."""
    def number(value) -> bool:
        return value is not None and value == value  # not missing, not nan

    def mean(key, rows):
        values = [r[key] for r in rows if number(r.get(key))]
        return float(np.mean(values)) if values else float("nan")

    history = [{"iteration": k, **r} for k, r in enumerate(history, start=1)]  # rows in order, where unnumbered
    scored = [r for r in history if number(r.get("mi/retrieval_acc"))]
    if not scored:
        return None
    first_end = scored[0]["iteration"] + window

    start = [r for r in scored if r["iteration"] < first_end]
    if mean("mi/retrieval_acc", start) < COLLAPSE_CHANCE * mean("mi/retrieval_chance", start):
        return None  # near chance from the start: no input dependence to lose
    held = {key: mean(key, start) for key in held}
    for row in scored:
        if row["iteration"] < first_end - 1:
            continue  # a whole window first
        last = [r for r in scored if row["iteration"] - window < r["iteration"] <= row["iteration"]]
        near_chance = mean("mi/retrieval_acc", last) < COLLAPSE_CHANCE * mean("mi/retrieval_chance", last)
        holds = all(not mean(key, last) < COLLAPSE_HOLD * base for key, base in held.items() if base == base)
        if near_chance and holds:
            return int(row["iteration"])
    return None


def paired_bootstrap(a: dict, b: dict, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95 % bootstrap interval of arm ``a``'s held-out success minus arm ``b``'s, each a dict seed ->
    ``val_wins`` (one "1"/"0" per board, the same boards for both arms of a seed): seeds drawn with
    replacement, then boards within each, both arms on the drawn boards. Seeds in only one arm are left out."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return float("nan"), float("nan"), float("nan")
    diffs = [np.array(list(a[k]), dtype=float) - np.array(list(b[k]), dtype=float) for k in seeds]
    rng = np.random.default_rng(seed)
    stats = np.empty(draws)
    for i in range(draws):
        picked = [diffs[j] for j in rng.integers(len(diffs), size=len(diffs))]
        stats[i] = np.mean([d[rng.integers(len(d), size=len(d))].mean() for d in picked])
    low, high = np.quantile(stats, [0.025, 0.975])
    return float(np.mean([d.mean() for d in diffs])), float(low), float(high)


def run_summary(history: list[dict]) -> dict:
    """A run's figures: proxies averaged over the later half of its iterations, once they have settled a
    little; the kept ratio and the phase timings over all of them."""
    def mean(key, records):
        values = [r[key] for r in records if key in r and r[key] == r[key]]
        return float(np.mean(values)) if values else float("nan")

    late = history[len(history) // 2:] or history
    out = {
        "train_success": mean("rollout/success", late),
        "retrieval_acc": mean("mi/retrieval_acc", late),
        "retrieval_chance": mean("mi/retrieval_chance", late),
        "mi_est": mean("mi/mi_est", late),
        "mi_est_code": mean("mi_code/mi_est", late),
        "mi_zscore_ema": mean("mi_code/mi_zscore_ema", late),
        "conditional_entropy": mean("mi/conditional_entropy", late),
        "token_entropy": mean("policy/token_entropy", late),
        "reply_length": mean("rollout/response_length", late),
        "kept_ratio": mean("filter/kept_ratio", history),
        "kept_trajectory_ratio": mean("filter/kept_trajectory_ratio", history),
        # issue 66's template collapse (None: not in this run, censored at its last iteration)
        "collapse_iteration": collapse_iteration(history),
        "input_loss_iteration": collapse_iteration(history, held=()),  # Retrieval-Acc near chance, entropy aside
        "last_iteration": max((r.get("iteration", k) for k, r in enumerate(history, start=1)), default=None),
    }
    for key in ("iteration", "rollout", "mi", "stats", "filter", "update"):
        out[f"{key}_s"] = mean(f"time/{key}_s", history)
    return out


# where a run writes and how it logs and saves: not what it learns


def trains_alike(stored: dict, config) -> bool:
    """Whether a stored result's ``config`` (``TrainerConfig.to_dict``; fields added since take their defaults,
    which keep the earlier behaviour) trains as ``config`` does: every field equal but those
    ``TrainerConfig.run_place`` leaves out (declared on each field: where a run writes, the KL estimator with
    beta 0, the critic's rate without a critic), the critic's rate compared as it acts."""
    from trainers import TrainerConfig

    def learns(c) -> dict:
        d = json.loads(json.dumps(c.to_dict()))  # tuples as the stored lists
        ignored = TrainerConfig.run_place(d)  # declared on each field: where it writes, and inert settings
        if "critic_learning_rate" not in ignored:  # the rate as it acts: a stored 1e-5 equals a derived one
            d["critic_learning_rate"] = c.critic_lr
        return {k: v for k, v in d.items() if k not in ignored}
    try:
        other = TrainerConfig.from_dict(stored)
    except (TypeError, ValueError):  # a field since removed or renamed, or a value no longer valid
        return False
    return learns(other) == learns(config)


def reused(args, out: Path, name: str, same, model: str | None = None) -> dict | None:
    """The first finished result in a ``--reuse`` folder for which ``same(its cell, result)`` holds, copied to
    ``out/name`` with its cell renamed and ``copied_from`` naming the original; None where none is. The
    folder's (or its study's) config.json must name one of this study's models (``models``); ``model``, a
    cell's own model, must be the one the result records (else the folder's single model) trained."""
    for folder in (Path(f).resolve() for f in getattr(args, "reuse", None) or ()):
        records = [f / "config.json" for f in (folder, folder.parent) if (f / "config.json").is_file()]
        if not records:
            raise FileNotFoundError(f"--reuse {folder}: no config.json there or in its parent to say its model")
        record = json.loads(records[0].read_text())
        trained = record.get("models") or [record.get("model")]
        if not set(trained) & set(models(args)):
            one = lambda names: names[0] if len(names) == 1 else names  # noqa: E731
            raise ValueError(f"--reuse {folder}: its cells trained {one(trained)!r}, this study trains "
                             f"{one(models(args))!r}")
        for done in sorted(folder.glob("*/result.json")):
            stored = json.loads(done.read_text())
            if model is not None and stored.get("model", trained[0] if len(trained) == 1 else None) != model:
                continue  # another model's cell
            if same(done.parent.name, stored):
                result = {**stored, **({"cell": name} if "cell" in stored else {}), "copied_from": stored.get(
                    "copied_from", f"{folder.parent.name}/{folder.name}/{done.parent.name}")}
                (out / name).mkdir(parents=True, exist_ok=True)
                (out / name / "result.json").write_text(json.dumps(result, indent=2) + "\n")
                print(f"{name}: copied from {result['copied_from']}", flush=True)
                return result
    return None


def metrics_file(out: Path, name: str) -> Path:
    """A cell's metrics.jsonl: in its run folder, or a copied cell's in the one it was copied from (its
    ``copied_from`` is under the folder both studies sit in)."""
    done = out / name / "result.json"
    source = json.loads(done.read_text()).get("copied_from") if done.is_file() else None
    return (out.parent.parent / source if source else out / name) / "run" / "metrics.jsonl"


def run_cell(out: Path, name: str, env: str, model: str, config, s: Scale, args, seed: int, own: bool = False) -> dict:
    """Train one cell and evaluate it, or read its finished result back. A finished cell evaluated on
    other than ``s.val_episodes`` held-out episodes is evaluated again from its final checkpoint (trained
    again where that is gone); its earlier result is kept beside, as ``result-<episodes>-episodes.json``.
    ``own``: ``model`` is the cell's own (a study of several models): its result records it, and a ``--reuse``
    copy must have trained it."""
    from ragen_envs.agent.backends import PolicyConfig
    from trainers import Trainer
    from trainers.checkpoint import all_checkpoints
    from trainers.metrics import read_metrics

    done, run = out / name / "result.json", out / name / "run"
    if done.is_file():
        stored = json.loads(done.read_text())
        if stored.get("val_episodes") == s.val_episodes:
            return stored
        final = run / f"checkpoint-{config.num_iterations}"
        trained = final in all_checkpoints(run)
        if not trained and getattr(args, "finished_only", False):
            return stored
        done.rename(done.with_name(f"result-{stored.get('val_episodes', 'unknown')}-episodes.json"))
        if trained:
            policy = PolicyConfig(args.backend, str(final), device=args.device).make()
            result = {**stored, **evaluate(policy, env, config.rollout.env_kwargs, s, seed, chat=config.rollout.chat)}
            done.write_text(json.dumps(result, indent=2) + "\n")
            return result
    copy = reused(args, out, name, lambda _, stored: stored.get("seed") == seed and "config" in stored
                  and stored.get("val_episodes") == s.val_episodes and trains_alike(stored["config"], config),
                  model if own else None)
    if copy:
        return copy
    rollout_policy = PolicyConfig("vllm", model).make() if args.backend == "vllm" else None
    # A cell stopped midway goes on from its last checkpoint (every CELL_SAVE_STEPS iterations), with the
    # metrics it would have had uninterrupted; its summary reads them all from the run folder.
    resume = bool(all_checkpoints(run))
    config = replace(config, output_dir=str(run), resume_from_checkpoint="latest" if resume else None,
                     overwrite_output_dir=not resume)
    start = time.perf_counter()
    trainer = Trainer(model, env, config, device=args.device, rollout_policy=rollout_policy)
    trainer.train()
    result = {"cell": name, "seed": seed, **({"model": model} if own else {}), **run_summary(read_metrics(run)),
              **evaluate(trainer.policy, env, config.rollout.env_kwargs, s, seed, chat=config.rollout.chat),
              "wall_s": time.perf_counter() - start, "resumed": resume, "config": config.to_dict(), "commit": commit()}
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


def start_result(out: Path, env: str, policy, env_kwargs: dict, s: Scale, seed: int, chat=None, args=None,
                 model: str | None = None) -> dict:
    """The untrained model on the held-out episodes the cells of ``seed`` (and ``env_kwargs``, ``chat``) play:
    what a run's lift is measured from, map by map. Kept in ``start[-<kwargs>]-seed<seed>/result.json``, copied
    from a ``--reuse`` folder's start of the same episodes, else played again where the episodes differ;
    ``policy`` is called to build the model only then. ``model``: the cells' own model (a study of several),
    whose start is its own, ``start-<model>[-<kwargs>]-seed<seed>``, and records it."""
    from ragen_envs.agent import ChatEnvConfig

    tag = (f"-{model_slug(model)}" if model else "") + "".join(f"-{k}{v}" for k, v in sorted(env_kwargs.items()))
    done = out / f"start{tag}-seed{seed}" / "result.json"
    episodes = {**({"model": model} if model else {}), "env_kwargs": env_kwargs, "val_episodes": s.val_episodes,
                "max_turns": s.max_turns, "max_new_tokens": s.max_new_tokens}
    if chat is not None and chat != ChatEnvConfig(max_turns=s.max_turns):  # recorded where not the default
        episodes["chat"] = asdict(chat)
    same = lambda stored: all(stored.get(k) == v for k, v in episodes.items())  # noqa: E731
    if done.is_file() and same(stored := json.loads(done.read_text())):
        return stored
    copy = reused(args, out, done.parent.name, lambda cell, stored: cell == done.parent.name and same(stored), model)
    if copy:
        return copy
    result = {"seed": seed, **episodes, **evaluate(policy(), env, env_kwargs, s, seed, chat=chat), "commit": commit()}
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result, indent=2) + "\n")
    return result


def with_starts(args, out: Path, model: str, cells: list, results: list[dict], env: str = WARM_ENV,
                configs: list | None = None) -> list[dict]:
    """Each result with its seed's start beside (``val_start_success``, ``val_start_wins``) and the run's lift
    over it on the same episodes (``val_lift``); ``configs``, the cells' TrainerConfigs, say their episodes'
    env arguments and chat (None: the cells' ``env_kwargs`` field and the default chat). A cell whose labels
    name its ``model`` starts from that model (its own starts), the others from ``model``."""
    from ragen_envs.agent.backends import PolicyConfig

    built: dict[str, object] = {}  # the untrained model last built, on first need: one in memory at a time

    def policy(name: str):
        if name not in built:
            built.clear()
            built[name] = PolicyConfig(args.backend, name, device=args.device).make()
        return built[name]

    rows = []
    for k, ((_, labels, s, seed, fields), result) in enumerate(zip(cells, results)):
        if result.get("val_episodes") != s.val_episodes:  # a stored result of another size (--finished-only)
            rows.append(result)  # no start played on its episodes: no lift
            continue
        rollout = configs[k].rollout if configs else None
        kwargs, chat = (rollout.env_kwargs, rollout.chat) if rollout else (fields.get("env_kwargs", {}), None)
        own = labels.get("model")
        start = start_result(out, env, functools.partial(policy, own or model), kwargs, s, seed, chat, args, own)
        rows.append({**result, "val_start_success": start["val_success"], "val_start_wins": start["val_wins"],
                     "val_lift": result["val_success"] - start["val_success"]})
    return rows


# the proxies drawn over iterations (the MI z-score as RAGEN's code computes it, as in the results tables)
CURVES = (("mi/retrieval_acc", "Retrieval-Acc (chance 1/P)"), ("mi_code/mi_zscore_ema", "MI z-score EMA"),
          ("mi/conditional_entropy", "H(Z|X) (nats/token)"), ("rollout/success", "training success"))
# in curves.csv beside CURVES, not plotted: what a study's README quotes over iterations, checkable on a clone
LOGGED = ("mi/mi_est", "policy/token_entropy", "rollout/response_length", "loss/kl", "loss/value")
SMOOTH = 5  # iterations in curves.png's moving mean: every iteration plays new maps


def telling(settings: list[dict], keys: list[str]) -> list[str]:
    """The ``keys`` whose values differ between ``settings``, to name them by (a label every one shares, as a
    sweep's KL estimator, only crowds a legend); all of them where none differ."""
    return [k for k in keys if len({str(s.get(k)) for s in settings}) > 1] or list(keys)


def curves(out: Path, runs: list[tuple[dict, Path]], title: str, style=None) -> list[str]:
    """``CURVES`` over iterations: ``runs`` pairs each run's labels (its settings and ``seed``) with its
    metrics.jsonl; a line per setting, the mean over its seeds at each iteration (then a moving mean), styled
    by ``style(settings)`` (matplotlib keywords; default the colour cycle) and named by the settings that
    differ between lines. Writes curves.csv (a row per run and iteration, ``LOGGED`` too) and curves.png, and
    returns the lines' names; nothing where a file is missing (a fresh clone has no run folders)."""
    from trainers.metrics import pyplot

    if not runs or not all(path.is_file() for _, path in runs):
        return []
    keys = [key for key, _ in CURVES] + list(LOGGED)
    table = [{**labels, "iteration": record["iteration"], **{key: record.get(key, float("nan")) for key in keys}}
             for labels, path in runs
             for record in map(json.loads, path.read_text().splitlines()) if "mi/retrieval_acc" in record]
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(17, 3.8))
    settings = list(dict.fromkeys(tuple((k, v) for k, v in labels.items() if k != "seed") for labels, _ in runs))
    shown = telling([dict(setting) for setting in settings], [k for k, _ in settings[0]])
    names = [" ".join(f"{k} {v}" for k, v in setting if k in shown) for setting in settings]
    for setting, name in zip(settings, names):
        mine = [r for r in table if all(r[k] == v for k, v in setting)]
        steps = sorted({r["iteration"] for r in mine})
        for ax, (key, _) in zip(axes, CURVES):
            means = [np.nanmean([r[key] for r in mine if r["iteration"] == i]) for i in steps]
            window = min(SMOOTH, len(means)) or 1
            ax.plot(steps[window - 1:], np.convolve(means, np.ones(window) / window, mode="valid"),
                    label=name, **(style(dict(setting)) if style else {}))
    for ax, (_, heading) in zip(axes, CURVES):
        ax.set_title(heading)
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize=7, ncol=2)
    seeds = len({labels.get("seed") for labels, _ in runs})
    over = "1 seed" if seeds == 1 else f"means over {seeds} seeds"
    fig.suptitle(f"{title} ({over} and {SMOOTH} iterations, {len(runs)} runs)")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)
    plt.close(fig)
    return names


def write_result(path: str | Path, result: dict) -> None:
    """A measurement's result as indented JSON at ``path`` (its folder made), saying where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {path}")


def write_table(out: Path, rows: list[dict], columns: list[str], title: str) -> None:
    """``results.csv``, ``results.json`` and the printed table."""
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{title}")
    print(" ".join(f"{c:>14s}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:14.3f}" if isinstance(row.get(c), float) else f"{str(row.get(c, '')):>14s}"
                       for c in columns))
    print(f"\nresults in {out}")


def run_cells(args, out: Path, model: str, cells: list[tuple[str, dict, Scale, int, dict]], env: str = WARM_ENV,
              configure=None) -> list[dict]:
    """Run (or read back) each cell ``(name, labels, scale, seed, trainer fields)`` on ``env``, with ``model``
    or the one its labels name (``model``: each cell its own); a row per cell: its labels, its result and its
    lift over the untrained model (``with_starts``). ``configure(scale, seed, fields)`` makes a cell's
    TrainerConfig (default: ``trainer_config`` with ``training(args)``).
    ``--workers`` N trains N cells at once in separate processes (a small model trains faster on one core
    each than on all cores together)."""
    if getattr(args, "finished_only", False):
        cells = [c for c in cells if (out / c[0] / "result.json").is_file()]
    configure = configure or (lambda s, seed, fields: trainer_config(s, seed, training(args), **fields))
    configs = [configure(s, seed, dict(fields)) for _, _, s, seed, fields in cells]
    # a cell whose labels name its model trains that one (a study of several models), the others ``model``
    jobs = [(f"[{i}/{len(cells)}] {name}", out, name, env, labels.get("model", model), config, s, args, seed,
             "model" in labels) for i, ((name, labels, s, seed, _), config) in enumerate(zip(cells, configs), 1)]
    workers = getattr(args, "workers", 1)
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if workers == 1:
        results = [_job(*job) for job in jobs]
    else:
        context = multiprocessing.get_context("spawn")  # torch and fork do not mix
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_share_cores,
                                 initargs=(workers,)) as pool:
            futures = [pool.submit(_job, *job) for job in jobs]
            try:
                results = [f.result() for f in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the failure is reported now, not after every other cell
                raise
    results = with_starts(args, out, model, cells, results, env, configs)
    return [{**labels, **result} for (_, labels, *_), result in zip(cells, results)]


def _job(title: str, *cell) -> dict:
    print(title, flush=True)
    return run_cell(*cell)


def _share_cores(workers: int) -> None:
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
