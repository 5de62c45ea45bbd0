from ragen_envs.deepcoder.env import DeepCoderEnv

__all__ = ["DeepCoderEnv"]
