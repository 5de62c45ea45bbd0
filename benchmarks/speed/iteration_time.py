"""Where a training iteration's time goes: rollout, MI scoring, no-grad pass, filter, update.

One GRPO iteration (MI proxies on; no filter by default, so every row updates on the whole batch) of
the warm-started model (``make demo-smollm2``'s, built on first use) on the same episodes, run as:
- before: every turn's prompt recomputed in full and the no-grad pass always run (this project's
  trainer before the KV cache was kept across turns and unneeded passes were skipped);
- now: the defaults (KV cache kept across turns; the no-grad pass only where the update needs it);
- now, with the gradient probe: the defaults plus the probe (``gradient_analysis_every=1``: every
  loss term's backward on each reward-std bucket, ``trainers/gradient_probe.py``);
- now, frozen bottom: the same with ``freeze_layers`` bottom layers and the embeddings frozen (an
  option for CPU runs; it changes what is trained, not how the rest is computed);
- now, vLLM rollouts (where vLLM is installed): rollouts on vLLM, the update with transformers, the new
  weights loaded into vLLM after it; and the same with the bottom layers frozen (``--rows vllm-frozen``).
Each row prints seconds per phase, the iteration time against the first row run ("before" by
default) and the rollout's generated tokens/s; the last line is this machine's decode limit for the
model (``rollout_throughput.upper_bound``: one batched decode of P x G rows, no env).
``--organism``: the demo env's model organism (``trainers/organism.py``, built on first use) at the
``organism`` preset's scale, RAGEN's main table: 8 x 16, 5 turns, MI scored (goal: at most 20 s).
What each iteration computes is the same in the first two rows (``tests/agent/test_backends.py`` and
``tests/trainers/test_trainer.py`` check that kept caches and skipped passes give the same tokens,
log-probs and weights).

    python benchmarks/speed/iteration_time.py [--groups 4 --group-size 4 --max-turns 5 --max-new-tokens 128]
    python benchmarks/speed/iteration_time.py --organism --rows before now
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
from ragen_envs.registry import ENVIRONMENTS, env_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))  # findings.py: benchmarks/studies/
import findings  # noqa: E402

PHASES = ("rollout", "mi", "stats", "filter", "probe", "update", "sync")  # sync: new weights into vLLM
ROWS = ("before", "now", "frozen", "probe", "vllm", "vllm-frozen")


def one_iteration(args, name: str, before: bool, freeze_layers: int, vllm: bool = False, probe: bool = False) -> dict:
    from trainers import Trainer, TrainerConfig

    rollout = RolloutConfig(n_groups=args.groups, group_size=args.group_size, seed=args.seed,
                            chat=ChatEnvConfig(max_turns=args.max_turns),
                            sampling=SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0))
    with tempfile.TemporaryDirectory() as out:
        config = TrainerConfig(algorithm="grpo", filter=args.filter, filter_value=0.9, mi_every=1, learning_rate=1e-6,
                               freeze_layers=freeze_layers, output_dir=out, rollout=rollout, save_rollouts_steps=0,
                               gradient_analysis_every=int(probe))
        rollout_policy = None
        if vllm:  # rollouts on vLLM, training with transformers, weights loaded into vLLM after the update
            from ragen_envs.agent.backends.vllm import VLLMPolicy

            rollout_policy = lambda: VLLMPolicy(args.model)  # noqa: E731 (built after the trainer's checks)
        trainer = Trainer(args.model, args.env, config, rollout_policy=rollout_policy)
        if before:  # no kept caches; the no-grad pass over every sequence, before filtering
            trainer.policy.reuse_cache = False
            trainer._needs_old_pass = lambda kept: True
            collect = trainer.runner.collect

            def collect_without_entropies(**kwargs):
                trajectories = collect(**kwargs)
                for t in trajectories:
                    for turn in t.turns:
                        turn.entropies = None  # as before: entropies come from the no-grad pass
                return trajectories

            trainer.runner.collect = collect_without_entropies
        start = time.perf_counter()
        metrics = trainer.iteration_step()
        metrics["total"] = time.perf_counter() - start
        if not vllm:  # the decode limit, for replies as long as this rollout's on average
            from rollout_throughput import upper_bound

            per_turn = max(1, round(metrics["rollout/response_length"]))
            bound = replace(rollout, sampling=replace(rollout.sampling, max_new_tokens=per_turn))
            tokens, _, _, seconds = upper_bound(args.env, trainer.policy, bound)
            metrics["decode_limit"] = tokens / seconds
    return {"name": name, **metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=list(ENVIRONMENTS), default=env_for("demo"))
    parser.add_argument("--filter", choices=("none", "top_p"), default="none")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--freeze-layers", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS),
                        help="which rows to run; the ratio column is against the first one run")
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct warm-started "
                        "on FrozenLakeCoord (as `make demo-smollm2`), so it writes reasoning (MI) and rewards vary")
    parser.add_argument("--organism", action="store_true", help="the demo env's model organism at the organism "
                        "preset's scale (sets the scale, the model and --freeze-layers 0)")
    args = parser.parse_args()
    if args.organism:
        from trainers.config import preset
        from trainers.organism import default_organism

        run = preset("organism", args.env)["rollout"]
        args.groups, args.group_size = run["n_groups"], run["group_size"]
        args.max_turns, args.max_new_tokens = run["chat"]["max_turns"], run["sampling"]["max_new_tokens"]
        args.model, args.freeze_layers = args.model or default_organism([args.env]), 0
    args.model = args.model or findings.warm_start_model()
    print(f"{args.env}: one GRPO iteration, {args.groups} groups x {args.group_size}, {args.max_turns} turns, "
          f"{args.max_new_tokens} new tokens per turn, MI proxies on")
    print(f"{'run':28s} " + " ".join(f"{p + ' s':>9s}" for p in PHASES) + f" {'total s':>9s} {'vs first':>10s}"
          f" {'tokens':>7s} {'tokens/s':>9s}")
    rows = []
    runs = {"before": ("before", True, 0, False), "now": ("now", False, 0, False),
            "frozen": (f"now, bottom {args.freeze_layers} frozen", False, args.freeze_layers, False),
            "probe": ("now, with the gradient probe", False, 0, False, True),
            "vllm": ("now, vLLM rollouts", False, 0, True),
            "vllm-frozen": (f"vLLM rollouts, bottom {args.freeze_layers} frozen", False, args.freeze_layers, True)}
    if importlib.util.find_spec("vllm") is None and {"vllm", "vllm-frozen"} & set(args.rows):
        args.rows = [r for r in args.rows if not r.startswith("vllm")]
        print("(vLLM not installed: no vLLM-rollout row; `make .venv-vllm/.vllm-installed` builds a venv with it)")
    runs = [runs[name] for name in args.rows]
    for run in runs:
        rows.append(row := one_iteration(args, *run))
        phases = " ".join(f"{row.get(f'time/{p}_s', 0.0):9.1f}" for p in PHASES)
        tokens = row["rollout/response_length"] * row["rollout/turns"] * args.groups * args.group_size
        print(f"{row['name']:28s} {phases} {row['total']:9.1f} {rows[0]['total'] / row['total']:9.2f}x "
              f"{tokens:7.0f} {tokens / row['time/rollout_s']:9.0f}", flush=True)
        if "time/probe_share" in row:
            print(f"{'':28s} the probe's share of the iteration: {row['time/probe_share']:.0%}", flush=True)
    limits = [r["decode_limit"] for r in rows if "decode_limit" in r]
    if limits:
        print(f"decode limit here: {max(limits):.0f} tokens/s (one batched decode of {args.groups * args.group_size} "
              f"rows, no env)")


if __name__ == "__main__":
    main()
