"""Which proxy tracks how good a run ends up: MI proxies against entropy and reply length.

Runs: filter {none, top_p 0.9} x entropy coefficient sweep x seeds; GRPO on
``Ragen/FrozenLakeCoord-v0`` from the warm-started model. Per run, each proxy's mean over the later
iterations (Retrieval-Acc, MI-Est in the paper's and the released code's variant, MI z-score EMA,
conditional entropy, token entropy, reply length) and the final held-out success; then, across runs,
the Spearman rank correlation of each proxy with the final success.

The paper: MI correlates about +0.39 with final performance, entropy -0.11 to -0.14. With a handful of
runs (``--quick``: 4) a rank correlation is noise; the full default's 18 runs are few as well.

    python benchmarks/collapse_diagnostics.py --quick     # 10-27 minutes on 2 CPU cores
Outputs go to benchmarks/results/collapse_diagnostics[-quick]/.
"""

from __future__ import annotations

import json

import numpy as np

import findings

FILTERS = ("none", "top_p")
PROXIES = ("retrieval_acc", "mi_est", "mi_est_code", "mi_zscore_ema", "conditional_entropy", "token_entropy",
           "reply_length")
COLUMNS = ["filter", "entropy_coef", "seed", "val_success", "val_random_success", *PROXIES]


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


def plot(out, rows, correlations) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    names = list(correlations)
    axes[0].barh(names, [correlations[n] for n in names], color=["C0" if "entropy" not in n else "C3" for n in names])
    axes[0].axvline(0, color="k", lw=0.8)
    axes[0].set_xlim(-1, 1)
    axes[0].set_title(f"Spearman with final success ({len(rows)} runs)")
    for name in FILTERS:
        mine = [r for r in rows if r["filter"] == name]
        axes[1].scatter([r["mi_zscore_ema"] for r in mine], [r["val_success"] for r in mine], label=f"filter {name}")
    axes[1].set_xlabel("MI z-score EMA (later iterations)")
    axes[1].set_ylabel("held-out success")
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
              {"filter": name, "filter_value": 0.9, "entropy_coef": coef})
             for name in FILTERS for coef in coefs for seed in range(s.seeds)]
    rows = findings.run_cells(args, out, model, cells)
    findings.write_table(out, rows, COLUMNS, "Runs (proxies: means over the later iterations)")
    correlations = {proxy: spearman([r[proxy] for r in rows], [r["val_success"] for r in rows]) for proxy in PROXIES}
    (out / "correlations.json").write_text(json.dumps(correlations, indent=2) + "\n")
    print("\nSpearman correlation with final held-out success, across runs:")
    for proxy, rho in correlations.items():
        print(f"  {proxy:22s} {rho:+.2f}")
    plot(out, rows, correlations)


if __name__ == "__main__":
    main()
