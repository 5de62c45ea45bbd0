"""Property-based fuzzing of every catalogue env: hostile text under a time and memory bound per step.

Each env (and the variants below) is driven by ``hypothesis``-generated episodes: hostile text (huge
numerals, exponents, unicode, control characters, nested brackets, repeated answers, the env's own
action formats filled with all of these, its oracle's action) and steps past the end. Every step must
keep the env contract (``ragen_envs/base.py``):
- ``step`` never raises, on any text;
- it returns within ``--step-seconds`` (a hang detector, not a speed test: the hangs found were
  20 s and more) and within ``--step-memory-mb`` of new address space (the bound is the process's
  ``RLIMIT_AS``, so a bomb fails as a MemoryError instead of taking the machine);
- the observation lies in its space, the reward is finite and within ``env.reward_range``;
- after the episode ended: nothing applied, reward 0, the same flags and observation, ``episode_over``.
Each env runs in a process of its own, so a step that hangs in C code (a huge integer) is caught by
the parent's deadline and named with the action it was stepping.

    python benchmarks/audits/env_fuzz.py [--examples 200] [--envs Ragen/Countdown-v0 ...]

``make test`` runs it with a small budget (tests/contract/test_env_fuzz.py; RAGEN_FUZZ_EXAMPLES raises it).

The env server's protocols and ``ragen view``'s loading of rollouts files have fuzzers of their own
(``server_fuzz.py``, ``viewer_fuzz.py``).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import resource
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.base import observation_text
from ragen_envs.registry import ENVIRONMENTS, usable_ids

# Variants whose scoring differs from the default (keyed by env class: the catalogue alone names ids).
VARIANTS = {"MetaMathQAEnv": [{"answer_check": "normalized"}, {"max_attempts": 1100}],
            "CountdownEnv": [{"answer_check": "strict"}],
            "DeepCoderEnv": [{"max_attempts": 3}]}
ORACLE = "\x00oracle"  # stands for the env's oracle action, looked up when it is stepped
MUTANT = "\x00mutant:"  # + text: the oracle's action with each of its numbers replaced by the text
TEMPLATES = ("<answer>{}</answer>", "finish[{}]", "search[{}]", "click[{}]", "place {} at row 1 col 1",
             "1,1,{}", "```python\n{}\n```", "\\boxed{{{}}}", "The answer is: {}", "{} = 24", "({}) * 2")


@dataclass
class Bounds:
    step_seconds: float = 10.0  # a step slower than this is a hang
    step_memory_mb: int = 1024  # new address space a step may take


def hostile_text():
    """A hypothesis strategy of hostile action texts."""
    from hypothesis import strategies as st

    # lengths at the edges that broke envs (Python's 4,300-digit int limit) as well as any
    digits = st.one_of(st.sampled_from([1, 5, 20, 400, 4301, 6000]), st.integers(1, 6000)).map(lambda n: "9" * n)
    exponents = st.integers(0, 10 ** 9).map(lambda e: f"1e{e}")
    brackets = st.tuples(st.sampled_from("([{<"), st.integers(1, 3000)).map(
        lambda p: p[0] * p[1] + "1" + {"(": ")", "[": "]", "{": "}", "<": ">"}[p[0]] * p[1])
    tricks = st.sampled_from(["True", "False", "True<<True", "3_5", "2*3.5", "'%*s' % (99, '')", "9**9**9",
                              "\x00", "\u202e", "\ufeff", "𝟗", "٣", "NaN", "inf", "-0", "1/0", "", " ", "\n" * 50])
    unicode_text = st.text(max_size=200)
    mutants = st.one_of(digits, exponents, tricks).map(lambda text: MUTANT + text)
    piece = st.one_of(digits, exponents, brackets, tricks, unicode_text, st.just(ORACLE), mutants)
    repeated = st.tuples(piece, st.integers(2, 1000)).map(lambda p: p[0] * min(p[1], 200_000 // max(len(p[0]), 1)))
    templated = st.tuples(st.sampled_from(TEMPLATES), piece).map(lambda p: p[0].format(p[1]))
    joined = st.lists(piece, min_size=2, max_size=6).map(" ".join)
    return st.one_of(piece, repeated, templated, joined)


# What a fast-forward steps again and again up to two steps before the limit: nothing, a wrong answer,
# a move, the oracle (None: no fast-forward)
FAST_FORWARD = (None, "", "9", "Up", "1,1,1", "finish[x]", "click[Buy Now]", ORACLE)


def check_episode(env, actions: list[str], fast_forward: str | None, bounds: Bounds, progress: str | None) -> None:
    """Play ``actions`` (after stepping ``fast_forward`` up to two steps before the limit, unless None)
    and assert the contract at each step; an AssertionError names the step and action."""
    seed = len(actions) % 7
    obs, _ = env.reset(seed=seed)
    unwrapped = env.unwrapped
    low, high = unwrapped.reward_range
    ended = False
    if fast_forward is not None:
        for _ in range(max(unwrapped.max_steps - 2, 0)):
            if ended:
                break
            action = (unwrapped.oracle_action() or "") if fast_forward == ORACLE else fast_forward
            obs, _, terminated, truncated, _ = env.step(action)
            ended = terminated or truncated
    for k, action in enumerate(actions):
        if action == ORACLE or action.startswith(MUTANT):
            oracle = unwrapped.oracle_action() or ""
            action = oracle if action == ORACLE else re.sub(r"\d+", lambda m: action[len(MUTANT):], oracle)
        where = f"step {k} of seed {seed}, action {action[:120]!r} ({len(action)} chars)"
        if progress:
            with open(progress, "w") as f:
                f.write(where)
        before = observation_text(obs) if not hasattr(obs, "shape") else None
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 2 * bounds.step_seconds)
        try:
            result = env.step(action)
        except Exception as error:  # the contract: no step raises
            raise AssertionError(f"{where}: raised {type(error).__name__}: {str(error)[:300]}") from error
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.monotonic() - start
        obs, reward, terminated, truncated, info = result
        assert seconds <= bounds.step_seconds, f"{where}: took {seconds:.1f} s"
        assert unwrapped.observation_space.contains(obs), f"{where}: observation outside its space"
        assert math.isfinite(reward) and low - 1e-9 <= reward <= high + 1e-9, \
            f"{where}: reward {reward} outside {unwrapped.reward_range}"
        if ended:
            assert reward == 0.0 and info["episode_over"] and not info["action_is_effective"], \
                f"{where}: stepped past the end (reward {reward}, info {info})"
            assert before is None or observation_text(obs) == before, f"{where}: observation changed past the end"
        else:
            assert info["episode_over"] is False, f"{where}: episode_over before the end"
        ended = ended or terminated or truncated


def _on_alarm(signum, frame):
    raise TimeoutError("step past twice its time bound")


def fuzz_one(env_id: str, kwargs: dict, examples: int, bounds: Bounds, progress: str | None = None) -> str | None:
    """Fuzz one env in this process; None, or what broke (hypothesis's failing example)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    warnings.filterwarnings("ignore", "Generating overly large repr")  # hostile examples are large
    env = gym.make(env_id, **kwargs)
    alarm = signal.signal(signal.SIGALRM, _on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + bounds.step_memory_mb * 2 ** 20, hard))
    try:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],  # no shrinking: a hang shrinks for ever
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(hostile_text(), min_size=1, max_size=6), st.sampled_from(FAST_FORWARD))
        def episode(actions, fast_forward):
            check_episode(env, actions, fast_forward, bounds, progress)

        episode()
    except Exception as error:  # hypothesis re-raises the first failure, with its example in the notes
        notes = "\n".join(getattr(error, "__notes__", []))
        return f"{str(error)[:600]}\n{notes[:600]}".strip()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, alarm)
        env.close()
    return None


def _child(env_id, kwargs, examples, bounds, progress, queue):
    queue.put(fuzz_one(env_id, kwargs, examples, bounds, progress))


def fuzz(env_id: str, kwargs: dict | None = None, examples: int = 20, bounds: Bounds | None = None,
         timeout: float = 600.0) -> str | None:
    """Fuzz one env in a process of its own: None when it kept the contract, else what broke (a hang
    past ``timeout`` is named with the action it was stepping)."""
    bounds = bounds or Bounds()
    with tempfile.NamedTemporaryFile("r", suffix=".step") as progress:
        answered, result, exitcode = in_child(_child, (env_id, kwargs or {}, examples, bounds, progress.name), timeout)
        if answered:
            return result
        where = open(progress.name).read()
    if exitcode is not None:
        return f"the process died (exit {exitcode}) at {where}"
    return f"no answer within {timeout:.0f} s: hung at {where}"


def in_child(target, args: tuple, timeout: float) -> tuple[bool, object, int | None]:
    """Run ``target(*args, queue)`` in a spawned process, which puts one answer on ``queue``: (True, the
    answer, None), or (False, None, its exit code) when it died first, or (False, None, None) when it gave
    no answer within ``timeout`` seconds (it is killed then). A hang in C code cannot stop the caller."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    deadline = time.monotonic() + timeout
    while child.is_alive() and time.monotonic() < deadline and queue.empty():
        child.join(0.2)
    if not queue.empty():
        result = queue.get()
        child.join(10)
        return True, result, None
    died = not child.is_alive() and child.exitcode not in (None, 0)
    child.kill()
    child.join()
    return False, None, child.exitcode if died else None


def targets(env_ids: list[str]) -> list[tuple[str, dict]]:
    """(env id, kwargs) of every env and its scoring variants."""
    out = []
    for env_id in env_ids:
        entry = ENVIRONMENTS[env_id]
        name = entry.entry_point.split(":")[1]
        out += [(env_id, {})] + [(env_id, v) for v in VARIANTS.get(name, [])]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="episodes per env (hypothesis examples)")
    parser.add_argument("--envs", nargs="*", help="env ids (default: every catalogue env this machine can make)")
    parser.add_argument("--step-seconds", type=float, default=Bounds.step_seconds)
    parser.add_argument("--step-memory-mb", type=int, default=Bounds.step_memory_mb)
    args = parser.parse_args(argv)
    env_ids = args.envs or usable_ids()
    bounds = Bounds(args.step_seconds, args.step_memory_mb)
    broken = 0
    for env_id, kwargs in targets(env_ids):
        start = time.monotonic()
        problem = fuzz(env_id, kwargs, args.examples, bounds)
        label = env_id + (f" {kwargs}" if kwargs else "")
        print(f"{label:60s} {'ok' if problem is None else 'BROKEN'}  ({time.monotonic() - start:.0f} s)", flush=True)
        if problem:
            broken += 1
            print("    " + problem.replace("\n", "\n    "), file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
