"""RL trainers for LLM agents (PPO, GRPO, DAPO, Dr. GRPO) with SNR-aware filtering and MI logging."""

from ragen_envs.diagnose.filtering import FilterConfig, select_groups
from ragen_envs.diagnose.mi import MIZScoreEMA, mi_metrics
from ragen_envs.extras import missing_module_hint
from trainers.config import EvalConfig, GradientProbeConfig, KLRewardConfig, LoRAConfig, SaveConfig, TrainerConfig

__all__ = ["EvalConfig", "FilterConfig", "GradientProbeConfig", "KLRewardConfig", "LoRAConfig", "MIZScoreEMA",
           "SaveConfig", "Trainer", "TrainerConfig", "mi_metrics", "select_groups"]


def __getattr__(name):
    # The trainer pulls in torch and transformers; the pure-numpy parts above do not.
    if name == "Trainer":
        try:
            from trainers.trainer import Trainer
        except ImportError as error:
            hint = missing_module_hint(error)
            if hint is None:
                raise
            raise ImportError(f"trainers.Trainer: {hint}", name=error.name) from error
        return Trainer
    raise AttributeError(name)
