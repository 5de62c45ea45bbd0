"""The agent loop: prompts, reply parsing, grouped multi-turn rollouts, policy backends."""

from ragen_envs.agent.backends.base import Generation, Policy, SamplingConfig
from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig, TurnRecord
from ragen_envs.agent.parsing import ParsedResponse, parse_response
from ragen_envs.agent.rollout import RolloutConfig, RolloutRunner
from ragen_envs.agent.trajectory import Trajectory, Turn, load_jsonl, save_jsonl

__all__ = [
    "ChatEnv", "ChatEnvConfig", "Generation", "ParsedResponse", "Policy", "RolloutConfig", "RolloutRunner",
    "SamplingConfig", "Trajectory", "Turn", "TurnRecord", "load_jsonl", "parse_response", "save_jsonl",
]
