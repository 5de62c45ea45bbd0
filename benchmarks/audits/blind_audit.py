"""Policies that do not read the task: what they earn says whether an env tests what it claims.

Two policies, each fitted on training seeds and scored on held-out ones, against random valid actions
and the oracle on the same held-out seeds:

- **observation-blind**: one fixed action sequence played on every episode, whatever it shows. A beam
  search (``width`` plans kept a step, deduplicated by the states they reach) over the env's actions
  (its finite set; for open text, the oracle's most frequent actions on the training seeds and a few
  bare answers such as "1" or "yes"), up to the env's whole budget: its ``max_steps``, or fewer where
  the setting's replies and actions allow fewer (capped at ``max_plan``, which the table states).
- **surface-feature**: where an env offers named choices (Bandit's arms, SearchQA's comparison
  options), the choice that is longest, shortest, first or last in the alphabet, hyphenated, ...: the
  best such rule on the training seeds, scored on the held-out ones.

The rule for a bug: a blind or surface policy whose held-out success reaches random + half of
(oracle - random), unless the env's docs say why (``EXPLAINED``).

    python benchmarks/audits/blind_audit.py [--envs ...] [--seeds 200] [--markdown]
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from collections import Counter
from dataclasses import dataclass

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.registry import ENVIRONMENTS, usable_ids

SETTINGS = ("defaults", "ragen2-main")
HELD_OUT = 100_000  # held-out seeds start here; training seeds from 0
BARE_ANSWERS = ("0", "1", "2", "3", "yes", "no")  # what a blind policy answers an open-text task with
OPEN_TEXT_ACTIONS = 16  # the oracle's most frequent actions a blind policy may use in an open-text env

# (env package, setting) -> where the env's docs say why a policy that does not read the task may earn there
EXPLAINED = {
    ("rubikscube", "ragen2-main"): "ragen_envs/rubikscube/env.py: RAGEN's scramble depth 1 has six positions "
                                   "up to rotation, so eleven fixed moves solve it",
}


@dataclass
class Setting:
    """An env as one setting makes it: its arguments and the actions an episode may take."""
    env_id: str
    name: str
    env_kwargs: dict
    budget: int  # actions an episode may take


def setting(env_id: str, name: str) -> Setting:
    """The env's ``defaults`` (its arguments' defaults, its whole ``max_steps``) or a trainer preset's."""
    env = gym.make(env_id).unwrapped
    if name == "defaults":
        return Setting(env_id, name, {}, env.max_steps)
    from trainers.config import preset

    rollout = preset(name, env_id)["rollout"]
    kwargs = rollout.get("env_kwargs", {}).get(env_id, {})
    env = gym.make(env_id, **kwargs).unwrapped
    chat = rollout.get("chat", {})
    actions = chat.get("max_actions_per_turn", 2) if env.valid_actions else 1
    return Setting(env_id, name, kwargs, min(env.max_steps, chat.get("max_turns", 5) * actions))


def _make(s: Setting):
    return gym.make(s.env_id, **s.env_kwargs).unwrapped


def choices(env, info: dict) -> list[str]:
    """The actions an agent can see it may take now: the finite set, a page's links, a bandit's arms."""
    if env.valid_actions:
        return list(env.valid_actions)
    if hasattr(env, "available_actions"):
        return list(env.available_actions())
    return list(info.get("arms", ()))


def _played(env, s: Setting, seed: int, pick) -> bool:
    """Success of one episode where ``pick(env, info, step)`` gives each action (None: stop)."""
    _, info = env.reset(seed=seed, options={"transition_seed": seed})
    for step in range(s.budget):
        action = pick(env, info, step)
        if action is None:
            break
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return bool(info["success"])


def baselines(s: Setting, seeds: list[int]) -> tuple[float, float]:
    """(random valid actions' success, the oracle's) on ``seeds``."""
    env, rng = _make(s), random.Random(0)

    def rand(env, info, step):
        options = choices(env, info)
        return rng.choice(options) if options else ""

    random_success = sum(_played(env, s, seed, rand) for seed in seeds) / len(seeds)
    oracle_success = sum(_played(env, s, seed, lambda env, info, step: env.oracle_action()) for seed in seeds)
    return random_success, oracle_success / len(seeds)


def alphabet(s: Setting, seeds: list[int], open_text_actions: int = OPEN_TEXT_ACTIONS) -> list[str]:
    """The actions a blind plan is made of: the finite set, else the oracle's most frequent and bare answers."""
    env = _make(s)
    if env.valid_actions:
        return list(env.valid_actions)
    counts: Counter = Counter()

    def record(env, info, step):
        action = env.oracle_action()
        if action is not None:
            counts[action] += 1
        return action

    for seed in seeds:
        _played(env, s, seed, record)
    common = [a for a, _ in counts.most_common(open_text_actions)]
    return common + [a for a in BARE_ANSWERS if a not in common]


@dataclass
class Plan:
    actions: list[str]
    envs: list  # one env a seed, in the state the plan leaves it
    over: list[bool]
    success: list[bool]
    returns: list[float]

    @property
    def score(self) -> tuple[int, float]:
        return sum(self.success), sum(self.returns)


def _extend(plan: Plan, action: str, reuse: bool) -> tuple[Plan, tuple]:
    """``plan`` with ``action`` played on every running episode (on copies unless ``reuse``), and a
    signature of the states it reaches."""
    envs, over, success, returns, seen = [], [], [], [], []
    for env, done, won, ret in zip(plan.envs, plan.over, plan.success, plan.returns):
        if not done:
            env = env if reuse else copy.deepcopy(env)
            obs, reward, terminated, truncated, info = env.step(action)
            done, won, ret = terminated or truncated, bool(info["success"]), ret + reward
            seen.append(str(obs["text"] if isinstance(obs, dict) else obs))
        envs.append(env)
        over.append(done)
        success.append(won)
        returns.append(ret)
    return Plan(plan.actions + [action], envs, over, success, returns), (tuple(seen), tuple(over), tuple(success))


def _children(plan: Plan, actions: list[str], reuse: bool = False) -> list[Plan]:
    """``plan`` extended by each action, one child a distinct outcome."""
    children, signatures = [], set()
    for k, action in enumerate(actions):
        child, signature = _extend(plan, action, reuse=reuse and k == len(actions) - 1)
        if signature not in signatures:
            signatures.add(signature)
            children.append(child)
    return children


def blind_plan(s: Setting, seeds: list[int], actions: list[str], width: int = 8, max_plan: int = 40) -> list[str]:
    """The fixed action sequence that succeeds on most of ``seeds``: a beam search of ``width`` plans by
    success, then return. Where plans tie at the beam's edge, the tied ones are ranked by the best of
    their one-step extensions: a blind plan often needs a move that pays nothing, such as undoing the
    last, before the next that pays."""
    start = []
    for seed in seeds:
        env = _make(s)
        env.reset(seed=seed, options={"transition_seed": seed})
        start.append(env)
    root = Plan([], start, [False] * len(seeds), [False] * len(seeds), [0.0] * len(seeds))
    frontier, best = _children(root, actions, reuse=True), root
    for _ in range(min(s.budget, max_plan) - 1):
        best = max([best, *frontier], key=lambda p: p.score)
        kept = [plan for plan in _kept(frontier, actions, width) if not all(plan.over)]
        frontier = [child for plan in kept for child in _children(plan, actions, reuse=True)]
        if not frontier:
            break
    return max([best, *frontier], key=lambda p: p.score).actions


def _kept(frontier: list[Plan], actions: list[str], width: int) -> list[Plan]:
    """The ``width`` best plans of ``frontier``; those tied at the edge ranked by their best extension."""
    ranked = sorted(frontier, key=lambda p: p.score, reverse=True)
    if len(ranked) <= width or ranked[width - 1].score != ranked[width].score:
        return ranked[:width]
    edge = ranked[width - 1].score
    sure = [p for p in ranked if p.score > edge]
    tied = [p for p in ranked if p.score == edge]
    ahead = {id(p): max((c.score for c in _children(p, actions)), default=p.score) for p in tied}
    return sure + sorted(tied, key=lambda p: ahead[id(p)], reverse=True)[:width - len(sure)]


def plan_success(s: Setting, plan: list[str], seeds: list[int]) -> float:
    env = _make(s)
    return sum(_played(env, s, seed, lambda env, info, step: plan[step] if step < len(plan) else None)
               for seed in seeds) / len(seeds)


# -- surface features of named choices ----------------------------------------------------------------
VOWELS = set("aeiou")
FEATURES = {
    "length": len, "vowels": lambda n: sum(c in VOWELS for c in n.lower()),
    "hyphens": lambda n: n.count("-") + n.count(" "), "ends in er": lambda n: n.lower().endswith("er"),
    "alphabet": lambda n: [-ord(c) for c in n.lower()], "last letter": lambda n: -ord(n[-1].lower()),
    "distinct letters": lambda n: len(set(n.lower())), "capitals": lambda n: sum(c.isupper() for c in n),
}
# env class -> (its named choices now, the action that takes one)
NAMED_CHOICES = {
    "BanditEnv": (lambda env: list(env.arms), "{}"),
    "SearchQAEnv": (lambda env: _options(env.question.question), "finish[{}]"),
}


def _options(question: str) -> list[str]:
    from ragen_envs.searchqa.scoring import options

    return options(question)


def surface_rules() -> list[tuple[str, object]]:
    """(name, rule) for each feature, rule(names) -> the name it picks: highest, lowest, first, second."""
    rules = [("first shown", lambda names: names[0]), ("second shown", lambda names: names[-1])]
    for name, feature in FEATURES.items():
        rules.append((f"most {name}", lambda names, f=feature: max(names, key=f)))
        rules.append((f"least {name}", lambda names, f=feature: min(names, key=f)))
    return rules


def surface_success(s: Setting, rule, seeds: list[int]) -> float:
    env = _make(s)
    named, template = NAMED_CHOICES[type(env).__name__]

    def pick(env, info, step):
        names = named(env)
        return template.format(rule(names)) if step == 0 and names else None

    return sum(_played(env, s, seed, pick) for seed in seeds) / len(seeds)


def audit(env_id: str, name: str, seeds: int = 200, width: int = 8, max_plan: int = 40,
          open_text_actions: int = OPEN_TEXT_ACTIONS) -> list[dict]:
    """Rows of the blind and (where the env has named choices) surface policies in one setting."""
    s = setting(env_id, name)
    train, held = list(range(seeds)), list(range(HELD_OUT, HELD_OUT + seeds))
    rand, oracle = baselines(s, held)
    bar = rand + (oracle - rand) / 2
    plan = blind_plan(s, train, alphabet(s, train, open_text_actions), width, max_plan)
    capped = f", plans capped at {max_plan}" if s.budget > max_plan else ""
    what = f"{len(plan)} fixed actions" if plan else "none: no fixed action earns anything"
    rows = [("observation-blind", f"{what} (budget {s.budget}{capped})", plan_success(s, plan, held))]
    if type(_make(s)).__name__ in NAMED_CHOICES:
        fitted = max(surface_rules(), key=lambda r: surface_success(s, r[1], train))
        rows.append(("surface-feature", f"the {fitted[0]} name", surface_success(s, fitted[1], held)))
    out = []
    for policy, how, success in rows:
        bug = success >= bar and oracle > rand
        why = EXPLAINED.get((ENVIRONMENTS[env_id].package, name))
        verdict = ("explained: " + why) if bug and why else "BUG" if bug else "contained"
        out.append({"env": env_id, "setting": name, "policy": policy, "how": how, "success": success,
                    "random": rand, "oracle": oracle, "bar": bar, "verdict": verdict})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="*", help="env ids (default: every catalogue env this machine can make)")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--seeds", type=int, default=200, help="training seeds, and as many held-out ones")
    parser.add_argument("--width", type=int, default=8, help="plans the beam search keeps a step")
    parser.add_argument("--max-plan", type=int, default=40, help="longest blind plan searched")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        print("| env | setting | policy | what it plays | held-out success | random | oracle | verdict |\n"
              "|---|---|---|---|---|---|---|---|")
    bugs = 0
    for env_id in args.envs or usable_ids():
        for name in args.settings:
            rows = audit(env_id, name, args.seeds, args.width, args.max_plan)
            print_rows(rows, args.markdown)
            bugs += sum(r["verdict"] == "BUG" for r in rows)
    return 1 if bugs else 0


def print_rows(rows: list[dict], markdown: bool) -> None:
    for r in rows:
        cells = (r["env"].split("/")[-1], r["setting"], r["policy"], r["how"], f"{r['success']:.2f}",
                 f"{r['random']:.2f}", f"{r['oracle']:.2f}", r["verdict"])
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
