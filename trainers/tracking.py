"""Weights & Biases for the trainer (``--report-to wandb``): the metrics of metrics.jsonl at step =
iteration, under their own names and, where RAGEN logs the same quantity, under RAGEN's name too
(``RAGEN_NAMES``); the run's config.json as the W&B config; a few episodes of each iteration's rollout
as a table (``rollout/generations``: prompt, reply, reward, success), as RAGEN's
``generations_to_log_to_wandb`` does for its validation episodes.

W&B's own variables apply (WANDB_MODE=offline, WANDB_PROJECT, WANDB_ENTITY, ...). Its files go to
WANDB_DIR when set, else to the run folder's wandb/. Each trainer process is one W&B run named after the
run folder (a resumed run is a new W&B run in the same group: W&B drops steps logged out of order, and a
resume trains again the iterations after its last checkpoint).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

# Episodes per iteration in the table (RAGEN logs 20 of each validation; training rollouts come every
# iteration, so fewer).
EPISODES_PER_ITERATION = 4

# Our name -> RAGEN's W&B name, for the quantities computed as its code computes them
# (ragen/trainer/collapse_metrics.py: first-turn and trajectory scopes, per-token-first MI; rollout_filter.py).
RAGEN_NAMES = {
    "mi_code/mi_est": "collapse_first_turn_sample/mi_estimate",
    "mi/mi_seq_est": "collapse_first_turn_sample/mi_seq_estimate",
    "mi_code/mi_zscore": "collapse_first_turn_sample/mi_zscore",
    "mi_code/mi_zscore_ema": "collapse_first_turn_sample/mi_zscore_ema",
    "mi_code/marginal_std": "collapse_first_turn_sample/marginal_std",
    "mi/retrieval_acc": "collapse_first_turn_sample/retrieval_accuracy",
    "mi/retrieval_chance": "collapse_first_turn_sample/retrieval_chance_level",
    "mi/retrieval_above_chance": "collapse_first_turn_sample/retrieval_above_chance",
    "mi_traj_code/mi_est": "collapse_trajectory_sample/mi_estimate",
    "mi_traj/retrieval_acc": "collapse_trajectory_sample/retrieval_accuracy",
    "mi/valid_thinking_rate": "collapse/valid_thinking_rate",
    "filter/kept_ratio": "rollout/filter_kept_ratio",
    "filter/kept_groups": "rollout/filter_kept_count",
    "filter/in_group_reward_std": "rollout/in_group_reward_std",
}
TABLE_KEY = "rollout/generations"
COLUMNS = ["iteration", "env", "seed", "group", "prompt", "reply", "turns", "reward", "success"]


def wandb_dir(run_dir: Path) -> str:
    """Where the W&B files go: WANDB_DIR, else the run folder (passed on: wandb reads its variables once a
    process)."""
    return os.environ.get("WANDB_DIR") or str(run_dir)


def _text(content) -> str:
    """A message's text; a multimodal message's images as <image>."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) and part.get("type") == "text" else "<image>"
                   for part in content or [])


def _render(messages: list[dict]) -> str:
    return "\n\n".join(f"[{m.get('role', '?')}] {_text(m.get('content'))}" for m in messages)


def episode_rows(trajectories, iteration: int, n: int = EPISODES_PER_ITERATION) -> list[list]:
    """``n`` of the iteration's episodes (drawn with the iteration as the seed) as table rows: the prompt
    is the conversation up to the first reply, the reply all that follows (replies and env feedback)."""
    picked = sorted(random.Random(iteration).sample(range(len(trajectories)), min(n, len(trajectories))))
    rows = []
    for i in picked:
        t = trajectories[i]
        first = next((k for k, m in enumerate(t.messages) if m.get("role") == "assistant"), len(t.messages))
        rows.append([iteration, t.env_id, t.seed, t.group, _render(t.messages[:first]), _render(t.messages[first:]),
                     t.num_turns, float(t.episode_return), bool(t.success)])
    return rows


class WandbRun:
    """One W&B run: ``log`` the iteration's metrics (and the episodes ``add_episodes`` kept), ``close``."""

    def __init__(self, run_dir: Path, config: dict | None = None):
        import wandb

        self.wandb = wandb
        run_dir = Path(run_dir)
        self.run = wandb.init(name=run_dir.name, group=run_dir.name, job_type="train", config=config or {},
                              dir=wandb_dir(run_dir), reinit="create_new")
        self._rows: list[list] = []

    def add_episodes(self, trajectories, iteration: int) -> None:
        self._rows = episode_rows(trajectories, iteration)

    def log(self, metrics: dict) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        data = {**numbers, **{RAGEN_NAMES[k]: v for k, v in numbers.items() if k in RAGEN_NAMES}}
        if self._rows:
            data[TABLE_KEY] = self.wandb.Table(columns=COLUMNS, data=self._rows)
            self._rows = []
        self.run.log(data, step=int(metrics["iteration"]))

    def close(self) -> None:
        self.run.finish()
