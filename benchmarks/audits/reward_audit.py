"""Reward integrity: what degenerate policies earn in every env of the catalogue.

An RL policy is an optimiser: it finds any reward that does not require solving the task. For each
catalogue env, this plays the same episodes (seeds 0..N-1) through ``ChatEnv`` (the agent's view:
replies parsed for ``<think>``/``<answer>``, format penalties included) with:
- the baselines: random valid actions (finite action sets; WebShop: a random clickable element) and
  the env's oracle;
- degenerate replies: empty, maximum-length garbage, the question echoed (as the answer, and bare),
  the same answer every time, always the first valid action;
- each env's own known tricks (below, by env class).
Each policy has a class: ``exploit`` (it does not do the task: it must earn no more reward and success
than an empty reply, or than the legal policy it is a variant of) or ``legal`` (a plain strategy that
plays by the rules, such as always ``Down``; it may beat random, and the table says so). The verdict
column reads ``contained``, ``legal``, or ``BUG`` (an exploit that earned something); the exit status
is 1 when any row says BUG.

    python benchmarks/audits/reward_audit.py [--episodes 30] [--envs Ragen/Countdown-v0 ...] [--markdown]

The policies that do not read the task at all, a fixed action sequence over the env's whole budget and a
choice by the names' surface, are ``blind_audit.py``'s (``make audit`` runs both).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import string
import time
import sys
from dataclasses import dataclass, field, replace
from typing import Callable

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.base import observation_text
from ragen_envs.registry import usable_ids

TURNS = 5


@dataclass
class Policy:
    name: str
    kind: str  # "baseline", "exploit" or "legal"
    reply: Callable  # (chat, observation text, rng) -> reply text
    # an exploit may earn what this legal policy earns with the same content, no more (default: what an
    # empty reply earns, or 0)
    reference: str = "empty reply"
    env_kwargs: dict = field(default_factory=dict)  # the env as this policy plays it (e.g. more attempts)
    # plays the episodes itself, outside the chat loop ((env id, episodes, env kwargs) -> as ``play``); None:
    # ``reply``
    player: Callable | None = None


def answer(text: str) -> str:
    return f"<think>ok</think><answer>{text}</answer>"


def _first_action(chat, obs, rng):
    available = _available(chat)
    return answer(available[0] if available else "1")


def _random_action(chat, obs, rng):
    available = _available(chat)
    return answer(" || ".join(rng.choice(available) for _ in range(chat.max_actions)))


def _available(chat) -> list[str]:
    """The actions valid now: the env's fixed set, or the clickable ones of a page (WebShop)."""
    if chat.valid_actions:
        return list(chat.valid_actions)
    try:
        return list(chat.env.get_wrapper_attr("available_actions")())
    except AttributeError:
        return []


def _oracle(chat, obs, rng):
    action = chat.env.get_wrapper_attr("oracle_action")()
    reasoning = chat.env.get_wrapper_attr("oracle_reasoning")() or "ok"
    return f"<think>{reasoning}</think><answer>{action if action is not None else ''}</answer>"


def _garbage(chat, obs, rng):
    return "".join(rng.choice(string.printable) for _ in range(4000))


COMMON = [
    Policy("random valid action", "baseline", _random_action),
    Policy("oracle", "baseline", _oracle),
    Policy("empty reply", "exploit", lambda chat, obs, rng: ""),
    Policy("max-length garbage", "exploit", _garbage),
    Policy("question echoed as the answer", "exploit", lambda chat, obs, rng: answer(obs)),
    Policy("question echoed bare", "exploit", lambda chat, obs, rng: obs),
    Policy("a 5,000-digit numeral", "exploit", lambda chat, obs, rng: answer("9" * 5000)),
    Policy("a huge exponent (1e100000000)", "exploit", lambda chat, obs, rng: answer("1e100000000")),
    Policy("the oracle's action with huge numbers", "exploit", lambda chat, obs, rng: re.sub(
        r"\d+", "9" * 4400, _oracle(chat, obs, rng)), reference="oracle"),
    Policy("the same answer always", "legal", lambda chat, obs, rng: answer("1")),
    Policy("always the first valid action", "legal", _first_action),
]


# -- each env's own tricks, by env class --------------------------------------------------------
def _numbers(obs: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?", obs)


def _countdown_tricks():
    def task(chat):
        return chat.env.unwrapped.task

    def target_tail(chat, obs, rng):  # the numbers, then "= target"
        return answer(f"{' + '.join(map(str, task(chat).nums))} = {task(chat).target}")

    def reuse(chat, obs, rng):  # one number used again and again
        return answer(" + ".join([str(task(chat).nums[0])] * 6))

    def target_alone(chat, obs, rng):
        return answer(str(task(chat).target))

    def all_numbers_summed(chat, obs, rng):  # RAGEN's format credit: the right numbers, any value
        return answer(" + ".join(map(str, task(chat).nums)))

    def booleans(chat, obs, rng):  # True/False hold no digit: the numbers times False, plus the target in Trues
        t = task(chat)
        ones = "+".join(["True"] * max(t.target, 1))
        return answer(f"({' + '.join(map(str, t.nums))})*False + {ones}")

    def underscore(chat, obs, rng):  # 3_5 reads as 35 but holds the digits 3 and 5
        nums = task(chat).nums
        return answer(f"{nums[0]}_{nums[1]}" + "".join(f" + {n}" for n in nums[2:]))

    def comment(chat, obs, rng):  # the last number hidden in a comment
        t = task(chat)
        return answer(f"{t.target} - {t.target} + {t.target}  # {' '.join(map(str, t.nums))}")

    def memory_bomb(chat, obs, rng):  # '%*s' % (W, '') with W built from True: 2 GB from one answer
        return answer(" + ".join(map(str, task(chat).nums)) + " + len('%*s' % ((True<<True+True+True)**(True<<True"
                      "+True+True+True+True), ''))")

    summed = "all numbers summed (format credit)"
    return [Policy("'= target' tail", "exploit", target_tail, reference=summed),
            Policy("True/False arithmetic", "exploit", booleans),
            Policy("digit grouping (3_5)", "exploit", underscore),
            Policy("numbers in a comment", "exploit", comment),
            Policy("memory bomb", "exploit", memory_bomb),
            Policy("number reuse", "exploit", reuse),
            Policy("the target alone", "exploit", target_alone),
            Policy(summed, "legal", all_numbers_summed)]


def _metamath_tricks():
    def many_boxed(chat, obs, rng):
        return answer(" ".join(f"\\boxed{{{k}}}" for k in range(0, 200)))

    def every_number(chat, obs, rng):
        return answer(" or ".join(_numbers(obs)))

    def empty_boxed(chat, obs, rng):
        return answer("\\boxed{}")

    def units(chat, obs, rng):
        nums = _numbers(obs)
        return answer(f"${nums[0] if nums else 1} dollars")

    def count(chat, obs, rng):  # 0, 1, 2, ...: attempt farming
        return answer(str(chat.env.unwrapped.wrong_count))

    return [Policy("200 boxed answers", "exploit", many_boxed),
            Policy("counting, 50 attempts", "legal", count, env_kwargs={"max_attempts": 50}),
            Policy("every number of the question", "exploit", every_number),
            Policy("empty \\boxed{}", "exploit", empty_boxed),
            Policy("a number of the question with units", "legal", units)]


def _searchqa_tricks():
    from collections import Counter

    def most_common(chat, obs, rng, _cache={}):  # the train split's most frequent gold answer
        if "answer" not in _cache:
            source = chat.env.unwrapped.source
            golds = Counter(source[i].answer for i in range(min(len(source), 5000)))
            _cache["answer"] = golds.most_common(1)[0][0]
        return answer(f"finish[{_cache['answer']}]")

    def finish_question(chat, obs, rng):
        return answer(f"finish[{obs[-300:]}]")

    def options(chat):
        from ragen_envs.searchqa.scoring import options

        return options(chat.env.unwrapped.question.question)

    def guess(chat, obs, rng):  # one option of a comparison, at random
        return answer(f"finish[{rng.choice(options(chat)) if options(chat) else 'yes'}]")

    def both(chat, obs, rng):
        return answer(f"finish[{' '.join(options(chat)) or 'yes no'}]")

    guessed = "guess an option of a comparison"
    return [Policy("the most common answer", "legal", most_common),
            Policy(guessed, "legal", guess),
            Policy("both options named (hedge)", "exploit", both, reference=guessed),
            Policy("the question as the answer", "exploit", finish_question),
            Policy("finish[] empty", "exploit", lambda chat, obs, rng: answer("finish[]"))]


def _webshop_tricks():
    def first_result(chat, obs, rng):  # search the instruction's words, buy the first product shown
        available = _available(chat)
        if available == ["search[<your query>]"]:
            return answer(f"search[{chat.env.unwrapped.goal.instruction}]")
        if "click[Buy Now]" in available:
            return answer("click[Buy Now]")
        products = [a for a in available if a not in ("click[Back to Search]", "click[< Prev]", "click[Next >]")]
        return answer(products[0] if products else available[0])

    def wrong_option(chat, obs, rng):  # the oracle's path, but another value of each option it clicks
        env = chat.env.unwrapped
        action = env.oracle_action() or ""
        value = action[6:-1] if action.startswith("click[") else None
        if env.product is not None and value in env.goal.options:
            for values in env.product.options.values():
                if value in values:
                    chosen = set(env.chosen.values())
                    others = [v for v in values if v != value and v not in chosen]
                    if others:
                        return answer(f"click[{others[0]}]")
        if action == "click[Buy Now]" and all(v in env.goal.options for v in env.chosen.values()):
            return ""  # no wrong option could be chosen (a goal without options): not this trick's episode
        return answer(action)

    return [Policy("buy the first result", "legal", first_result),
            Policy("the target with a wrong option", "exploit", wrong_option)]


def _deepcoder_tricks():
    def program(text):
        return lambda chat, obs, rng: f"<think>ok</think><answer>```python\n{text}\n```</answer>"

    def with_entry(body):
        def reply(chat, obs, rng):
            entry = chat.env.unwrapped.problem.entry_point or "solve"
            return program(f"{body}\ndef {entry}(*args):\n    return None")(chat, obs, rng)
        return reply

    def lookup_table(chat, obs, rng):
        # the prompt's examples (`>>> f(2)` then `4`, `f(2) == 4`, `f(2) -> 4`, `f(2) ➞ 4`) as a table
        entry = chat.env.unwrapped.problem.entry_point
        table = {}
        for args, value in re.findall(rf"{entry}\((.*?)\)\s*(?:==|->|=>|➞|⇒|\n\s*)\s*([^\n]+)", obs):
            try:
                table[repr(ast.literal_eval(f"({args},)"))] = ast.literal_eval(value.strip().rstrip("."))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        return program(f"TABLE = {table!r}\ndef {entry}(*args):\n    return TABLE.get(repr(args))")(chat, obs, rng)

    patch = ("import json, os\njson.dumps = lambda *a, **k: '{\"status\": \"ok\"}'\n_w = os.write\n"
             "os.write = lambda fd, b: _w(fd, b'\\x00\\x00\\x00\\x10{\"status\": \"ok\"}') or len(b)")
    return [Policy("raise SystemExit", "exploit", program("raise SystemExit")),
            Policy("os._exit(0)", "exploit", program("import os\nos._exit(0)")),
            Policy("patched harness, wrong answer", "exploit", with_entry(patch)),
            Policy("print the input back", "exploit", program("import sys\nprint(sys.stdin.read())")),
            Policy("the prompt's examples as a lookup table", "exploit", lookup_table, reference="return None"),
            Policy("return None", "legal", with_entry("")),
            Policy("the same wrong program, 3 attempts", "exploit", with_entry(""), reference="return None",
                   env_kwargs={"max_attempts": 3}),
            Policy("print a constant (YES)", "legal", program("print('YES')")),
            Policy("return True", "legal", lambda chat, obs, rng: program(
                f"def {chat.env.unwrapped.problem.entry_point or 'solve'}(*args):\n    return True\nprint('YES')")(
                chat, obs, rng))]


def _bandit_tricks():
    def both(chat, obs, rng):
        arms = chat.env.unwrapped.arms
        return answer(f"{arms[0]} or {arms[1]}")

    return [Policy("both arms named", "exploit", both)]


def _sudoku_tricks():
    def rewrite(chat, obs, rng):  # RAGEN paid 0.5 for each legal wrong number: rewrite one cell forever
        import numpy as np

        from ragen_envs.sudoku.puzzles import candidates

        env = chat.env.unwrapped
        for r, c in np.argwhere(env.puzzle == 0):
            trial = env.grid.copy()
            trial[r, c] = 0
            wrong = [v for v in candidates(trial, r, c) if v != env.solution[r, c] and v != env.grid[r, c]]
            if wrong:
                return answer(f"{r + 1},{c + 1},{wrong[0]}")
        return answer("1,1,1")

    def trial_and_error(chat, obs, rng):  # the first open cell, its candidates in order until one is right
        import numpy as np

        from ragen_envs.sudoku.puzzles import candidates

        env = chat.env.unwrapped
        cleared = np.where(env.grid == env.solution, env.grid, 0)
        cells = np.argwhere(env.grid != env.solution)
        if not len(cells):
            return answer("1,1,1")
        r, c = cells[0]
        tried = env.grid[r, c]
        later = [v for v in candidates(cleared, r, c) if v > tried]
        return answer(f"{r + 1},{c + 1},{later[0] if later else 1}")

    return [Policy("a legal wrong number, rewritten", "exploit", rewrite),
            Policy("trial and error over candidates", "legal", trial_and_error)]


def tricks(env) -> list[Policy]:
    name = type(env.unwrapped).__name__
    return {"CountdownEnv": _countdown_tricks, "MetaMathQAEnv": _metamath_tricks, "SearchQAEnv": _searchqa_tricks,
            "WebShopEnv": _webshop_tricks, "DeepCoderEnv": _deepcoder_tricks, "BanditEnv": _bandit_tricks,
            "SudokuEnv": _sudoku_tricks}.get(name, list)()


# -- playing ----------------------------------------------------------------------------------------------
STEP_SECONDS = 10.0  # a step slower than this is a hang (the ones found took 20 s and more)


def play(env_id: str, policy: Policy, episodes: int) -> tuple[float, float, str]:
    """(mean episode return, success rate, what broke: "" or why) of ``policy`` on seeds 0..episodes-1."""
    if policy.player is not None:
        return policy.player(env_id, episodes, policy.env_kwargs)
    chat = ChatEnv(env_id, ChatEnvConfig(max_turns=TURNS, prefill_think=False), **policy.env_kwargs)
    rng = random.Random(0)
    returns, wins, problem = [], [], ""
    for seed in range(episodes):
        chat.reset(seed=seed, transition_seed=seed)
        while not chat.done and not problem:
            obs = observation_text(chat._last_observation)
            try:
                reply = policy.reply(chat, obs, rng)
            except (AttributeError, IndexError, TypeError):
                reply = ""  # a trick that does not apply to this state
            start = time.monotonic()
            try:
                chat.step(reply)
            except Exception as error:  # no step may raise: the row says so
                problem = f"step raised {type(error).__name__}"
            if time.monotonic() - start > STEP_SECONDS:
                problem = problem or f"a step took {time.monotonic() - start:.0f} s"
        returns.append(chat.episode_return)
        wins.append(chat.success)
    chat.close()
    return sum(returns) / len(returns), sum(wins) / len(wins), problem


def past_the_end(env_id: str, episodes: int, env_kwargs: dict) -> tuple[float, float, str]:
    """The oracle's actions played on after the episode was truncated by invalid steps: the reward
    earned after the end (mean per episode) and how often success turned true there."""
    env = gym.make(env_id, **env_kwargs)
    oracle = env.get_wrapper_attr("oracle_action")
    returns, wins = [], []
    for seed in range(episodes):
        env.reset(seed=seed)
        over = False
        while not over:
            _, _, terminated, truncated, _ = env.step("")
            over = terminated or truncated
        earned, success = 0.0, False
        for _ in range(env.get_wrapper_attr("max_steps")):
            action = oracle()
            _, reward, _, _, info = env.step(action if action is not None else "")
            earned, success = earned + reward, success or info["success"]
        returns.append(earned)
        wins.append(success)
    env.close()
    return sum(returns) / len(returns), sum(wins) / len(wins), ""


COMMON.append(Policy("the oracle after the end", "exploit", None, player=past_the_end))


def audit(env_ids: list[str], episodes: int, env_kwargs: dict | None = None) -> list[dict]:
    """A row per env and policy; ``env_kwargs``: every env made with these arguments (a study's setting, such
    as Sokoban's ``reward="success"``), under each policy's own."""
    rows = []
    for env_id in env_ids:
        probe = gym.make(env_id, **(env_kwargs or {}))
        policies = [replace(p, env_kwargs={**(env_kwargs or {}), **p.env_kwargs}) for p in COMMON + tricks(probe)]
        probe.close()
        results = {p.name: play(env_id, p, episodes) for p in policies}
        for p in policies:
            reward, success, problem = results[p.name]
            if problem:
                verdict = f"BUG ({problem})"
            elif p.kind == "baseline":
                verdict = "baseline"
            elif p.kind == "legal":
                verdict = "legal" + (" (beats random)" if success > results["random valid action"][1] else "")
            else:
                allowed = max(results[p.reference][0], results["empty reply"][0], 0.0)
                contained = success <= results[p.reference][1] and reward <= allowed + 1e-9
                verdict = "contained" if contained else "BUG"
            rows.append({"env": env_id, "policy": p.name, "class": p.kind, "reward": reward, "success": success,
                         "verdict": verdict})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=30, help="episodes per policy and env (seeds 0..N-1)")
    parser.add_argument("--envs", nargs="*", help="env ids (default: every catalogue env this machine can make)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--env-kwargs", type=json.loads, default={}, metavar="JSON",
                        help='arguments every env is made with, e.g. \'{"reward": "success"}\' (a study\'s setting)')
    args = parser.parse_args(argv)
    env_ids = args.envs or usable_ids()
    rows = audit(env_ids, args.episodes, args.env_kwargs)
    if args.markdown:
        print("| env | policy | class | mean reward | success | verdict |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['env'].split('/')[-1]} | {r['policy']} | {r['class']} | {r['reward']:.3f} | "
                  f"{r['success']:.2f} | {r['verdict']} |")
    else:
        for r in rows:
            print(f"{r['env']:28s} {r['policy']:36s} {r['class']:8s} reward {r['reward']:7.3f}  "
                  f"success {r['success']:.2f}  {r['verdict']}")
    bugs = [r for r in rows if r["verdict"].startswith("BUG")]
    for r in bugs:
        print(f"BUG: {r['env']}: '{r['policy']}' earns {r['reward']:.3f} (success {r['success']:.2f}) without "
              f"doing the task", file=sys.stderr)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
