"""Template collapse, diagnosed in anyone's run: the mutual-information proxies of RAGEN-2 from any
policy backend's ``score``, from token ids or text, and a monitor for a training loop (docs/diagnose.md).

The names load on first use (module ``__getattr__``), so ``import ragen_envs.diagnose`` loads no torch,
transformers, trl or verl.
"""

import importlib

# public name -> the module of this package that defines it
_HOME = {
    "MIZScoreEMA": "mi",
    "cross_loglik": "mi",
    "diagnostics": "mi",
    "first_turn_pairs": "mi",
    "mi_metrics": "mi",
    "mi_metrics_code": "mi",
    "reasoning_stats": "mi",
    "trajectory_pairs": "mi",
    "encode_pairs": "texts",
    "read_reasoning": "texts",
    "score_texts": "texts",
    "CollapseMonitor": "monitor",
    "FilterConfig": "filtering",
    "LOW_RV_RATIO": "filtering",
    "select_groups": "filtering",
    "filter_preview": "rewards",
    "group_returns": "rewards",
    "reward_stats": "rewards",
    "Record": "readers",
    "read_records": "readers",
    "usable_steps": "readers",
    "RolloutLog": "log",
    "diagnose_records": "offline",
    "judge": "offline",
}

__all__ = sorted(_HOME)


def __getattr__(name):
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
