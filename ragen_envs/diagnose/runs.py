"""A run folder of this project's trainer, diagnosed as the trainer scored it while it ran.

Iteration N's rollouts (``rollouts/iteration-N.jsonl``) were sampled by the weights of ``checkpoint-(N-1)``
(the trainer saves ``checkpoint-M`` after M updates). Each saved iteration is scored with the newest
checkpoint M <= N - 1 in the folder; ``lag`` = N - 1 - M says how many updates those weights are behind
the sampler (0: the very weights). Without such a checkpoint the step is scored with the fallback model
(by default the run's own starting model from its config.json, exact for iteration 1).

The scoring replays the trainer's: the same (prompt, reasoning) pairs drawn with the same seed, the same
prompts through ``<think>``, ``ragen_envs.diagnose.mi.diagnostics`` on the token ids the run kept, and the
MI-ZScore EMAs taken from the checkpoint when its lag is 0. So a step with lag 0 gets exactly the proxies
the trainer logged in metrics.jsonl for that iteration (tested).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragen_envs.diagnose.mi import diagnostics, pair_rng, scope_emas
from ragen_envs.diagnose.monitor import CollapseMonitor
from ragen_envs.diagnose.offline import judge, reward_row

CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
# the trainer's defaults, for a config.json that predates a field
DEFAULTS = {"mi_first_turn_pairs": 64, "mi_trajectory_pairs": 64}


@dataclass
class Step:
    """One saved iteration of a run and the weights that score it."""

    iteration: int
    rollouts: Path
    checkpoint: Path | None  # the newest checkpoint-M with M <= iteration - 1; None: the fallback model
    lag: int | None  # iteration - 1 - M: updates between the scoring weights and the sampling ones

    @property
    def scorer_note(self) -> str:
        if self.checkpoint is None:
            return "the fallback model" + (" (the run's starting weights)" if self.iteration == 1 else "")
        if self.lag == 0:
            return f"{self.checkpoint.name}: the weights that sampled these rollouts"
        return f"{self.checkpoint.name}: {self.lag} updates older than the weights that sampled these rollouts"


def run_config(run: str | Path) -> dict:
    """The run's config.json (what the trainer resolved), {} when it has none."""
    path = Path(run) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def checkpoints(run: str | Path) -> dict[int, Path]:
    """iteration -> checkpoint folder, for the complete ``checkpoint-M`` folders of a run."""
    run = Path(run)
    found = [p for p in run.iterdir() if p.is_dir() and CHECKPOINT.match(p.name)] if run.is_dir() else []
    return {int(CHECKPOINT.match(p.name).group(1)): p for p in found}


def plan(run: str | Path) -> list[Step]:
    """Every saved iteration of ``run`` with the checkpoint that scores it (the module docstring's rule)."""
    from ragen_envs.agent.trajectory import iteration_of, saved_iterations

    saved = checkpoints(run)
    steps = []
    for path in saved_iterations(run):
        n = iteration_of(path)
        before = [m for m in saved if m <= n - 1]
        m = max(before) if before else None
        steps.append(Step(n, path, None if m is None else saved[m], None if m is None else n - 1 - m))
    return steps


def diagnose_run(run: str | Path, load, fallback=None, progress=None) -> dict:
    """``{"rows": [...], "verdict": str, "collapse_step": int | None}`` of a run folder: a row per saved
    iteration, scored as the trainer scored it, and ``offline.judge``'s verdict.

    ``load(model)`` returns a policy (any backend's) for a checkpoint folder or for ``fallback`` (a path or
    hub id; None: the run's config.json ``model``); a policy is loaded once per distinct scorer, in order.
    A row holds ``step`` (the iteration), ``episodes``, ``groups``, the proxies of both scopes and families
    as the trainer logs them (``mi/``, ``mi_code/``, ``mi_traj/``, ``mi_traj_code/`` and their
    ``mi_zscore_ema``), ``reasoning_length`` (mean first-turn reasoning tokens), the reward statistics
    of ``reward_stats`` where groups allow, ``scorer`` (the folder or model that scored), ``scorer_lag`` and
    ``notes``, and ``warning``: ``CollapseMonitor``'s early warning on those proxies. ``progress(row)``, if
    given, hears of each row when it is done."""
    from ragen_envs.agent.trajectory import load_jsonl

    run = Path(run)
    config = {**DEFAULTS, **run_config(run)}
    fallback = fallback if fallback is not None else config.get("model")
    seed = int(config.get("rollout", {}).get("seed", 0))
    emas = scope_emas()
    monitor = CollapseMonitor(None)  # its warning rule only: the proxies come from the replay
    rows, loaded, policy = [], None, None
    for step in plan(run):
        source = step.checkpoint if step.checkpoint is not None else fallback
        if source is None:
            raise ValueError(f"{run}: iteration {step.iteration} has no checkpoint before it and the run's "
                             "config.json names no model: give the model that started the run")
        if source != loaded:
            policy, loaded = load(str(source)), source
        if step.lag == 0:  # the EMAs as the trainer had them before this iteration
            _load_emas(emas, step.checkpoint)
        trajectories = load_jsonl(step.rollouts)
        row = {"step": step.iteration, "episodes": len(trajectories),
               "groups": len({t.group for t in trajectories}), "scorer": str(source),
               "scorer_lag": step.lag, "scorer_note": step.scorer_note}
        row.update(reward_row([float(t.episode_return) for t in trajectories], [t.group for t in trajectories]))
        think = list(policy.tokenizer("<think>", add_special_tokens=False)["input_ids"])
        rng = pair_rng(seed, step.iteration - 1)  # the trainer's draw at this iteration
        row.update(diagnostics(policy, trajectories, int(config["mi_first_turn_pairs"]),
                               int(config["mi_trajectory_pairs"]), rng, emas, think))
        firsts = [len(t.turns[0].reasoning_ids) for t in trajectories if t.turns and t.turns[0].reasoning_ids]
        row["reasoning_length"] = float(np.mean(firsts)) if firsts else 0.0
        if "mi/retrieval_acc" in row:
            row["warning"] = monitor.observe(step.iteration, row)
        else:
            row["notes"].append("not scored: fewer than two groups with a first-turn reasoning")
        rows.append(row)
        if progress is not None:
            progress(row)
    verdict, collapse_step = judge(rows, monitor.entropy_band)
    return {"rows": rows, "verdict": verdict, "collapse_step": collapse_step}


def _load_emas(emas: dict, checkpoint: Path) -> None:
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text()).get("mi_ema", {})
    except (OSError, json.JSONDecodeError):
        return
    for name, ema in emas.items():
        if name in state:
            ema.load_state_dict(state[name])
