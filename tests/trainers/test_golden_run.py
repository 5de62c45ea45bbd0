"""A short fixed-seed run recorded as a golden file, so a refactor of the trainer (issue 67: configs by
concern, one run lifecycle) can show it changed nothing: a small organism of the smoke env trained from
scratch, then 2 RL iterations (MI every iteration, the top-k filter, the gradient probe, a checkpoint each) and
a resume to a 3rd. Every number the run logs, timings and memory aside, must match golden_run.json.

Recorded on 2026-12-06 at be07523 (issue 67 begun: before the nested configs and the run lifecycle); recorded
again on 2026-12-07 after the nested configs, the in-reward KL (off) and pass@k, which only added
``rollout/pass@4`` (every number recorded before was equal).
To record it again after a change that means to alter training: RAGEN_RECORD_GOLDEN=1 pytest this file."""

import json
import math
import os
from dataclasses import replace
from pathlib import Path

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
from trainers import Trainer, TrainerConfig
from trainers.config import OrganismArchitecture, SFTConfig
from trainers.organism import from_scratch
from conftest import SMOKE, SMOKE_KWARGS

GOLDEN = Path(__file__).with_name("golden_run.json")
SMALL = OrganismArchitecture(layers=2, width=64, heads=2, corpus_episodes=10)
SKIPPED = ("time/", "memory/", "system/")  # what depends on the machine, not on the run
REL, ABS = 1e-4, 1e-6  # float sums in another order (another BLAS) stay within this


def golden_run(tmp: Path) -> list[dict]:
    organism = tmp / "organism"
    from_scratch([SMOKE], SFTConfig(episodes=40, output_dir=str(organism)), SMALL)
    rollout = RolloutConfig(n_groups=4, group_size=4, seed=7, chat=ChatEnvConfig(max_turns=2),
                            sampling=SamplingConfig(max_new_tokens=24), env_kwargs={SMOKE: dict(SMOKE_KWARGS)})
    config = TrainerConfig(algorithm="grpo", num_iterations=2, learning_rate=1e-3, mi_every=1, filter="top_k",
                           filter_value=0.5, gradient_analysis_every=2, save_steps=1, mini_batch_size=8,
                           micro_batch_size=8, mixed_precision="no", plot=False, logging_steps=0, report_to="auto",
                           output_dir=str(tmp / "run"), rollout=rollout)
    Trainer(str(organism), SMOKE, config).train()
    Trainer(str(organism), SMOKE, replace(config, num_iterations=3, resume_from_checkpoint="latest")).train()
    records = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(SKIPPED) and isinstance(v, (int, float))}
            for r in records]


def test_the_short_run_matches_its_golden_record(tmp_path):
    run = golden_run(tmp_path)
    if os.environ.get("RAGEN_RECORD_GOLDEN"):
        GOLDEN.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert [r["iteration"] for r in run] == [r["iteration"] for r in golden] == [1, 2, 3]
    assert any(k.startswith("mi/") for k in golden[0]) and any(k.startswith("grad_norm/") for k in golden[2])
    for got, want in zip(run, golden):
        assert sorted(got) == sorted(want), f"iteration {want['iteration']}: other metrics logged"
        off = {k: (got[k], want[k]) for k in want if not (got[k] == want[k] or (
            isinstance(want[k], float) and math.isclose(got[k], want[k], rel_tol=REL, abs_tol=ABS)))}
        assert off == {}, f"iteration {want['iteration']}: {off}"
