from ragen_envs.sudoku.env import SudokuEnv

__all__ = ["SudokuEnv"]
