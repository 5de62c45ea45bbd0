"""``ragen diagnose PATH``: a run on disk in (a run folder, a trajectory file or generic JSONL), a verdict
on template collapse out: diagnosis.json (a row per step and the verdict), a printed table and
diagnosis.png. The input is read and checked before any model loads; one model scores every step.

    ragen diagnose runs/fl                                  # the embedded default model scores
    ragen diagnose samples.jsonl --model Qwen/Qwen2.5-0.5B-Instruct --out diag
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_MODEL_NAME = "the embedded default model (SmolLM2-135M-Instruct)"
PLOTTED = [("mi/mi_est", "MI-Est (nats/token)"), ("mi_code/mi_zscore_ema", "MI-ZScore-EMA (the warning's)"),
           ("mi/conditional_entropy", "H(Z|X) (nats/token)"), ("reasoning_length", "reasoning length (tokens)")]


def add_parser(sub):
    """The ``diagnose`` subcommand (returned) with its flags, made by ``sub`` (``ragen``'s subparser maker)."""
    dg = sub("diagnose", help="score a run on disk for template collapse: diagnosis.json, a table, a plot")
    dg.add_argument("path", help="a run folder (rollouts/iteration-N.jsonl), a trajectory file, generic JSONL, or a "
                    "dump of RAGEN (its eval JSONL), verl (trainer.rollout_data_dir) or TRL (log_completions)")
    dg.add_argument("--model", default=None, help="the scoring model: a path or hub id (default: the embedded "
                    "SmolLM2-135M-Instruct); one model scores every step. A run folder's steps are scored by "
                    "the checkpoint saved before each, else by this (default: the run's starting model)")
    dg.add_argument("--scorer", default="transformers", choices=["transformers", "vllm", "openai"],
                    help="the backend that scores (openai: --model is the served name, --tokenizer needed)")
    dg.add_argument("--tokenizer", default=None, help="--scorer openai: the served model's tokenizer; also the chat "
                    "template a RAGEN or TRL dump's conversations are rendered with (default: --model's)")
    dg.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="--scorer openai: the server's URL")
    dg.add_argument("--device", default=None, help="--scorer transformers: cpu, cuda, ...")
    dg.add_argument("--out", default=None, help="the folder for diagnosis.json and diagnosis.png (default: the "
                    "run folder, or the folder of the file)")
    dg.add_argument("--reasoning-pattern", default=None, metavar="REGEX",
                    help="generic JSONL with 'response': the regular expression of the reasoning (its first "
                         "group), instead of <think>...</think>")
    dg.add_argument("--reward", default=None, metavar="FIELD",
                    help="a dump's reward field: RAGEN's metadata key (default total_reward, which RAGEN leaves 0.0: "
                         "e.g. CoordSokoban/success), TRL's reward columns (comma-separated; default all numeric)")
    dg.add_argument("--max-pairs", type=int, default=64,
                    help="(prompt, reasoning) pairs scored per step (0: all; a run folder: its mi_first_turn_pairs)")
    dg.add_argument("--seed", type=int, default=0,
                    help="the seed of the pairs drawn (a run folder: the trainer's)")
    dg.set_defaults(func=cmd_diagnose)
    return dg


def load_scorer(args, model=None):
    """The scoring policy the flags name for ``model`` (default ``--model``): the only place ``ragen diagnose``
    loads a model."""
    from ragen_envs.agent.backends import PolicyConfig

    return PolicyConfig(backend=args.scorer, model=model or args.model, tokenizer=args.tokenizer,
                        base_url=args.base_url, device=args.device).make()


def load_tokenizer(args):
    """The scoring model's tokenizer alone (no weights): a dump's conversations are rendered with its chat
    template before any model loads."""
    from transformers import AutoTokenizer

    from ragen_envs.agent.default_model import default_model_path

    return AutoTokenizer.from_pretrained(args.tokenizer or args.model or default_model_path())


def cmd_diagnose(args) -> int:
    from ragen_envs.diagnose.offline import diagnose_records
    from ragen_envs.diagnose.readers import read_records, usable_steps
    from ragen_envs.diagnose.runs import diagnose_run, plan, run_config

    # every input error is raised here, before the model loads
    kind, records = read_records(args.path, args.reasoning_pattern, load_tokenizer=lambda: load_tokenizer(args),
                                 reward=args.reward)
    usable_steps(records)
    path = Path(args.path)
    out = Path(args.out) if args.out else path if path.is_dir() else path.parent
    out.mkdir(parents=True, exist_ok=True)
    if kind == "run folder":  # each step by the checkpoint before it, the run's own model for the rest
        steps = plan(path)
        fallback = args.model or run_config(path).get("model")
        if fallback is None and any(s.checkpoint is None for s in steps):
            raise ValueError(f"{path}: iteration {steps[0].iteration} has no checkpoint before it and the run's "
                             "config.json names no model: give --model, the model the run started from")
        result = diagnose_run(path, lambda model: load_scorer(args, model), fallback)
        model = "each step's checkpoint" + (f", else {fallback}" if fallback else "")
        note = "each step scored by the newest checkpoint saved before it (scorer and scorer_lag per row), " \
               "else by the run's starting model or --model"
    else:
        result = diagnose_records(load_scorer(args), None, records, args.max_pairs, args.seed)
        model = args.model or DEFAULT_MODEL_NAME
        note = "one model scores every step (not each step's own checkpoint)"
    record = {"source": str(path), "format": kind, "scorer": args.scorer, "model": model, "model_note": note,
              **result}
    (out / "diagnosis.json").write_text(json.dumps(record, indent=1, default=float))
    print_rows(result["rows"])
    plot = draw(result["rows"], out / "diagnosis.png", f"{path.name}: {result['verdict'].split(':')[0]}",
                result["collapse_step"])
    print(f"{kind} {path}, scored by {model} ({args.scorer}): {note}")
    print(f"verdict: {result['verdict']}")
    print(f"written: {out / 'diagnosis.json'}, {plot}")
    return 0


def print_rows(rows: list[dict]) -> None:
    """A line per step: the proxies, the reasoning length, a run folder's scorer lag (updates between the
    scoring checkpoint and the sampling weights; - : the fallback model) and the mean reward std, then the
    notes."""
    columns = [("step", "step"), ("episodes", "episodes"), ("Retr-Acc", "mi/retrieval_acc"),
               ("chance", "mi/retrieval_chance"), ("MI-Est", "mi/mi_est"), ("H(Z|X)", "mi/conditional_entropy"),
               ("ZScoreEMA", "mi_code/mi_zscore_ema"), ("len", "reasoning_length")]
    if any("scorer_lag" in row for row in rows):  # a run folder's: how stale each step's scorer is
        columns.append(("lag", "scorer_lag"))
    print("".join(f"{name:>10s}" for name, _ in columns) + "  reward-std  notes")
    for row in rows:
        cells = [f"{row[key]:10d}" if isinstance(row.get(key), int) else
                 f"{row[key]:10.3f}" if isinstance(row.get(key), float) else f"{'-':>10s}" for _, key in columns]
        std = row.get("reward_std")
        std_text = f"{sum(std) / len(std):10.3f}" if std else f"{'-':>10s}"
        print("".join(cells) + f"  {std_text}  {'; '.join(row['notes'])}")


def draw(rows: list[dict], out: Path, title: str, collapse_step: int | None = None) -> Path:
    """diagnosis.png: Retrieval-Acc against chance, MI-Est, the MI-ZScore-EMA the early warning watches,
    H(Z|X), reasoning length and the spread of the groups' reward std (median line, quartile band) over the
    steps; the verdict's collapse step, if any, a red dashed line in each."""
    from trainers.metrics import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 6, figsize=(26, 3.8))
    scored = [r for r in rows if "mi/retrieval_acc" in r]
    steps = [r["step"] for r in scored]
    axes[0].plot(steps, [r["mi/retrieval_acc"] for r in scored], marker="o", label="Retrieval-Acc")
    axes[0].plot(steps, [r["mi/retrieval_chance"] for r in scored], linestyle="--", color="grey", label="chance")
    axes[0].set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=7)
    axes[0].set_title("Retrieval-Acc", fontsize=10)
    for ax, (key, label) in zip(axes[1:5], PLOTTED):
        points = [r for r in rows if key in r]
        ax.plot([r["step"] for r in points], [r[key] for r in points], marker="o")
        ax.set_title(label, fontsize=10)
    rewarded = [r for r in rows if r.get("reward_std")]
    quartiles = [sorted(r["reward_std"]) for r in rewarded]
    if rewarded:
        at = [[q[round(p * (len(q) - 1))] for q in quartiles] for p in (0.25, 0.5, 0.75)]
        x = [r["step"] for r in rewarded]
        axes[5].fill_between(x, at[0], at[2], alpha=0.2, label="quartiles")
        axes[5].plot(x, at[1], marker="o", label="median")
        axes[5].legend(fontsize=7)
    else:
        axes[5].text(0.5, 0.5, "no reward statistics\n(groups of one sample)", ha="center", va="center",
                     transform=axes[5].transAxes, color="grey")
    axes[5].set_title("group reward std", fontsize=10)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if collapse_step is not None:
            ax.axvline(collapse_step, color="red", linestyle="--", alpha=0.6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
