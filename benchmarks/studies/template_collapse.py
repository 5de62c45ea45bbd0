"""Template collapse, looked for on the model organism: does its reasoning stop depending on the input
while its entropy stays up, and what does top-p filtering do to the same run?

Runs of the ``organism`` preset (RAGEN's 8 x 16, 5 turns, softmax top-p 0.9; ``make demo``'s run) from
the demo env's organism, once with no filter and once with the preset's top-p, on the same rollout
seeds; ``--entropy-coef`` (an entropy bonus above RAGEN's 0.001 pays for diverse tokens whatever the
input), ``--slip`` (reward from the dice rather than the prompt) and ``--learning-rate`` change the
setting. Per iteration: Retrieval-Acc against its
chance 1/P, MI-Est, the conditional entropy H(Z|X) of the reasoning, the token entropy and success.
A run's record is written when it is done, so a stopped script resumes at the next run.
``--diagnose-every K`` keeps each run's folder (``runs/<filter>``) for ``ragen diagnose``: a checkpoint
every K iterations and the rollouts of the iterations those checkpoints sampled (1, K + 1, 2K + 1, ...).

    python benchmarks/studies/template_collapse.py [--entropy-coef 0.05 --slip 0.5 --iterations 40 --learning-rate 1e-3]
Outputs go to benchmarks/results/template_collapse/: curves.csv, collapse.png and a record per run.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import findings
from trainers.metrics import pyplot

FILTERS = ("none", "top_p")
CURVES = (("mi/retrieval_acc", "Retrieval-Acc (chance dashed)"), ("mi/mi_est", "MI-Est (nats)"),
          ("mi/conditional_entropy", "H(Z|X) (nats/token)"), ("policy/token_entropy", "token entropy"),
          ("rollout/success", "training success (random dashed)"))


def run(out: Path, model: str, env: str, name: str, args) -> dict:
    from trainers import Trainer

    done = out / f"{name}.json"
    if done.is_file():
        return json.loads(done.read_text())
    bonus = {"entropy_coef": args.entropy_coef} if args.entropy_coef else {}
    saving = {}
    if args.diagnose_every:  # every iteration's rollouts, pruned below to those a checkpoint sampled
        saving = {"output_dir": str(out / "runs" / name), "save_strategy": "steps", "save_steps": args.diagnose_every,
                  "save_total_limit": None, "save_rollouts_steps": 1}  # every checkpoint: each scores its step
    config = findings.organism_config(args, env, out, filter=name, **bonus, **saving)
    kwargs = {**config.rollout.env_kwargs.get(env, {}), "slip": args.slip}
    config = replace(config, rollout=replace(config.rollout, env_kwargs={env: kwargs}))
    start = time.perf_counter()
    kept = {key for key, _ in CURVES} | {"iteration", "mi/retrieval_chance", "rollout/random_success"}
    history = [{k: v for k, v in h.items() if k in kept} for h in Trainer(model, env, config).train()]
    if args.diagnose_every:
        prune_rollouts(Path(config.output_dir), args.diagnose_every)
    record = {"filter": name, "wall_s": time.perf_counter() - start, "config": config.to_dict(),
              "commit": findings.commit(), "history": history}
    done.write_text(json.dumps(record) + "\n")
    return record


def prune_rollouts(run: Path, every: int) -> None:
    """Keep the rollouts of iterations 1, every + 1, 2 * every + 1, ...: those sampled by the initial model or
    a saved checkpoint (iteration N samples with the weights of checkpoint-(N - 1))."""
    from ragen_envs.agent.trajectory import iteration_of, saved_iterations

    for path in saved_iterations(run):
        if (iteration_of(path) - 1) % every:
            path.unlink()


def plot(out: Path, records: list[dict], args) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3.6))
    for r in records:
        x = [h["iteration"] for h in r["history"]]
        for ax, (key, title) in zip(axes, CURVES):
            ax.plot(x, [h.get(key, np.nan) for h in r["history"]], marker=".", label=f"filter {r['filter']}")
            ax.set_title(title, fontsize=10)
    x = [h["iteration"] for h in records[0]["history"]]
    axes[0].plot(x, [h.get("mi/retrieval_chance", np.nan) for h in records[0]["history"]], "k--", label="chance")
    axes[-1].plot(x, [h.get("rollout/random_success", np.nan) for h in records[0]["history"]], "k--",
                  label="random actions")
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    config = records[0].get("config", {})
    fig.suptitle(f"Model organism, entropy bonus {config.get('entropy_coef')}, slip {args.slip}, learning rate "
                 f"{config.get('learning_rate')}: looking for template collapse")
    fig.tight_layout()
    fig.savefig(out / "collapse.png", dpi=100)


def main() -> None:
    p = findings.organism_parser(__doc__)
    p.add_argument("--entropy-coef", type=float, default=None, help="default: the preset's (RAGEN's 0.001)")
    p.add_argument("--slip", type=float, default=0.0)
    p.add_argument("--filters", nargs="+", choices=FILTERS, default=list(FILTERS),
                   help="the arms to run (default both; one each lets two processes run them side by side)")
    p.add_argument("--diagnose-every", type=int, default=0, metavar="K",
                   help="keep runs/<filter> with a checkpoint every K iterations and the rollouts they sampled")
    args = p.parse_args()
    env, model, out = findings.organism_setup(args, "template_collapse")
    records = [run(out, model, env, name, args) for name in args.filters]
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["filter", "iteration", *(key for key, _ in CURVES), "mi/retrieval_chance"])
        for r in records:
            for h in r["history"]:
                writer.writerow([r["filter"], h["iteration"], *(h.get(key) for key, _ in CURVES),
                                 h.get("mi/retrieval_chance")])
    plot(out, records, args)
    print(f"{'filter':>7s} " + " ".join(f"{k.split('/')[-1][:14]:>14s}" for k, _ in CURVES) + "  (first 5 -> last 5 "
          "iterations)")
    for r in records:
        cells = []
        for key, _ in CURVES:
            v = np.array([h.get(key, np.nan) for h in r["history"]], dtype=float)
            cells.append(f"{np.nanmean(v[:5]):6.3f}->{np.nanmean(v[-5:]):6.3f}")
        print(f"{r['filter']:>7s} " + " ".join(f"{c:>14s}" for c in cells))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
