"""Which proxy tracks how good a run ends up: MI proxies against entropy and reply length.

Runs: filter {none, top_p 0.9, top_k 0.5 (a fixed half of the groups)} x entropy coefficient sweep x
seeds; GRPO on ``Ragen/FrozenLakeCoord-v0`` from the warm-started model. Per run, each proxy's mean over
the later iterations (Retrieval-Acc, MI-Est in the paper's and the released code's variant, MI z-score
EMA, conditional entropy, token entropy, reply length) and two outcomes: the final held-out success and the
training success of the later iterations (sampled, but over ten times the episodes, so less noisy); then,
across runs, the Spearman rank correlation of each proxy with each outcome and its 95 % bootstrap interval
(runs resampled, and the held-out maps they share where each episode's outcome is kept), how much better
MI-Est ranks the runs than entropy (the paper's claim; both correlations on the same draws), and per filter
and per entropy coefficient the mean held-out success and its lift over the untrained model on the same
episodes, with bootstrap intervals. Beside them, how far the held-out successes spread across runs, and
the binomial noise of one run's success over its episodes: that is its noise as an estimate over all maps;
runs play nearly the same maps (env seeds from 100000 + seed), so the difference between two runs is less
noisy than that (``val_wins``, each episode's outcome, lets them be compared map by map).

The paper: MI correlates about +0.39 with final performance, entropy -0.11 to -0.14. With a handful of
runs (``--quick``: 4) a rank correlation is noise; the full default's 27 runs are few as well, and
held-out success must differ across them by more than its sampling noise.

    python benchmarks/studies/collapse_diagnostics.py --quick     # 10-27 minutes on 2 CPU cores
Outputs go to benchmarks/results/collapse_diagnostics[-quick]/.
"""

from __future__ import annotations

import json

import numpy as np

import findings
from trainers.metrics import pyplot, wilson

FILTERS = {"none": None, "top_p": 0.9, "top_k": 0.5}  # filter -> filter_value
PROXIES = ("retrieval_acc", "mi_est", "mi_est_code", "mi_zscore_ema", "conditional_entropy", "token_entropy",
           "reply_length")
CONTRASTS = (("mi_est", "token_entropy"), ("mi_est", "conditional_entropy"))  # (MI proxy, entropy proxy)
OUTCOMES = {"val_success": "final held-out success", "train_success": "training success (later iterations)"}
COLUMNS = ["filter", "entropy_coef", "seed", "val_success", "val_start_success", "val_random_success", "train_success",
           *PROXIES]


MIN_RUNS = 6  # fewer runs resample into the same few sets: an interval from them would look narrower than it is


WINS = {"val_wins": "val_success", "val_start_wins": "val_start_success"}  # each episode's outcome -> success


def shared_maps(rows: list[dict], key: str = "val_wins") -> np.ndarray | None:
    """Runs x maps: each run's held-out outcome (1 won) on the maps every run played, matched by env seed;
    None where a run lacks ``key`` or no map is shared. ``val_start_wins`` (the untrained model's outcomes
    on a run's episodes) gives the same maps as ``val_wins``."""
    if not rows or any(key not in r for r in rows):
        return None
    start = max(r["val_seed"] for r in rows)
    stop = min(r["val_seed"] + len(r[key]) for r in rows)
    if stop <= start:
        return None
    return np.array([[w == "1" for w in r[key][start - r["val_seed"]:stop - r["val_seed"]]] for r in rows],
                    dtype=float)


def bootstrap(statistic, rows: list[dict], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of ``statistic(rows)`` over ``draws`` resamples of the runs (nan: too few).
    Where the runs keep each episode's outcome, every draw also resamples the maps they share (the same
    maps for every run) and takes held-out success on those, the trained runs' and their starts' alike:
    the interval then holds for success over all maps, not only the ones played."""
    if len(rows) < MIN_RUNS:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    wins = {WINS[key]: w for key in WINS if (w := shared_maps(rows, key)) is not None}
    widths = {w.shape[1] for w in wins.values()}
    if len(widths) > 1:
        raise ValueError("the runs and their starts were played on different maps")

    def draw() -> list[dict]:
        runs = rng.integers(0, len(rows), len(rows))
        if not wins:
            return [rows[i] for i in runs]
        width = next(iter(widths))
        maps = rng.integers(0, width, width)
        success = {name: w[:, maps].mean(axis=1) for name, w in wins.items()}
        return [{**rows[i], **{name: float(v[i]) for name, v in success.items()}} for i in runs]

    values = [statistic(draw()) for _ in range(draws)]
    values = [v for v in values if v == v]
    if len(values) < draws // 2:
        return float("nan"), float("nan")
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def correlation(proxy: str, outcome: str = "val_success"):
    return lambda rows: findings.spearman([r[proxy] for r in rows], [r[outcome] for r in rows])


def advantage(mi: str, entropy: str, outcome: str = "val_success"):
    """How much better ``mi`` ranks the runs than ``entropy``, each in the paper's direction (MI up, entropy
    down): rho(mi) + rho(entropy). Bootstrapped on the same draws, so the two correlations' shared noise
    cancels: the paper's claim that MI predicts better is this interval above zero."""
    return lambda rows: correlation(mi, outcome)(rows) + correlation(entropy, outcome)(rows)


def spread(rows: list[dict]) -> dict:
    """The held-out successes' standard deviation across runs, and the binomial noise of one run's success
    over its ``val_episodes`` episodes (as an estimate over all maps; see the module docstring)."""
    success = np.array([r["val_success"] for r in rows])
    episodes = np.array([r["val_episodes"] for r in rows])
    noise = float(np.sqrt(np.mean(success * (1 - success) / episodes))) if len(rows) else float("nan")
    return {"across_runs_sd": float(success.std(ddof=1)) if len(rows) > 1 else float("nan"), "sampling_sd": noise,
            "episodes": sorted(set(episodes.tolist()))}


def mean_success(rows) -> float:
    return float(np.mean([r["val_success"] for r in rows]))


def mean_lift(rows) -> float:
    """Mean held-out success gained over the untrained model on the same episodes (nan without starts)."""
    return float(np.mean([r["val_success"] - r.get("val_start_success", float("nan")) for r in rows]))


def by(rows: list[dict], key: str) -> dict:
    """Per value of the setting ``key`` (a filter, an entropy coefficient): its runs' mean held-out success
    and their mean lift over the untrained start, each with its bootstrap interval."""
    out = {}
    for value in dict.fromkeys(r[key] for r in rows):
        mine = [r for r in rows if r[key] == value]
        low, high = bootstrap(mean_success, mine)
        lift_low, lift_high = bootstrap(mean_lift, mine)
        out[str(value)] = {"success": mean_success(mine), "low": low, "high": high, "runs": len(mine),
                           "lift": mean_lift(mine), "lift_low": lift_low, "lift_high": lift_high}
    return out


def plot(out, rows, correlations) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    y = np.arange(len(PROXIES))
    for k, (outcome, label) in enumerate(OUTCOMES.items()):
        c = correlations[outcome]
        rho = np.array([c[n]["rho"] for n in PROXIES])
        span = np.array([[r - c[n]["low"], c[n]["high"] - r] for n, r in zip(PROXIES, rho)]).T
        axes[0].barh(y + 0.4 * k - 0.2, rho, height=0.4, xerr=np.nan_to_num(span), label=label,
                     error_kw={"lw": 0.8, "ecolor": "0.35", "capsize": 2})
    axes[0].set_yticks(y, PROXIES)
    axes[0].axvline(0, color="k", lw=0.8)
    axes[0].set_xlim(-1, 1)
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"Spearman correlation with success ({len(rows)} runs, 95 % bootstrap)")
    for name in FILTERS:
        mine = [r for r in rows if r["filter"] == name]
        if not mine:
            continue
        success = [r["val_success"] for r in mine]
        bounds = [wilson(r["val_success"], r["val_episodes"]) for r in mine]
        span = np.array([[p - low, high - p] for p, (low, high) in zip(success, bounds)]).T
        axes[1].errorbar([r["mi_zscore_ema"] for r in mine], success, fmt="o", capsize=2, label=f"filter {name}",
                         yerr=span)
    if all("val_start_success" in r for r in rows):
        axes[1].axhline(np.mean([r["val_start_success"] for r in rows]), color="k", ls=":", label="untrained start")
    axes[1].set_xlabel("MI z-score EMA (later iterations)")
    episodes = "/".join(str(n) for n in sorted({r["val_episodes"] for r in rows}))
    axes[1].set_ylabel(f"held-out success (95 % Wilson interval, {episodes} episodes)", fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "collapse_diagnostics.png", dpi=110)


def main() -> None:
    p = findings.parser(__doc__)
    p.add_argument("--entropy-coefs", type=float, nargs="+", default=None,
                   help="entropy bonus coefficients (default: 0.001 0.05 quick, 0 0.001 0.05 full)")
    args = p.parse_args()
    s = findings.scale(args)
    coefs = args.entropy_coefs or ([0.001, 0.05] if args.quick else [0.0, 0.001, 0.05])
    out = findings.results_folder(args, "collapse_diagnostics")
    model = findings.warm_model(args)
    cells = [(f"{name}-ent{coef}-seed{seed}", {"filter": name, "entropy_coef": coef}, s, seed,
              {"filter": name, "entropy_coef": coef, **({"filter_value": value} if value else {})})
             for seed in range(s.seeds) for name, value in FILTERS.items() for coef in coefs]
    rows = findings.run_cells(args, out, model, cells)
    findings.write_table(out, rows, COLUMNS, "Runs (proxies: means over the later iterations)")
    correlations = {outcome: {} for outcome in OUTCOMES}
    for outcome, proxy in ((o, p) for o in OUTCOMES for p in PROXIES):
        low, high = bootstrap(correlation(proxy, outcome), rows)
        correlations[outcome][proxy] = {"rho": correlation(proxy, outcome)(rows), "low": low, "high": high}
    contrasts = {outcome: {} for outcome in OUTCOMES}
    for outcome, (mi, entropy) in ((o, c) for o in OUTCOMES for c in CONTRASTS):
        low, high = bootstrap(advantage(mi, entropy, outcome), rows)
        contrasts[outcome][f"{mi} over {entropy}"] = {"rho_sum": advantage(mi, entropy, outcome)(rows),
                                                      "low": low, "high": high}
    by_setting = {key: by(rows, key) for key in ("filter", "entropy_coef")}
    noise = spread(rows)
    (out / "correlations.json").write_text(json.dumps({"spearman": correlations, "mi_over_entropy": contrasts,
                                                       **{f"by_{key}": v for key, v in by_setting.items()},
                                                       "val_success_spread": noise}, indent=2) + "\n")
    for outcome, label in OUTCOMES.items():
        print(f"\nSpearman correlation with {label}, across runs (95 % bootstrap interval):")
        for proxy, c in correlations[outcome].items():
            print(f"  {proxy:22s} {c['rho']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]")
        for name, c in contrasts[outcome].items():
            print(f"  {name}: rho sum {c['rho_sum']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]"
                  " (above 0: MI ranks better)")
    episodes = "/".join(str(n) for n in noise["episodes"])
    print(f"\nHeld-out success across runs: sd {noise['across_runs_sd']:.3f}; its sampling noise alone "
          f"({episodes} episodes a run): sd {noise['sampling_sd']:.3f}")
    for key, groups in by_setting.items():
        print(f"\nHeld-out success by {key}, mean over runs (95 % bootstrap interval):")
        for name, f in groups.items():
            print(f"  {name:8s} {f['success']:.3f} [{f['low']:.3f}, {f['high']:.3f}]  ({f['runs']} runs); over the "
                  f"untrained start on the same maps {f['lift']:+.3f} [{f['lift_low']:+.3f}, {f['lift_high']:+.3f}]")
    plot(out, rows, correlations)


if __name__ == "__main__":
    main()
