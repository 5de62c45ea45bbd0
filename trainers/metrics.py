"""Per-iteration metrics: JSONL and CSV in the run folder, TensorBoard when installed, W&B when asked
(``trainers.tracking``), a printed table, and ``plot_run`` for ``ragen plot RUN_DIR``."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ragen_envs.agent.trajectory import iteration_of, saved_iterations
from ragen_envs.diagnose.filtering import LOW_RV_RATIO
from ragen_envs.extras import install_hint
from trainers.config import PROBE_TERMS, TrainerConfig


@dataclass(frozen=True)
class Metric:
    key: str  # the name in metrics.jsonl, metrics.csv and TensorBoard
    label: str  # the printed table's column and the plot's legend (8 characters at most)
    meaning: str  # what it measures, in words
    collapse: str  # what template collapse, or its cause, looks like in it
    panel: str | None = None  # the plot panel that draws it (PANELS)
    table: bool = False  # a column of the printed table


# The metrics a user reads, explained once: docs/training.md's table, the printed table and the plot all
# come from this list. The rest (loss/*, time/*, recall_at_k, ...) are in metrics.jsonl as well.
METRICS = [
    Metric("iteration", "it", "rollout -> filter -> update cycles done, resumed ones included", "", table=True),
    Metric("rollout/success", "success", "share of episodes the env marked solved", "flat or falling while "
           "format rises: the template is learned, the task is not", "Task", True),
    Metric("rollout/random_success", "random", "success of random valid actions on the same episodes (the "
           "chance level; envs with a finite action set)", "", "Task", True),
    Metric("rollout/format_valid", "format", "share of replies with the <think>/<answer> format and a valid "
           "action", "high on its own says nothing about reasoning", "Task", True),
    Metric("rollout/actions_per_turn", "acts", "actions the env played per reply (at most "
           "max_actions_per_turn)", ""),
    Metric("val/success", "val", "share of held-out episodes solved (eval_steps: env seeds never trained on, "
           "sampled at eval_temperature)", "", "Held-out", True),
    Metric("val/random_success", "val_rand", "success of random valid actions on the same held-out episodes", "",
           "Held-out"),
    Metric("rollout/return_mean", "return", "mean episode return: env rewards plus format penalties", "",
           table=True),
    Metric("policy/token_entropy", "entropy", "mean entropy of the policy's next-token distribution over its "
           "own generated tokens (nats)", "stays healthy under template collapse: entropy cannot see it",
           "Entropy (nats/token)", True),
    Metric("mi/retrieval_acc", "ret_acc", "share of first-turn reasonings Z whose own prompt X scores them "
           "highest among the batch's P prompts", "falls to chance (1/P): Z no longer depends on X",
           "Retrieval", True),
    Metric("mi/retrieval_chance", "chance", "1/P, what retrieval scores when Z ignores X", "",
           "Retrieval"),
    Metric("rollout/grounding", "grounded", "the env's state facts (its oracle's own phrases: the player's "
           "position, the goal, the boxes) the turns' reasonings state right, less those they state wrong, as a "
           "share of the facts (-1 to 1; 0 says nothing): a fact said with another value, or beside another "
           "value, counts against; envs with such facts only",
           "can stay low while Retrieval-Acc is high: reasonings that differ by input need not be right",
           "Retrieval", True),
    Metric("mi_traj/retrieval_acc", "ret_traj", "retrieval accuracy on one random turn per trajectory",
           "falls to chance", "Retrieval"),
    Metric("mi/mi_est", "MI", "estimate of I(X;Z) per token: mean log p(Z|own X) minus mean log of "
           "p(Z|X) averaged over the batch's prompts (nats; at most log P)", "falls to 0", "MI (nats/token)",
           True),
    Metric("mi_code/mi_est", "MI_code", "the same estimate as RAGEN's released code computes it: each "
           "log-likelihood divided by its length first, then the log-mean-exp over prompts (the paper's "
           "plotted values)", "falls to 0", "MI (nats/token)"),
    Metric("mi/valid_thinking_rate", "thinking", "share of all turns whose reply holds <think> reasoning",
           "near 0: nothing to measure"),
    Metric("mi/conditional_entropy", "H(Z|X)", "-mean log p(Z|own X) per reasoning token (nats)",
           "stays up while MI falls", "Entropy (nats/token)", True),
    Metric("mi/reasoning_entropy", "H(Z)", "-mean log of p(Z|X) averaged over prompts, per token; "
           "H(Z) = MI + H(Z|X)", "close to H(Z|X)", "Entropy (nats/token)"),
    Metric("mi/mi_zscore_ema", "MI_z", "mean of (log p(Z|own X) - log p(Z)) / sigma, sigma smoothed over "
           "iterations", "falls to 0", "MI z-score (EMA)"),
    Metric("mi/empty_reasoning_rate", "no_think", "share of first-turn replies with no reasoning tokens "
           "(left out of the MI proxies)", "near 1: the model writes no reasoning to measure"),
    Metric("filter/rv_mean", "RV", "mean over prompt groups of the within-group reward variance",
           "near 0: the cause; no task gradient, the KL and entropy terms erase input dependence",
           "Reward variance", True),
    Metric("filter/rv_std_over_mean", "RV_cv", "Std(RV)/Mean(RV) across groups", f"at or below {LOW_RV_RATIO}: RV "
           "is flat across prompts, filtering cannot pick informative ones", "RV spread (std/mean)", True),
    Metric("filter/kept_ratio", "kept", "share of prompt groups the SNR-aware filter keeps for the update",
           "", "Filter", True),
    Metric("filter/kept_trajectory_ratio", "kept_trj", "share of the batch's trajectories the update trains on "
           "(below the kept groups' share with --filter-level trajectory)", ""),
    Metric("filter/zero_variance_groups", "zero_rv", "prompt groups whose G rollouts all scored alike", "rises"),
    Metric("filter/skipped", "skipped", "1 when the filter kept nothing and the update was skipped", ""),
    Metric("loss/policy", "pg_loss", "clipped policy-gradient loss of the update", "", table=True),
    Metric("loss/kl", "KL", "KL(policy || initial model) on the kept tokens, by kl_loss_type (k3 by default)", ""),
    Metric("time/iteration_s", "sec", "wall seconds of the iteration", "", table=True),
]
BY_KEY = {m.key: m for m in METRICS}
TABLE = [m for m in METRICS if m.table]
# Panels in drawing order: quantities of one scale share a panel; (title, y-axis label, shares in [0, 1]).
PANELS = [("Held-out", "share of episodes", True), ("Task", "share of episodes", True), ("Retrieval", "accuracy", True),
          ("MI (nats/token)", "nats per token", False), ("Entropy (nats/token)", "nats per token", False),
          ("Reward variance", "variance", False), ("RV spread (std/mean)", "ratio", False),
          ("Filter", "share of groups", True), ("MI z-score (EMA)", "z (standard deviations)", False)]
# An SFT warm start's metrics.jsonl (trainers/sft.py): a record every few optimizer steps, "iteration" the step.
SFT_LOSS = "loss/sft"
WARM_START_FILE = "warm_start.json"  # a warm start's record: its envs, model, settings and losses
ORGANISM = "organism:"  # how that record's model starts when the model is a model organism
SFT_METRICS = [Metric(SFT_LOSS, "sft_loss", "mean log-loss of the demonstrated reply tokens over the steps since the "
                      "last record", "", "Warm-start loss")]
SFT_PANELS = [("Warm-start loss", "nats per token", False)]


def metric_table() -> str:
    """The metric table of docs/training.md."""
    def cell(text: str) -> str:  # a bare <think> would render as an HTML tag, a bare | would split the cell
        return re.sub(r"(</?\w+>)", r"`\1`", text).replace("|", "\\|")

    rows = ["| metric | column | what it measures | under collapse |", "|---|---|---|---|"]
    rows += [f"| `{m.key}` | {cell(m.label)} | {cell(m.meaning)} | {cell(m.collapse or '-')} |" for m in METRICS]
    return "\n".join(rows)


class MetricsLogger:
    """Appends one record per iteration to ``metrics.jsonl`` (flushed and synced, so a killed run keeps
    every finished iteration) and rewrites ``metrics.csv``.

    ``keep_iterations``: on resume, records after that iteration (iterations the interrupted run
    finished after its last checkpoint, which the resumed run trains again) move to
    ``metrics.abandoned.jsonl``, so ``metrics.jsonl`` holds exactly one record per iteration and
    nothing is thrown away.

    ``report_to``: TrainerConfig's, or None for the two files alone; ``run_config``: the run's record
    (config.json), W&B's config.
    """

    def __init__(self, output_dir: str | Path, keep_iterations: int = 0,
                 report_to: str | None = TrainerConfig.report_to, run_config: dict | None = None):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        records = read_metrics(self.dir)
        self.records = [r for r in records if r.get("iteration", 0) <= keep_iterations]
        abandoned = [r for r in records if r.get("iteration", 0) > keep_iterations]
        if abandoned:
            append_jsonl(self.dir / "metrics.abandoned.jsonl", abandoned)
            self._write_all()
        trim_csv(self.dir / GROUP_RV_FILE, keep_iterations)  # the iterations trained again
        set_aside_rollouts(self.dir, keep_iterations)
        self._printed_header = False
        self._tb = tensorboard_writer(self.dir, keep_iterations, report_to) if report_to else None
        self.wandb = None
        if report_to == "wandb":
            from trainers.tracking import WandbRun

            self.wandb = WandbRun(self.dir, run_config)

    def log(self, metrics: dict) -> None:
        self.records.append(dict(metrics))
        append_jsonl(self.jsonl, [metrics])
        self._write_csv()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "iteration":
                    self._tb.add_scalar(key, value, metrics["iteration"])
            self._tb.flush()
        if self.wandb is not None:
            self.wandb.log(metrics)

    def add_episodes(self, trajectories, iteration: int) -> None:
        """The iteration's rollout, of which W&B's table gets a few episodes (nothing without W&B)."""
        if self.wandb is not None:
            self.wandb.add_episodes(trajectories, iteration)

    def close(self) -> None:
        """End the W&B run (the files stay open otherwise until the process exits)."""
        if self.wandb is not None:
            self.wandb.close()
            self.wandb = None

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
            lines.append(" ".join(f"{m.label:>8s}" for m in TABLE))
            self._printed_header = True
        cells = []
        for m in TABLE:
            value = metrics.get(m.key)
            cells.append(f"{'-':>8s}" if value is None else f"{value:8d}" if m.key == "iteration"
                         else f"{value:8.3f}")
        lines.append(" ".join(cells))
        return "\n".join(lines)


def tensorboard_writer(run_dir: Path, keep_iterations: int, report_to: str = TrainerConfig.report_to):
    """A SummaryWriter on the run folder's tensorboard/, or None when TensorBoard cannot be used (under
    report_to='auto' saying so in one line; 'tensorboard' refuses to start without it, in TrainerConfig)."""
    try:
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(run_dir / "tensorboard"), purge_step=keep_iterations + 1)
    except Exception as e:
        if report_to == "tensorboard":
            raise  # asked for by name: a broken install is the run's error
        if report_to == "auto":  # else W&B gets the metrics, and TensorBoard was only "where installed"
            why = "TensorBoard is not installed" if isinstance(e, ImportError) else \
                f"TensorBoard could not start ({type(e).__name__}: {e})"
            print(f"{why}: metrics go to metrics.jsonl and metrics.csv only; for TensorBoard too, "
                  f"{install_hint('tensorboard')}", file=sys.stderr, flush=True)  # stdout is the metrics table's
        return None


def append_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
        f.flush()
        os.fsync(f.fileno())


GROUP_RV_FILE = "group_rv.csv"  # TrainerConfig.log_group_rv_table: per iteration and group, reward std and kept


def append_csv(path: Path, rows: list[dict]) -> None:
    """Rows appended to a CSV (the header first when the file is new), flushed and synced."""
    new = not path.is_file()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())


def set_aside_rollouts(run_dir: Path, keep_iterations: int) -> None:
    """Move the saved rollouts of iterations after ``keep_iterations`` (trained again on resume) to
    rollouts/abandoned/, beside the abandoned metrics: kept, but never read as the run's."""
    for path in saved_iterations(run_dir):
        if iteration_of(path) > keep_iterations:
            (path.parent / "abandoned").mkdir(exist_ok=True)
            path.replace(path.parent / "abandoned" / path.name)


def trim_csv(path: Path, keep_iterations: int) -> None:
    """Drop a CSV's rows after ``keep_iterations`` (an "iteration" column), if it exists."""
    if not path.is_file():
        return
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fieldnames, rows = reader.fieldnames, list(reader)
    kept = [r for r in rows if int(r["iteration"]) <= keep_iterations]
    if len(kept) < len(rows):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(kept)


def read_metrics(run_dir: str | Path, name: str = "metrics.jsonl") -> list[dict]:
    path = Path(run_dir) / name
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


def pyplot():
    """matplotlib's pyplot, drawing to files only (the Agg backend: no display needed), imported when a
    plot is first drawn (the import takes a second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The run's curves to a PNG (default RUN_DIR/metrics.png): one panel per scale (PANELS), the
    run's name and settings in the title."""
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    if not records:
        raise FileNotFoundError(f"no metrics.jsonl with records in {run_dir}")
    plt = pyplot()
    fig = draw(records, _run_title(run_dir))
    out = Path(out) if out else run_dir / "metrics.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# the panels whose first line is a share of episodes: the key of each point's episode count (older runs lack it)
COUNTED = {"Held-out": "val/episodes", "Task": "rollout/episodes"}


def draw(records: list[dict], title: str):
    """The figure of ``plot_run`` (an SFT warm start's records: its loss alone, by step)."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    sft = all(SFT_LOSS in r for r in records)
    panels, metrics = (SFT_PANELS, SFT_METRICS) if sft else (PANELS, METRICS)
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.2 * rows + 0.6), squeeze=False)
    scored = [r for r in records if "mi/empty_reasoning_rate" in r]  # not the validation before the first
    no_reasoning = bool(scored) and all(r["mi/empty_reasoning_rate"] == 1.0 for r in scored)
    first, last = min(r["iteration"] for r in records), max(r["iteration"] for r in records)
    margin = 0.05 * (last - first) or 0.5  # every panel spans the run, the sparse ones (MI, validation) too
    for ax, (panel, unit, share) in zip(axes.flat, panels):
        drawn = [m for m in metrics if m.panel == panel]
        counted = COUNTED.get(panel)
        for order, m in enumerate(drawn):
            # the records that hold it: MI every mi_every iterations, validation every eval_steps
            points = [r for r in records if r.get(m.key) is not None and not math.isnan(r[m.key])]
            if not points:
                continue
            x, y = [r["iteration"] for r in points], [r[m.key] for r in points]
            chance = m.key in ("mi/retrieval_chance", "rollout/random_success", "val/random_success")
            style = {"linestyle": "--", "color": "grey"} if chance else {"marker": "o"}
            # Later lines draw on top and thinner: the first of a panel (success over format) stays visible.
            line, = ax.plot(x, y, label=m.label, zorder=10 - order, linewidth=2.6 - 0.7 * order,
                            markersize=5 - order, **style)
            if order == 0 and counted and all(r.get(counted) for r in points):  # each point's 95 % interval
                low, high = zip(*(wilson(v, r[counted]) for v, r in zip(y, points)))
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0,
                                label="95 % interval")
        n = sorted({r[counted] for r in records if r.get(counted)}) if counted else []
        ax.set_title(panel + (f" ({n[0]} episodes a point)" if len(n) == 1 else
                              f" ({n[0]}-{n[-1]} episodes a point)" if n else ""), fontsize=10)
        ax.set_xlabel("step" if sft else "iteration")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
            ax.set_xlim(first - margin, last + margin)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if share:
                ax.set_ylim(-0.05, 1.05)
            else:  # from 0, so that one point or a flat line does not get a magnified axis (0.945 - 1.05)
                low, high = ax.get_ylim()
                ax.set_ylim(min(low, 0), max(high, 1e-3))
        else:
            why = "\n(no <think> reasoning to score)" if no_reasoning and panel in ("Retrieval", "MI (nats/token)") \
                else "\n(no validation: eval_steps)" if panel == "Held-out" else ""
            ax.text(0.5, 0.5, "no data" + why, ha="center", va="center", transform=ax.transAxes, color="grey")
            ax.set_xticks([])
            ax.set_yticks([])
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def wilson(share: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share of ``n`` trials (95 % by default)."""
    if n <= 0 or share is None or math.isnan(share):
        return math.nan, math.nan
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def run_settings(run_dir: Path) -> list[str]:
    """What a run folder's record says was trained on what: an RL run's config.json, a warm start's
    warm_start.json ([] without a readable record)."""
    try:
        if (Path(run_dir) / WARM_START_FILE).is_file():  # its config.json is the model's
            w = json.loads((Path(run_dir) / WARM_START_FILE).read_text())
            c, model = w["config"], w["model"] or "default"
            model = "model organism" if model.startswith(ORGANISM) else f"model {model}"
            return [f"SFT on {', '.join(e.split('/')[-1] for e in w['envs'])}",
                    f"{c['episodes']} episodes x {c['epochs']} epochs, batch {c['batch_size']}",
                    f"lr {c['learning_rate']:g}", model]
        c = json.loads((Path(run_dir) / "config.json").read_text())
        envs = ", ".join(f"{k.split('/')[-1]} x{v}" for k, v in c["env"].items())
        return [f"{c['algorithm']} on {envs}", f"P x G = {c['rollout']['n_groups']} x {c['rollout']['group_size']}",
                "no filter" if c["filter"] == "none" else f"filter {c['filter']} {c['filter_value']}",
                f"lr {c['learning_rate']:g}", f"model {c['model'] or 'default'}"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []  # a folder without a (readable) record still plots and reports


def _run_title(run_dir: Path) -> str:
    """The run's name (its folder, with the parent's) and what was trained on what."""
    run_dir = run_dir.resolve()
    title = f"{run_dir.parent.name}/{run_dir.name}" if run_dir.parent.name else run_dir.name
    settings = run_settings(run_dir)
    return title + ("\n" + ", ".join(settings) if settings else "")


PROBE_FILE = "gradient_probe.jsonl"  # probes alone (--gradient-analysis-only), at the weights' iteration


def probe_records(run_dir: str | Path) -> list[dict]:
    """A run's gradient probes: the probed iterations of metrics.jsonl, then PROBE_FILE's probes alone."""
    records = read_metrics(run_dir) + read_metrics(run_dir, PROBE_FILE)
    return [r for r in records if "grad_norm/all/sample_count" in r]


def probe_buckets(record: dict) -> list[int]:
    """A probe's reward-std buckets (1: the lowest), as numbers."""
    return sorted(int(k.split("/")[1][7:]) for k in record
                  if k.startswith("grad_norm/bucket_") and k.endswith("/sample_count"))


def plot_gradients(run_dir: str | Path, iterations: list[int] | None = None, out: str | Path | None = None,
                   scale: str = "") -> Path:
    """The gradient probe's norms against reward-std bucket (the paper's figure: the task norm rising with
    reward variance, the entropy and KL norms flat), a panel per loss term and a line per probed
    iteration (``iterations``: those only; from metrics.jsonl and PROBE_FILE), to RUN_DIR/gradients.png.
    ``scale``: "" (the norm), "per_sample" or "per_token"."""
    run_dir = Path(run_dir)
    probed = probe_records(run_dir)
    if iterations:
        missing = sorted(set(iterations) - {r["iteration"] for r in probed})
        if missing:
            raise ValueError(f"{run_dir}: no gradient probe at iteration {missing[0]} (probed: "
                             f"{', '.join(str(r['iteration']) for r in probed) or 'none'})")
        probed = [r for r in probed if r["iteration"] in iterations]
    if not probed:
        raise FileNotFoundError(f"no gradient probe in {run_dir} (train with --gradient-analysis-every N or "
                                f"--gradient-analysis-only)")
    from matplotlib.ticker import MaxNLocator

    prefix = f"{scale}/" if scale else ""
    terms = [t for t in (*PROBE_TERMS, "total") if any(f"grad_norm/all/{prefix}{t}" in r for r in probed)]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(terms) + 1, figsize=(3.8 * (len(terms) + 1), 3.4), squeeze=False)
    seen = set()  # the buckets drawn, as the ticks (a locator puts fractions between one or two)
    for r in probed:
        buckets = probe_buckets(r)
        seen.update(buckets)
        label = f"iteration {r['iteration']}"
        for ax, term in zip(axes[0], terms):
            points = [(b, r[f"grad_norm/bucket_{b}/{prefix}{term}"]) for b in buckets
                      if f"grad_norm/bucket_{b}/{prefix}{term}" in r]
            ax.plot([b for b, _ in points], [v for _, v in points], marker="o", label=label)
        axes[0][-1].plot(buckets, [r[f"grad_norm/bucket_{b}/reward_std_mean"] for b in buckets], marker="o",
                         label=label)
    for ax, title in zip(axes[0], [f"{t} gradient norm{' ' + scale.replace('_', ' ') if scale else ''}"
                                   for t in terms] + ["reward std (bucket mean)"]):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("bucket (1: lowest reward std)")
        if len(seen) <= 12:
            ax.set_xticks(sorted(seen))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(_run_title(run_dir), fontsize=9)
    fig.tight_layout()
    out = Path(out) if out else run_dir / "gradients.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
