"""What SNR-aware filtering costs and saves: iteration time with and without top-p at equal P x G.

Cells: P x G splits of one batch size x filter {none, top_p 0.9} x seeds; GRPO on
``Ragen/FrozenLakeCoord-v0`` from the warm-started model, minibatches of a quarter of the batch
(RAGEN's rule: the kept sequences are padded to a multiple of the minibatch, so keeping fewer groups
means fewer optimizer steps). Both filters see the same rollouts in their first iteration (same seeds,
same model). Per cell: seconds per iteration and per phase, the share spent computing reward variance
and selecting groups (the filter phase), the MI scoring share and the kept ratio; per split, the
iteration time of top-p against no filter.

The paper: 26-41 % shorter steps with the filter, under 0.1 % of the time computing reward variance.
G = 1 (the paper's 32 x 1) cannot run here: a group of one has no reward variance to filter on, and the
trainer refuses it.

    python benchmarks/studies/filtering_cost.py --quick     # 10-27 minutes on 2 CPU cores
Outputs go to benchmarks/results/filtering_cost[-quick]/.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import findings
from trainers.metrics import pyplot

FILTERS = ("none", "top_p")
COLUMNS = ["split", "filter", "seed", "iteration_s", "rollout_s", "mi_s", "stats_s", "update_s", "filter_share",
           "mi_share", "kept_ratio", "top_p_vs_none"]


def plot(out, rows, splits) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = [f"{p}x{g}" for p, g in splits]
    bottom = {name: np.zeros(len(splits)) for name in FILTERS}
    width = 0.38
    for phase in ("rollout_s", "mi_s", "stats_s", "update_s"):
        for k, name in enumerate(FILTERS):
            values = [np.nanmean([r[phase] for r in rows if r["split"] == label and r["filter"] == name])
                      for label in labels]
            x = np.arange(len(splits)) + (k - 0.5) * width
            ax.bar(x, values, width, bottom=bottom[name], label=f"{phase[:-2]} ({name})", alpha=0.9 if k else 0.5)
            bottom[name] += np.nan_to_num(values)
    ax.set_xticks(np.arange(len(splits)), labels)
    ax.set_xlabel("P x G (left bar: no filter, right bar: top-p 0.9)")
    ax.set_ylabel("seconds per iteration")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "filtering_cost.png", dpi=110)


def main() -> None:
    p = findings.parser(__doc__)
    p.add_argument("--batch", type=int, default=None, help="P x G of every split (default: 16 quick, 32 full)")
    args = p.parse_args()
    s = findings.scale(args)
    batch = args.batch or (16 if args.quick else 32)
    splits = [(batch // g, g) for g in (2, 4, 8) if batch % g == 0 and batch // g >= 2]
    out = findings.results_folder(args, "filtering_cost")
    model = findings.warm_model(args)
    cells = [(f"{groups}x{size}-{name}-seed{seed}", {"split": f"{groups}x{size}", "filter": name},
              replace(s, groups=groups, group_size=size), seed,
              {"filter": name, "filter_value": 0.9})
             for groups, size in splits for name in FILTERS for seed in range(s.seeds)]
    rows = findings.run_cells(args, out, model, cells)
    for row in rows:
        row["filter_share"] = row["filter_s"] / row["iteration_s"]
        row["mi_share"] = row["mi_s"] / row["iteration_s"]
    for row in rows:
        if row["filter"] == "top_p":
            base = [r for r in rows
                    if r["split"] == row["split"] and r["filter"] == "none" and r["seed"] == row["seed"]]
            row["top_p_vs_none"] = row["iteration_s"] / base[0]["iteration_s"] if base else float("nan")
    findings.write_table(out, rows, COLUMNS, f"Filtering cost at P x G = {batch} (seconds are means per iteration)")
    plot(out, rows, splits)


if __name__ == "__main__":
    main()
