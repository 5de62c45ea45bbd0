"""Per-iteration metrics: JSONL and CSV in the run folder, TensorBoard when installed, a printed
table, and ``plot_run`` for ``ragen plot RUN_DIR``."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

# The columns of the printed table: (metric, header).
TABLE = [("iteration", "it"), ("rollout/success", "success"), ("rollout/return_mean", "return"),
         ("rollout/format_valid", "format"), ("policy/token_entropy", "entropy"),
         ("mi/retrieval_acc", "ret_acc"), ("mi/mi_est", "mi_est"), ("mi/conditional_entropy", "H(Z|X)"),
         ("filter/kept_ratio", "kept"), ("filter/rv_std_over_mean", "rv_cv"), ("loss/policy", "pg_loss"),
         ("time/iteration_s", "sec")]


class MetricsLogger:
    """Appends one record per iteration to ``metrics.jsonl`` (flushed and synced, so a killed run keeps
    every finished iteration) and rewrites ``metrics.csv``.

    ``keep_iterations``: on resume, records after that iteration (iterations the interrupted run
    finished after its last checkpoint, which the resumed run trains again) move to
    ``metrics.abandoned.jsonl``, so ``metrics.jsonl`` holds exactly one record per iteration and
    nothing is thrown away.
    """

    def __init__(self, output_dir: str | Path, keep_iterations: int = 0):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        records = read_metrics(self.dir)
        self.records = [r for r in records if r.get("iteration", 0) <= keep_iterations]
        abandoned = [r for r in records if r.get("iteration", 0) > keep_iterations]
        if abandoned:
            _append(self.dir / "metrics.abandoned.jsonl", abandoned)
            self._write_all()
        self._printed_header = False
        self._tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tensorboard"), purge_step=keep_iterations + 1)
        except Exception:  # tensorboard is optional
            self._tb = None

    def log(self, metrics: dict) -> None:
        self.records.append(dict(metrics))
        _append(self.jsonl, [metrics])
        self._write_csv()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "iteration":
                    self._tb.add_scalar(key, value, metrics["iteration"])
            self._tb.flush()

    def _write_all(self) -> None:
        tmp = self.jsonl.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.records))
        tmp.replace(self.jsonl)  # a crash leaves the old file or the new one, never half of one
        self._write_csv()

    def _write_csv(self) -> None:
        keys = sorted({k for r in self.records for k in r}, key=lambda k: (k != "iteration", k))
        with (self.dir / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.records)

    def table_row(self, metrics: dict) -> str:
        """The metrics table's line for this iteration, preceded by the header the first time."""
        lines = []
        if not self._printed_header:
            lines.append(" ".join(f"{h:>8s}" for _, h in TABLE))
            self._printed_header = True
        cells = []
        for key, _ in TABLE:
            value = metrics.get(key)
            cells.append(f"{'-':>8s}" if value is None else f"{value:8d}" if key == "iteration"
                         else f"{value:8.3f}")
        lines.append(" ".join(cells))
        return "\n".join(lines)


def _append(path: Path, records: list[dict]) -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}: line {number} is not JSON") from None
            # the last line of a run killed mid-write: that iteration is lost, the rest is kept
    return records


PANELS = [
    ("Task", ["rollout/success", "rollout/format_valid"]),
    ("MI proxies", ["mi/retrieval_acc", "mi/retrieval_chance", "mi/mi_est", "mi_traj/retrieval_acc"]),
    ("Entropy", ["policy/token_entropy", "mi/conditional_entropy", "mi/reasoning_entropy"]),
    ("Filter", ["filter/kept_ratio", "filter/rv_std_over_mean"]),
]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Success, MI proxies, entropy and kept ratio over iterations, to a PNG."""
    records = read_metrics(run_dir)
    if not records:
        raise FileNotFoundError(f"no metrics.jsonl with records in {run_dir}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.5 * len(PANELS), 3.6))
    x = [r["iteration"] for r in records]
    for ax, (title, keys) in zip(axes, PANELS):
        for key in keys:
            y = [r.get(key, math.nan) for r in records]
            if any(not math.isnan(v) for v in y):
                ax.plot(x, y, marker="o", label=key.split("/", 1)[1] + (" (traj)" if key.startswith("mi_traj") else ""))
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "metrics.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
