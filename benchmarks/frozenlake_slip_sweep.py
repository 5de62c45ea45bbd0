"""FrozenLake slip sweep: does SNR-aware filtering help less as the environment gets noisier?

Cells: slip in {0, 0.2, 0.5, 0.8, 1.0} x filter {none, top_p 0.9} x seeds, each a GRPO run on
``Ragen/FrozenLakeCoord-v0`` from the warm-started model. Per cell: the final held-out success
(greedy, with random valid actions' success on the same episodes), Retrieval-Acc against its chance
level, the MI z-score EMA, the conditional entropy and the mean kept ratio.

The paper's prediction: return and MI fall as slip rises, and the filter's benefit fades at 80-100 %
slip (reward variance then comes from the dice, not from the prompt).

    python benchmarks/frozenlake_slip_sweep.py --quick     # 10-27 minutes on 2 CPU cores
    python benchmarks/frozenlake_slip_sweep.py             # the full default: a few hours
Outputs (CSV, JSON, PNG, per-cell results) go to benchmarks/results/frozenlake_slip_sweep[-quick]/.
"""

from __future__ import annotations

import numpy as np

import findings

SLIPS = (0.0, 0.2, 0.5, 0.8, 1.0)
FILTERS = ("none", "top_p")
COLUMNS = ["slip", "filter", "seed", "val_success", "val_random_success", "retrieval_acc", "retrieval_chance",
           "mi_zscore_ema", "conditional_entropy", "kept_ratio", "wall_s"]


def plot(out, rows) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
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
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"FrozenLakeCoord slip sweep ({len(rows)} runs)")
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
    plot(out, rows)


if __name__ == "__main__":
    main()
