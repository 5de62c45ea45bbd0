from ragen_envs.sokoban.env import SokobanEnv

__all__ = ["SokobanEnv"]
