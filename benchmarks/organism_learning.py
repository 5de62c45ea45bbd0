"""Does the model organism learn? Held-out success of GRPO with top-p from its SFT start, against random
valid actions on the same held-out episodes, over seeds, with Retrieval-Acc beside it.

Each seed is one run of the ``organism`` preset (RAGEN's main-table scale: 8 groups x 16, 5 turns of up
to 2 actions, top-p 0.9; MI scored every iteration) from the default organism of the demo env (built on
first use, about 3 minutes on 2 cores, then cached). Before the first iteration and every ``--every``
iterations the policy plays ``--val-episodes`` held-out episodes (env seeds from 100000, never trained
on; sampled at RAGEN's validation temperature 0.5) and random valid actions play the same episodes.
A seed's record is written when it is done, so a stopped script resumes at the next seed.

    python benchmarks/organism_learning.py [--seeds 3 --iterations 60 --every 10 --val-episodes 256]
Outputs go to benchmarks/results/organism_learning/: curves.csv (a row per seed and evaluation),
results.json (per evaluation: the mean over seeds, their range, the 95 % Wilson interval of the
episodes pooled over seeds), learning.png.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import findings
from trainers.metrics import wilson

# what a seed's record keeps of each iteration's metrics (the run folder's metrics.jsonl has them all)
KEPT = ("iteration", "rollout/success", "rollout/random_success", "rollout/response_length", "mi/retrieval_acc",
        "mi/retrieval_chance", "mi/mi_est", "mi/conditional_entropy", "policy/token_entropy", "loss/approx_kl",
        "loss/clip_frac", "filter/kept_ratio", "time/iteration_s")


class HeldOut:
    """A trainer callback: held-out success (and random valid actions' on the same episodes) every
    ``every`` iterations, into the iteration's metrics as ``val/success`` and ``val/random_success``."""

    def __init__(self, episodes: int, every: int, temperature: float = 0.5):
        self.episodes, self.every, self.temperature = episodes, every, temperature

    def evaluate(self, trainer) -> dict:
        run = trainer.config.rollout
        config = replace(run, n_groups=self.episodes, group_size=1, seed=findings.HELD_OUT_SEED,
                         sampling=replace(run.sampling, temperature=self.temperature, seed=None))
        envs = {env_id: self.episodes for env_id in trainer.runner.mix}  # the mix's own counts are the run's
        played = findings.held_out(trainer.policy, envs, config, findings.HELD_OUT_SEED)
        return {f"val/{k}": v for k, v in played.items()}

    def on_iteration_end(self, trainer, iteration: int, metrics: dict) -> None:
        if iteration % self.every == 0:
            metrics.update(self.evaluate(trainer))


def run_seed(out: Path, model: str, env: str, seed: int, args) -> dict:
    """One seed's run (or its finished record): the held-out points and the per-iteration metrics."""
    from trainers import Trainer

    done = out / f"seed{seed}.json"
    if done.is_file():
        return json.loads(done.read_text())
    config = findings.organism_config(args, env, out)
    config = replace(config, rollout=replace(config.rollout, seed=config.rollout.seed + 1000 * seed))
    held_out = HeldOut(args.val_episodes, args.every)
    start = time.perf_counter()
    trainer = Trainer(model, env, config, callbacks=[held_out])
    first = {"iteration": 0, **held_out.evaluate(trainer)}
    history = [first] + [{k: v for k, v in h.items() if k in KEPT or k.startswith("val/")} for h in trainer.train()]
    record = {"seed": seed, "model": model, "wall_s": time.perf_counter() - start, "config": config.to_dict(),
              "history": history}
    done.write_text(json.dumps(record) + "\n")
    return record


def summarise(records: list[dict], episodes: int) -> list[dict]:
    """Per evaluated iteration: held-out success over seeds (mean, range, the 95 % Wilson interval of all
    seeds' episodes pooled) and the random level on the same episodes."""
    points = {}
    for r in records:
        for h in r["history"]:
            if "val/success" in h:
                points.setdefault(h["iteration"], []).append(h)
    rows = []
    for it, hs in sorted(points.items()):
        s = np.array([h["val/success"] for h in hs])
        low, high = wilson(float(s.mean()), episodes * len(s))
        rows.append({"iteration": it, "seeds": len(s), "val_success": float(s.mean()), "low": low,
                     "high": high, "min": float(s.min()), "max": float(s.max()),
                     "val_random_success": float(np.mean([h["val/random_success"] for h in hs])),
                     "val_format_valid": float(np.mean([h["val/format_valid"] for h in hs]))})
    return rows


def plot(out: Path, records: list[dict], rows: list[dict], episodes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
    x = [r["iteration"] for r in rows]
    ax = axes[0]
    ax.fill_between(x, [r["min"] for r in rows], [r["max"] for r in rows], alpha=0.25, label="range over seeds")
    ax.plot(x, [r["val_success"] for r in rows], marker="o", label=f"GRPO + top-p (mean of {len(records)} seeds)")
    ax.plot(x, [r["val_random_success"] for r in rows], "k--", label="random valid actions")
    ax.set_title(f"held-out success ({episodes} episodes a point, T = 0.5)")
    for ax, key, title in ((axes[1], "rollout/success", "training success (on-policy, 128 episodes)"),
                           (axes[2], "mi/retrieval_acc", "Retrieval-Acc (chance 1/P dashed)")):
        curves = np.array([[h.get(key, np.nan) for h in r["history"][1:]] for r in records], dtype=float)
        its = np.arange(1, curves.shape[1] + 1)
        ax.fill_between(its, np.nanmin(curves, 0), np.nanmax(curves, 0), alpha=0.25, label="range over seeds")
        ax.plot(its, np.nanmean(curves, 0), label="mean")
        ax.set_title(title)
        if key == "rollout/success":
            chance = np.nanmean([[h.get("rollout/random_success", np.nan) for h in r["history"][1:]]
                                 for r in records], 0)
            ax.plot(its, chance, "k--", label="random valid actions")
        else:
            ax.plot(its, np.nanmean([[h.get("mi/retrieval_chance", np.nan) for h in r["history"][1:]]
                                     for r in records], 0), "k--", label="chance")
    for ax in axes:
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Model organism on the demo env: GRPO + top-p from the SFT start")
    fig.tight_layout()
    fig.savefig(out / "learning.png", dpi=100)


def main() -> None:
    p = findings.organism_parser(__doc__)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--every", type=int, default=10, help="held-out evaluation every this many iterations")
    p.add_argument("--val-episodes", type=int, default=256)
    p.set_defaults(iterations=60)
    args = p.parse_args()
    env, model, out = findings.organism_setup(args, "organism_learning")
    records = []
    for seed in range(args.seeds):
        print(f"[seed {seed + 1}/{args.seeds}]", flush=True)
        records.append(run_seed(out, model, env, seed, args))
    rows = summarise(records, args.val_episodes)
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "val_success", "val_random_success", "val_format_valid"])
        for r in records:
            for h in r["history"]:
                if "val/success" in h:
                    writer.writerow([r["seed"], h["iteration"], h["val/success"], h["val/random_success"],
                                     h["val/format_valid"]])
    (out / "results.json").write_text(json.dumps({"args": vars(args), "points": rows}, indent=2) + "\n")
    plot(out, records, rows, args.val_episodes)
    print(f"{'iteration':>9s} {'held-out':>9s} {'95% interval':>15s} {'range':>13s} {'random':>7s}")
    for r in rows:
        print(f"{r['iteration']:9d} {r['val_success']:9.3f} {r['low']:7.3f}-{r['high']:.3f} "
              f"{r['min']:6.3f}-{r['max']:.3f} {r['val_random_success']:7.3f}")
    first, last = rows[0], rows[-1]
    print(f"held-out success {first['val_success']:.3f} (SFT start) -> {last['val_success']:.3f} "
          f"[{last['low']:.3f}, {last['high']:.3f}] after {last['iteration']} iterations; random valid actions "
          f"{last['val_random_success']:.3f}; ratio to random {last['val_success'] / last['val_random_success']:.2f}x")
    print(f"results in {out}")


if __name__ == "__main__":
    main()
