"""Environment throughput: reset and step rates, and Sokoban level generation times.

Prints, in one run:
1. reset/s and step/s of every env of the catalogue (text observations; the grid games also with
   image and both), next to Gymnasium's FrozenLake-v1 (integer observations, fixed 4x4 map);
2. Sokoban generation time (mean, p99, max) by room size, ours next to gym-sokoban's generator
   (``pip install --no-deps gym-sokoban``; skipped when absent), with the ratio of means, plus the
   whole reset (generation and the optimal-length solve);
3. the reset's tail at 10x10 with 3 boxes: mean / p99 / max over 1,000 seeds, and how many levels
   ran past the solver's node budget (``solver_nodes``) and report no optimal length;
4. SearchQA's retrieval: BM25 index build time against a reset with the shared index (what sharing
   saves per env), query latency (mean / p99) and recall@3 of the supporting passage by question kind;
5. WebShop's product search latency;
6. DeepCoder's sandbox on every built-in reference solution (HumanEval's canonical solutions and the
   generated problems' references): the share that pass (must be 100%), and the cost per submission
   and per test, bubblewrap next to the rlimit-only runner in a plain subprocess.

    python benchmarks/speed/env_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import time
import warnings

import gymnasium as gym
import numpy as np

from ragen_envs.grid import GridEnv
from ragen_envs.registry import ENVIRONMENTS, ids_in, load_class
from ragen_envs.sokoban.generator import generate_level

ROOMS = [((6, 6), 1), ((8, 8), 2), ((10, 10), 3)]


def rates(make, actions, seconds):
    """(resets/s, steps/s) of an env, each measured for about `seconds`."""
    env = make()
    env.reset(seed=0)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.reset(seed=n)
        n += 1
    reset_rate = n / (time.perf_counter() - start)
    env.reset(seed=0)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(actions[n % len(actions)])
        n += 1
        if terminated or truncated:
            env.reset()
    step_rate = n / (time.perf_counter() - start)
    env.close()
    return reset_rate, step_rate


def oracle_actions(env_id: str, episodes: int = 5) -> list[str]:
    """Open-text envs: the oracle's actions over a few episodes (answers, queries, expressions)."""
    env = gym.make(env_id)
    actions = []
    for seed in range(episodes):
        env.reset(seed=seed)
        action = env.unwrapped.oracle_action()
        if action is not None:
            actions.append(action)
    return actions


def retrieval(quick: bool) -> None:
    from ragen_envs.bm25 import BM25Index
    from ragen_envs.searchqa import corpus
    from ragen_envs.searchqa.retrieval import PassageIndex

    print("\n== SearchQA retrieval (BM25, bm25s) ==")
    passages, questions = corpus.build()
    start = time.perf_counter()
    BM25Index([f"{p.title}. {p.text}" for p in passages])
    build_ms = (time.perf_counter() - start) * 1e3
    env = gym.make(ids_in("searchqa")[0])
    reset_ms = timings(lambda i: env.reset(seed=i), 200)[0]
    print(f"{len(passages)} passages: index built in {build_ms:.0f} ms; a reset with the shared index takes "
          f"{reset_ms * 1e3:.0f} us ({build_ms / reset_ms:.0f}x less than an index per env)")
    index = PassageIndex(passages)
    chosen = questions[::4] if quick else questions
    latency = timings(lambda i: index.search(chosen[i].question, 3), len(chosen))
    print(f"query latency over {len(chosen)} questions: mean {latency[0]:.2f} ms, p99 {latency[1]:.2f} ms")
    for kind in ("single", "bridge", "comparison"):
        asked = [q for q in chosen if q.kind == kind]
        hits = sum(any(h.passage.id in q.supporting for h in index.search(q.question, 3)) for q in asked)
        print(f"recall@3 of a supporting passage, {kind:10s}: {hits / len(asked):.3f} ({len(asked)} questions)")


def shop_search(quick: bool) -> None:
    env = gym.make(ids_in("webshop")[0]).unwrapped
    env.reset(seed=0)
    goals = [env.source[i] for i in range(100 if quick else 500)]
    latency = timings(lambda i: env._index.search(goals[i].query, env.max_results), len(goals))
    print(f"\n== WebShop product search ({len(env.products)} products, BM25) ==\n"
          f"query latency over {len(goals)} goals: mean {latency[0]:.2f} ms, p99 {latency[1]:.2f} ms")


def sandbox_cost(quick: bool) -> None:
    from ragen_envs.deepcoder import problems
    from ragen_envs.deepcoder.env import passed
    from ragen_envs.deepcoder.sandbox import RlimitOnly, bubblewrap_problem, make_sandbox

    print("\n== DeepCoder sandbox, reference solutions ==")
    try:
        chosen = problems.builtin()
    except ValueError as error:
        print(f"(skipped: {error})")
        return
    chosen = chosen[::5] if quick else chosen
    backends = {}
    if bubblewrap_problem() is None:
        backends["bubblewrap"] = make_sandbox()
    else:
        print(f"(bubblewrap skipped: {bubblewrap_problem()})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backends["plain subprocess (rlimit)"] = RlimitOnly()
    costs = {}
    for name, box in backends.items():
        tests = good = 0
        start = time.perf_counter()
        for p in chosen:
            program = problems.program_of(p.solution, p)
            runs = box.run(program, [{k: v for k, v in t.items() if k != "expected"} for t in p.tests])
            good += all(passed(t, r) for t, r in zip(p.tests, runs))
            tests += len(p.tests)
        seconds = time.perf_counter() - start
        costs[name] = seconds / len(chosen)
        print(f"{name:28s} {good}/{len(chosen)} reference solutions pass ({100 * good / len(chosen):.1f}%); "
              f"{1e3 * seconds / len(chosen):.1f} ms per submission, {1e3 * seconds / tests:.2f} ms per test "
              f"({tests} tests)")
    if len(costs) == 2:
        bw, plain = costs.values()
        print(f"bubblewrap costs {bw / plain:.2f}x the plain subprocess per submission")


def gym_sokoban_generator():
    """gym-sokoban's generate_room, loaded from its file (its package __init__ needs the old gym)."""
    spec = importlib.util.find_spec("gym_sokoban")
    if spec is None:
        return None
    path = spec.submodule_search_locations[0] + "/envs/room_utils.py"
    module_spec = importlib.util.spec_from_file_location("gym_sokoban_room_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)

    def generate(dim, num_boxes):
        while True:  # as gym-sokoban's env: retry when a room scores 0
            try:
                return module.generate_room(dim=dim, num_steps=int(1.7 * sum(dim)), num_boxes=num_boxes)
            except (RuntimeError, RuntimeWarning):
                continue

    return generate


def timings(fn, count):
    out = []
    for i in range(count):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    ms = np.array(out) * 1e3
    return ms.mean(), np.percentile(ms, 99), ms.max()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer samples")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else 2.0

    print("== reset and step rates (per second, one process) ==")
    baseline = rates(lambda: gym.make("FrozenLake-v1", is_slippery=False), [0, 1, 2, 3, 3, 0], seconds)
    print(f"{'env':44s} {'reset/s':>10s} {'step/s':>10s} {'step vs FrozenLake-v1':>22s}")
    label = "FrozenLake-v1 (Gymnasium, baseline)"
    print(f"{label:44s} {baseline[0]:10.0f} {baseline[1]:10.0f} {'1.00x':>22s}")
    for entry in ENVIRONMENTS.values():
        grid = issubclass(load_class(entry), GridEnv)
        actions = gym.make(entry.id).unwrapped.valid_actions or oracle_actions(entry.id) + ["hello"]
        for obs_type in ("text", "image", "both") if grid and not entry.kwargs else ("text",):
            kwargs = {"observation_type": obs_type} if grid else {}
            r = rates(lambda: gym.make(entry.id, **kwargs), actions, seconds)
            label = f"{entry.id} ({obs_type})"
            print(f"{label:44s} {r[0]:10.0f} {r[1]:10.0f} {r[1] / baseline[1]:21.2f}x")

    print("\n== Sokoban level generation, ms per level ==")
    peer = gym_sokoban_generator()
    if peer is None:
        print("(gym-sokoban not installed: `pip install --no-deps gym-sokoban` to compare)")
    count = 50 if args.quick else 300
    peer_count = 5 if args.quick else 20
    header = f"{'room':>12s} {'ours mean':>10s} {'p99':>7s} {'max':>7s} {'+solve mean':>12s} {'max':>7s}"
    if peer:
        header += f" {'gym-sokoban mean':>17s} {'p99':>8s} {'max':>8s} {'speed-up':>9s}"
    print(header)
    for dim, boxes in ROOMS:
        rng = np.random.default_rng(0)
        ours = timings(lambda i: generate_level(rng, dim, boxes, 300), count)
        env = gym.make(ids_in("sokoban")[0], dim_room=dim, num_boxes=boxes).unwrapped
        with_solve = timings(lambda i: env.reset(seed=i), count)
        line = (f"{f'{dim[0]}x{dim[1]}, {boxes} box':>12s} {ours[0]:10.2f} {ours[1]:7.2f} {ours[2]:7.2f} "
                f"{with_solve[0]:12.2f} {with_solve[2]:7.2f}")
        if peer:
            random.seed(0)
            np.random.seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = timings(lambda i: peer(dim, boxes), peer_count)
            line += f" {theirs[0]:17.1f} {theirs[1]:8.1f} {theirs[2]:8.1f} {theirs[0] / ours[0]:8.0f}x"
        print(line)

    print("\n== Sokoban reset tail, 10x10 with 3 boxes ==")
    env = gym.make(ids_in("sokoban")[0], dim_room=(10, 10), num_boxes=3).unwrapped
    seeds = 200 if args.quick else 1000
    over_budget = []
    mean, p99, worst = timings(lambda i: over_budget.append(env.reset(seed=i)[1]["optimal_solution_length"] is None),
                               seeds)
    print(f"{seeds} seeds: mean {mean:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms; "
          f"{sum(over_budget)} over the solver budget ({env.solver_nodes} nodes)")
    if importlib.util.find_spec("bm25s") and importlib.util.find_spec("countryinfo"):
        retrieval(args.quick)
        shop_search(args.quick)
    else:
        print('\n(SearchQA and WebShop search skipped: pip install "ragen-envs[search]")')
    sandbox_cost(args.quick)


if __name__ == "__main__":
    main()
