"""How many torch threads, and which OpenMP wait policy, on a shared CPU machine? A fixed piece of training
work (forward and backward of a small transformer, the organism's scale) timed in a fresh process per
candidate, quiet and beside ``--load`` busy processes (each spinning one core, as another job would),
side by side with torch's default (one thread per core, OpenMP's spin-wait).

    python benchmarks/speed/threads_under_load.py [--load 1] [--steps 30] [--repeats 2]

Candidates: torch's default; 1 thread; ``ragen``'s auto choice (``ragen_envs.agent.threads``: the cores
the load leaves free); each of those with ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at a barrier instead
of spinning). Prints seconds per candidate (median of ``--repeats``) and its ratio to the default, quiet
and under load, and writes benchmarks/results/threads_under_load.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORK = """
import os, time, torch
from ragen_envs.agent.threads import set_threads
threads = os.environ.get("RAGEN_BENCH_THREADS")
if threads:
    set_threads(None if threads == "auto" else int(threads))
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
model = torch.nn.TransformerEncoder(layer, 4)
optimizer = torch.optim.AdamW(model.parameters(), 1e-4)
x = torch.randn(16, 128, 256)
start = time.perf_counter()
for _ in range({steps}):
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(time.perf_counter() - start, torch.get_num_threads())
"""

CANDIDATES = {"torch default": {}, "1 thread": {"RAGEN_BENCH_THREADS": "1"},
              "auto": {"RAGEN_BENCH_THREADS": "auto"}}


def spin(stop) -> None:
    while not stop.is_set():
        pass


def timed(env: dict, steps: int) -> tuple[float, int]:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", WORK.format(steps=steps)], env={**base, **env},
                          capture_output=True, text=True, check=True, timeout=3600)
    seconds, threads = done.stdout.split()
    return float(seconds), int(threads)


def measure(steps: int, repeats: int) -> dict:
    out = {}
    for name, env in CANDIDATES.items():
        for policy in ("", "PASSIVE"):
            label = f"{name}, wait {policy}" if policy else name
            runs = [timed({**env, **({"OMP_WAIT_POLICY": policy} if policy else {})}, steps) for _ in range(repeats)]
            out[label] = {"seconds": statistics.median(s for s, _ in runs), "threads": runs[0][1]}
            print(f"  {label:28s} {out[label]['seconds']:7.1f} s  ({out[label]['threads']} threads)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", type=int, default=1, help="busy processes beside the work")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "results" / "threads_under_load.json")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; quiet:", flush=True)
    quiet = measure(args.steps, args.repeats)
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.load)]
    for p in spinners:
        p.start()
    time.sleep(2)  # the spinners running before the first timing (the printed load average sees them too)
    print(f"beside {args.load} busy process(es), load average {os.getloadavg()[0]:.2f}:", flush=True)
    try:
        loaded = measure(args.steps, args.repeats)
    finally:
        stop.set()
        for p in spinners:
            p.join()
    base_q, base_l = quiet["torch default"]["seconds"], loaded["torch default"]["seconds"]
    print(f"\n{'candidate':28s} {'quiet s':>8s} {'x default':>9s} {'loaded s':>9s} {'x default':>9s}")
    for label in quiet:
        q, lo = quiet[label]["seconds"], loaded[label]["seconds"]
        print(f"{label:28s} {q:8.1f} {q / base_q:9.2f} {lo:9.1f} {lo / base_l:9.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cores": os.cpu_count(), "load": args.load, "steps": args.steps,
                                    "quiet": quiet, "loaded": loaded}, indent=1) + "\n")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
