from ragen_envs.game2048.env import Game2048Env

__all__ = ["Game2048Env"]
