"""Peak memory of an evaluation with the transformers backend: the KV caches it keeps between turns unbounded
(the default) against bounds (``--kept-cache-mb``), on the same episodes.

Each setting plays the same grouped rollout (the embedded SmolLM2-135M by default) in a fresh process and
reports that process's peak resident memory, its wall time, the KV cache it kept at most and the replies whose
cache went over the bound (their next prompt then ran in full). Prints each setting's peak and time as ratios
to the unbounded run's; the episodes are the same (same seeds, same replies: a dropped cache is recomputed).

    python benchmarks/speed/eval_memory.py                     # Sokoban, 8 x 4 episodes of 5 turns
    python benchmarks/speed/eval_memory.py --groups 2 --max-turns 2 --bounds none,0   # a quick look
    python benchmarks/speed/eval_memory.py --forward-batch 4       # fewer rows in flight in each forward pass
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))
import findings  # noqa: E402

from ragen_envs.agent.backends.base import FORWARD_BATCH  # noqa: E402
from ragen_envs.registry import env_for  # noqa: E402

# one setting's run, in a process of its own so that its peak is its own
CHILD = """
import json, resource, sys, time
from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig
from ragen_envs.agent.backends.transformers import TransformersPolicy
from ragen_envs.agent.trajectory import rollout_metrics
a = json.loads(sys.argv[1])
policy = TransformersPolicy(a["model"], device="cpu", kept_cache_mb=a["bound"], batch_size=a["forward_batch"])
config = RolloutConfig(n_groups=a["groups"], group_size=a["group_size"], seed=0,
                       chat=ChatEnvConfig(max_turns=a["max_turns"]),
                       sampling=SamplingConfig(temperature=1.0, max_new_tokens=a["max_new_tokens"], seed=0))
start = time.perf_counter()
trajectories = RolloutRunner(a["env"], policy, config).collect()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
print(json.dumps({"wall_s": time.perf_counter() - start, "peak_mb": peak,
                  "kept_mb_max": policy.kept_bytes_peak / 2 ** 20, "caches_not_kept": policy.caches_not_kept,
                  "prefilled_tokens": policy.prefilled_tokens, "tokens": sum(t.response_length for t in trajectories),
                  "success": rollout_metrics(trajectories)["success"]}))
"""


def bound(text: str) -> float | None:
    return None if text == "none" else float(text)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default=env_for("default"), help="an env id (default: the catalogue's default, Sokoban)")
    p.add_argument("--model", default=None, help="a path (default: the embedded SmolLM2-135M)")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--bounds", default="none,1024,256",
                   help="comma-separated kept-cache bounds in MB, 'none' for no bound (the first is the baseline)")
    p.add_argument("--forward-batch", type=int, default=FORWARD_BATCH,
                   help="rows one forward pass runs (the backend's --forward-batch), for every setting")
    p.add_argument("--out", default="benchmarks/results/eval_memory/result.json")
    args = p.parse_args(argv)
    runs = {}
    for text in args.bounds.split(","):
        setting = dict(env=args.env, model=args.model, groups=args.groups, group_size=args.group_size,
                       max_turns=args.max_turns, max_new_tokens=args.max_new_tokens, bound=bound(text),
                       forward_batch=args.forward_batch)
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(setting)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the run with bound {text} failed:\n{done.stderr[-2000:]}")
        runs[text] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"bound {text}: {runs[text]}", flush=True)
    base = runs[args.bounds.split(",")[0]]
    print(f"\n{'kept-cache bound (MB)':>22s} {'peak MB':>9s} {'x peak':>7s} {'wall s':>8s} {'x time':>7s} "
          f"{'kept MB':>8s} {'not kept':>9s}")
    for text, r in runs.items():
        print(f"{text:>22s} {r['peak_mb']:9.0f} {r['peak_mb'] / base['peak_mb']:6.2f}x {r['wall_s']:8.1f} "
              f"{r['wall_s'] / base['wall_s']:6.2f}x {r['kept_mb_max']:8.0f} {r['caches_not_kept']:9d}")
    findings.write_result(args.out, {"settings": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
