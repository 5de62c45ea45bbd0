from ragen_envs.rubikscube.env import RubiksCubeEnv

__all__ = ["RubiksCubeEnv"]
