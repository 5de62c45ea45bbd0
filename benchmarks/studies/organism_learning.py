"""Does the model organism learn? Held-out success of GRPO with top-p from its SFT start, against random
valid actions on the same held-out episodes, over seeds, with Retrieval-Acc beside it.

Each seed is one run of the ``organism`` preset (RAGEN's main-table scale: 8 groups x 16, 5 turns of up
to 2 actions, top-p 0.9; MI scored every iteration) from the default organism of the demo env, or of
RAGEN's task ``--task`` (built on first use, a few minutes on 2 cores, then cached), or ``--model``. Before
the first iteration and every ``--every`` iterations the policy plays ``--val-episodes`` held-out episodes
(env seeds from 100000, never trained on) at RAGEN's validation temperature 0.5, greedily, and at the
rollouts' temperature 1.0, and random valid actions play the same episodes.
A seed's record is written when it is done, so a stopped script resumes at the next seed.

    python benchmarks/studies/organism_learning.py [--task sokoban] [--seeds 3 --iterations 60 --every 10]
Outputs go to benchmarks/results/organism_learning[-<task>]/: curves.csv (a row per seed and evaluation),
results.json (per evaluation and temperature: the mean over seeds, their range, the 95 % Wilson interval
of the episodes pooled over seeds; and the lift, last evaluation minus the start, with its 95 % t
interval over seeds), learning.png.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import findings
from ragen_envs.registry import env_for_task, ragen_tasks
from trainers.metrics import pyplot, wilson

# what a seed's record keeps of each iteration's metrics (the run folder's metrics.jsonl has them all)
KEPT = ("iteration", "rollout/success", "rollout/random_success", "rollout/response_length", "rollout/grounding",
        "rollout/actions_per_turn",
        "mi/retrieval_acc", "mi/retrieval_chance", "mi/mi_est", "mi/conditional_entropy", "policy/token_entropy",
        "loss/approx_kl", "loss/clip_frac", "filter/kept_ratio", "time/iteration_s")


class AtRolloutTemperature:
    """A trainer callback: where the trainer validated (``val/success``, at RAGEN's temperature 0.5), the
    same held-out episodes again at the rollouts' own temperature, as ``val/sampled_success``, and
    greedily, as ``val/greedy_success``. Temperature 0.5 already sharpens the policy, which is much of what
    RL does; the rollouts' temperature shows that part too, and greedy play what is left of it."""

    def play(self, trainer) -> dict:
        out = {}
        for name, temperature in (("sampled", trainer.config.rollout.sampling.temperature), ("greedy", 0.0)):
            played = trainer.validate(temperature=temperature)
            out.update({f"val/{name}_success": played["val/success"],
                        f"val/{name}_format_valid": played["val/format_valid"]})
        return out

    def on_iteration_end(self, trainer, iteration: int, metrics: dict) -> None:
        if "val/success" in metrics:
            metrics.update(self.play(trainer))


def run_seed(out: Path, model: str, env: str, seed: int, args) -> dict:
    """One seed's run (or its finished record): the held-out points and the per-iteration metrics."""
    from trainers import Trainer

    done = out / f"seed{seed}.json"
    if done.is_file():
        return json.loads(done.read_text())
    config = findings.organism_config(args, env, out, eval_steps=args.every, eval_episodes=args.val_episodes,
                                      eval_seed=findings.HELD_OUT_SEED)
    config = replace(config, rollout=replace(config.rollout, seed=config.rollout.seed + 1000 * seed))
    sampled = AtRolloutTemperature()
    start = time.perf_counter()
    trainer = Trainer(model, env, config, callbacks=[sampled])
    first = sampled.play(trainer)  # the start's, beside the trainer's own validation before the first iteration
    history = [{k: v for k, v in h.items() if k in KEPT or k.startswith("val/")} for h in trainer.train()]
    history[0].update(first)
    record = {"seed": seed, "model": model, "wall_s": time.perf_counter() - start, "config": config.to_dict(),
              "commit": findings.commit(), "history": history}
    done.write_text(json.dumps(record) + "\n")
    return record


# the held-out successes recorded: (metric, name in the summary, label)
SUCCESSES = (("val/success", "val_success", "T = 0.5"), ("val/greedy_success", "greedy_success", "greedy"),
             ("val/sampled_success", "sampled_success", "T = 1"))


def prefix(name: str) -> str:
    """The summary's key prefix for a success: "" for val_success, else "greedy_" or "sampled_"."""
    return "" if name == "val_success" else name.split("_")[0] + "_"


def lifts(records: list[dict]) -> dict:
    """Per held-out success: each seed's last evaluation minus its first (the SFT start, on the same
    episodes), their mean and 95 % t interval over seeds (training noise and the episodes' own)."""
    out = {}
    for key, name, _ in SUCCESSES:
        points = [[h[key] for h in r["history"] if key in h] for r in records]
        if points and all(len(p) >= 2 for p in points):
            per_seed = [p[-1] - p[0] for p in points]
            mean, low, high = findings.t_interval(per_seed)
            out[name] = {"per_seed": per_seed, "lift": mean, "low": low, "high": high}
    return out


def summarise(records: list[dict], episodes: int) -> list[dict]:
    """Per evaluated iteration: held-out success over seeds (mean, range, the 95 % Wilson interval of all
    seeds' episodes pooled) at each temperature evaluated, and the random level on the same episodes."""
    points = {}
    for r in records:
        for h in r["history"]:
            if "val/success" in h:
                points.setdefault(h["iteration"], []).append(h)
    rows = []
    for it, hs in sorted(points.items()):
        row = {"iteration": it, "seeds": len(hs),
               "val_random_success": float(np.mean([h["val/random_success"] for h in hs])),
               "val_format_valid": float(np.mean([h["val/format_valid"] for h in hs]))}
        for key, name, _ in SUCCESSES:
            if all(key in h for h in hs):
                s = np.array([h[key] for h in hs])
                low, high = wilson(float(s.mean()), episodes * len(s))
                pre = prefix(name)
                row.update({name: float(s.mean()), f"{pre}low": low, f"{pre}high": high,
                            f"{pre}min": float(s.min()), f"{pre}max": float(s.max())})
        rows.append(row)
    return rows


def plot(out: Path, records: list[dict], rows: list[dict], episodes: int, env: str = findings.WARM_ENV) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
    x = [r["iteration"] for r in rows]
    ax = axes[0]
    for _, name, label in SUCCESSES:
        if all(name in r for r in rows):
            ax.fill_between(x, [r[f"{prefix(name)}min"] for r in rows], [r[f"{prefix(name)}max"] for r in rows],
                            alpha=0.2)
            over = "1 seed" if len(records) == 1 else f"mean of {len(records)} seeds, range"
            ax.plot(x, [r[name] for r in rows], marker="o", label=f"{label}: {over}")
    ax.plot(x, [r["val_random_success"] for r in rows], "k--", label="random valid actions")
    ax.set_title(f"held-out success ({episodes} episodes a point)")
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
    fig.suptitle(f"Model organism on {env}: GRPO + top-p from the SFT start")
    fig.tight_layout()
    fig.savefig(out / "learning.png", dpi=100)


def main() -> None:
    p = findings.organism_parser(__doc__)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--every", type=int, default=10, help="held-out evaluation every this many iterations")
    p.add_argument("--val-episodes", type=int, default=256)
    p.add_argument("--task", default=None, choices=sorted(ragen_tasks()),
                   help="RAGEN's task to learn (default: the demo env), with its own organism unless --model")
    p.set_defaults(iterations=60)
    args = p.parse_args()
    if args.task:
        env = env_for_task(args.task)
        out = Path(args.out or findings.RESULTS / f"organism_learning-{args.task}")
        out.mkdir(parents=True, exist_ok=True)
        model = findings.warm_model(args, env)
    else:
        env, model, out = findings.organism_setup(args, "organism_learning")
    records = []
    for seed in range(args.seeds):
        print(f"[seed {seed + 1}/{args.seeds}]", flush=True)
        records.append(run_seed(out, model, env, seed, args))
    rows = summarise(records, args.val_episodes)
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "val_success", "val_random_success", "val_format_valid",
                         "sampled_success", "greedy_success"])
        for r in records:
            for h in r["history"]:
                if "val/success" in h:
                    writer.writerow([r["seed"], h["iteration"], h["val/success"], h["val/random_success"],
                                     h["val/format_valid"], h.get("val/sampled_success", ""),
                                     h.get("val/greedy_success", "")])
    lift = lifts(records)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "env": env, "model": model, "points": rows,
                                                  "lifts": lift, "commit": findings.commit()}, indent=2) + "\n")
    plot(out, records, rows, args.val_episodes, env)
    for _, name, label in SUCCESSES:
        if not all(name in r for r in rows):
            continue
        pre = prefix(name)
        print(f"held-out at {label}\n{'iteration':>9s} {'success':>9s} {'95% interval':>15s} {'range':>13s} "
              f"{'random':>7s}")
        for r in rows:
            print(f"{r['iteration']:9d} {r[name]:9.3f} {r[pre + 'low']:7.3f}-{r[pre + 'high']:.3f} "
                  f"{r[pre + 'min']:6.3f}-{r[pre + 'max']:.3f} {r['val_random_success']:7.3f}")
        first, last = rows[0], rows[-1]
        print(f"held-out success at {label} {first[name]:.3f} (SFT start) -> {last[name]:.3f} "
              f"[{last[pre + 'low']:.3f}, {last[pre + 'high']:.3f}] after {last['iteration']} iterations; "
              f"random valid actions {last['val_random_success']:.3f}")
        if name in lift:
            g = lift[name]
            text = findings.interval_text(g["lift"], g["low"], g["high"], len(g["per_seed"]))
            print(f"  lift (95 % t interval): {text}")
    print(f"results in {out}")


if __name__ == "__main__":
    main()
