"""FrozenLake slip sweep: does SNR-aware filtering help less as the environment gets noisier?

Cells: slip in {0, 0.2, 0.5, 0.8, 1.0} x filter {none, top_p 0.9} x seeds, each a GRPO run on
``Ragen/FrozenLakeCoord-v0`` from the demo env's model organism (``--model``: another model). Per cell: the
final held-out success (greedy, with the untrained start's and random valid actions' success on the same
episodes), Retrieval-Acc against its chance level, the MI z-score EMA, the conditional entropy and the
mean kept ratio.

The paper's prediction: return and MI fall as slip rises, and the filter's benefit fades at 80-100 %
slip (reward variance then comes from the dice, not from the prompt).

    python benchmarks/studies/frozenlake_slip_sweep.py --quick     # a few minutes: 2 iterations of 2 x 4 a cell, 1 seed
    python benchmarks/studies/frozenlake_slip_sweep.py             # the organism preset, 3 seeds: many hours
Outputs (CSV, JSON, PNG, per-cell results; the proxies over iterations in curves.csv and curves.png) go
to benchmarks/results/frozenlake_slip_sweep[-quick]/.
"""

from __future__ import annotations

import json

import numpy as np

import findings
from trainers.metrics import pyplot

SLIPS = (0.0, 0.2, 0.5, 0.8, 1.0)
FILTERS = ("none", "top_p")
COLUMNS = ["slip", "filter", "seed", "val_success", "val_start_success", "val_random_success", "retrieval_acc",
           "retrieval_chance", "mi_zscore_ema", "conditional_entropy", "kept_ratio", "wall_s"]


def gains(rows) -> list[dict]:
    """Per slip, top-p's held-out success minus no filter's, paired by seed (both arms of a seed play the
    same held-out episodes), with a t interval over seeds; then the paper's contrast: the mean gain at
    slips below 0.8 minus the mean gain at 0.8 and 1.0, per seed."""
    success = {(r["slip"], r["filter"], r["seed"]): r["val_success"] for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    per_seed = {slip: {seed: success[slip, "top_p", seed] - success[slip, "none", seed] for seed in seeds
                       if (slip, "top_p", seed) in success and (slip, "none", seed) in success} for slip in SLIPS}
    out = [{"slip": slip, "seeds": len(g), **dict(zip(("gain", "low", "high"), findings.t_interval(g.values())))}
           for slip, g in per_seed.items()]
    low, high = [s for s in SLIPS if s < 0.8], [s for s in SLIPS if s >= 0.8]
    contrast = [np.mean([per_seed[s][seed] for s in low]) - np.mean([per_seed[s][seed] for s in high])
                for seed in seeds if all(seed in per_seed[s] for s in SLIPS)]
    out.append({"slip": "low - high", "seeds": len(contrast),
                **dict(zip(("gain", "low", "high"), findings.t_interval(contrast)))})
    return out


def curves(out, rows) -> None:
    """The proxies over iterations per slip and filter (means over seeds), from the cells' run folders
    (``findings.curves``): a colour per slip, solid without the filter, dashed with it."""
    runs = [({"slip": r["slip"], "filter": r["filter"], "seed": r["seed"]}, out / r["cell"] / "run" / "metrics.jsonl")
            for r in rows]
    style = lambda arm: {"color": pyplot().cm.plasma(0.85 * SLIPS.index(arm["slip"]) / (len(SLIPS) - 1)),  # noqa: E731
                         "linestyle": "-" if arm["filter"] == FILTERS[0] else "--"}
    findings.curves(out, runs, "Slip sweep over iterations, solid: no filter, dashed: top-p", style)


def plot(out, rows, gain) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    for name in FILTERS:
        mine = [r for r in rows if r["filter"] == name]
        for ax, key, label in zip(axes, ("val_success", "retrieval_acc", "mi_zscore_ema"),
                                  ("held-out success", "Retrieval-Acc", "MI z-score EMA")):
            means = [np.nanmean([r[key] for r in mine if r["slip"] == s]) for s in SLIPS]
            ax.plot(SLIPS, means, marker="o", label=f"filter {name}")
            ax.set_xlabel("slip")
            ax.set_title(label)
    chance = [np.nanmean([r["retrieval_chance"] for r in rows if r["slip"] == s]) for s in SLIPS]
    axes[1].plot(SLIPS, chance, "k--", label="chance")
    randoms = [np.nanmean([r["val_random_success"] for r in rows if r["slip"] == s]) for s in SLIPS]
    axes[0].plot(SLIPS, randoms, "k--", label="random actions")
    if all("val_start_success" in r for r in rows):
        starts = [np.mean([r["val_start_success"] for r in rows if r["slip"] == s]) for s in SLIPS]
        axes[0].plot(SLIPS, starts, "k:", label="untrained start")
    by_slip = [g for g in gain if g["slip"] in SLIPS]
    mean = np.array([g["gain"] for g in by_slip])
    spread = np.nan_to_num([[g["gain"] - g["low"] for g in by_slip], [g["high"] - g["gain"] for g in by_slip]])
    seeds = len({r["seed"] for r in rows})
    axes[3].errorbar(SLIPS, mean, yerr=spread, marker="o", capsize=3,
                     label="top-p - none (1 seed: no interval)" if seeds < 2 else
                     f"top-p - none (95 % over {seeds} seeds)")
    axes[3].axhline(0, color="k", linestyle="--", linewidth=0.8)
    axes[3].set_xlabel("slip")
    axes[3].set_title("filter gain in held-out success")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"FrozenLakeCoord slip sweep ({len(rows)} runs{', 1 seed' if seeds < 2 else ''})")
    fig.tight_layout()
    fig.savefig(out / "slip_sweep.png", dpi=110)


def main() -> None:
    args = findings.parser(__doc__).parse_args()
    s = findings.scale(args)
    out = findings.results_folder(args, "frozenlake_slip_sweep")
    model = findings.warm_model(args)
    cells = [(f"slip{slip}-{name}-seed{seed}", {"slip": slip, "filter": name}, s, seed,
              {"filter": name, "filter_value": 0.9, "env_kwargs": {"slip": slip}})
             for seed in range(s.seeds) for slip in SLIPS for name in FILTERS]  # a stopped sweep has whole seeds
    rows = findings.run_cells(args, out, model, cells)
    findings.write_table(out, rows, COLUMNS, "FrozenLakeCoord slip sweep (means over the run's later iterations)")
    gain = gains(rows)
    (out / "gains.json").write_text(json.dumps(gain, indent=2) + "\n")
    print("\nTop-p minus no filter, held-out success (95 % t interval over seeds):")
    for g in gain:
        print(f"  slip {g['slip']!s:>10}: {findings.interval_text(g['gain'], g['low'], g['high'], g['seeds'])}")
    plot(out, rows, gain)
    curves(out, rows)


if __name__ == "__main__":
    main()
