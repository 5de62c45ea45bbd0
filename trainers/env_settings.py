"""Each env's trainer settings: its part of each preset and its model organism's SFT settings.

They are settings of a run, not facts about the env, so they live here in the trainer layer rather than in
the catalogue (``ragen_envs/registry.py``, which never imports trainers). They are keyed by the env's
catalogue id, as the paper's configs name the envs (a variant, such as a harder level set, has an id and
settings of its own); ``tests/contract/test_registry.py`` checks that every key is a catalogue id and every
preset name one of ``trainers.config.PRESETS``. An env with no key here takes the presets' and
ORGANISM_SFT's settings as they are.
"""

from __future__ import annotations

from typing import Any

# Preset parts shared by several entries. RAGEN's grid games: 10 actions an episode (max_actions_per_traj);
# its single-answer tasks: one reply of one action (agent_proxy.max_turn: 1).
TEN_ACTIONS = {"ragen2-main": {"env_kwargs": {"max_steps": 10}}}
ONE_REPLY = {"ragen2-main": {"rollout": {"chat": {"max_turns": 1, "max_actions_per_turn": 1}}}}

#: env id -> preset name -> its part of that preset (trainers/config.py's ``preset``): nested TrainerConfig
#: fields, its env kwargs as "env_kwargs" (keyed by its id when applied)
PRESET_PARTS: dict[str, dict[str, dict[str, Any]]] = {
    "Ragen/Sokoban-v0": TEN_ACTIONS,
    "Ragen/SokobanLarger-v0": TEN_ACTIONS,
    "Ragen/SokobanCoord-v0": TEN_ACTIONS,
    "Ragen/SokobanGridVocab-v0": TEN_ACTIONS,
    "Ragen/SokobanVisual-v0": TEN_ACTIONS,
    "Ragen/FrozenLake-v0": TEN_ACTIONS,
    "Ragen/FrozenLakeSlippery-v0": TEN_ACTIONS,
    "Ragen/FrozenLakeCoord-v0": TEN_ACTIONS,
    "Ragen/FrozenLakeVisual-v0": TEN_ACTIONS,
    # RAGEN's MetamathQA: one answer (max_actions_per_traj 1), but up to 5 replies to give it in the format
    "Ragen/MetaMathQA-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 5, "max_actions_per_turn": 1}},
                                            "env_kwargs": {"max_attempts": 1}}},
    "Ragen/Countdown-v0": ONE_REPLY,
    # RAGEN's SearchQA (config/_9_search.yaml): 16 groups of 8, 5 replies of one action, 10 actions at most
    "Ragen/SearchQA-v0": {"ragen2-main": {"rollout": {"n_groups": 16, "group_size": 8,
                                                      "chat": {"max_turns": 5, "max_actions_per_turn": 1}},
                                          "env_kwargs": {"max_steps": 10}}},
    "Ragen/WebShop-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 9, "max_actions_per_turn": 1}}}},
    "Ragen/Bandit-v0": ONE_REPLY,
    "Ragen/BanditTest-v0": ONE_REPLY,
    # RAGEN's SimpleSudoku: 20 placements (one a reply here), 150 tokens a reply
    "Ragen/Sudoku-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 20, "max_actions_per_turn": 1},
                                                    "sampling": {"max_new_tokens": 150}}}},
    # RAGEN's MediumSudoku: 30 placements (one a reply), 150 tokens a reply
    "Ragen/SudokuMedium-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 30, "max_actions_per_turn": 1},
                                                          "sampling": {"max_new_tokens": 150}}}},
    # RAGEN's game_2048: one move a reply, 256 tokens a reply, episodes of up to 700 moves. Its config also
    # sets max_context_window 5, which RAGEN reads only in the single_turn and limited_multi_turn modes; the
    # mode stays base.yaml's "full" there, so the whole episode is in the prompt, as here (the same below)
    "Ragen/2048-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 700, "max_actions_per_turn": 1},
                                                  "sampling": {"max_new_tokens": 256}}}},
    # RAGEN's rubikscube (config/_10_rubikscube.yaml): 25 replies of up to 4 moves, 500 tokens a reply, the
    # whole episode in the prompt; 20 moves an episode (max_steps' default), scrambled one turn deep
    "Ragen/RubiksCube-v0": {"ragen2-main": {"rollout": {"chat": {"max_turns": 25, "max_actions_per_turn": 4},
                                                        "sampling": {"max_new_tokens": 500}},
                                            "env_kwargs": {"scramble_depth": 1}}},  # RAGEN's; solvable blind
    # RAGEN's DeepCoder run (ragen/env/deepcoder/run.sh): 16 groups of 8, one reply of up to 5,000 tokens,
    # mini-batches of 4, 200 steps, top-p 0.9 (linear) without zero-variance groups
    "Ragen/DeepCoder-v0": {"ragen2-main": {"num_iterations": 200, "mini_batch_size": 4, "filter_prob_mode": "linear",
                                           "include_zero": False,
                                           "rollout": {"n_groups": 16, "group_size": 8,
                                                       "chat": {"max_turns": 1, "max_actions_per_turn": 1},
                                                       "sampling": {"max_new_tokens": 5000}}}},
}

#: env id -> its model organism's SFT settings over trainers/config.py's ORGANISM_SFT, where it needs more
#: demonstrations to learn the env than the demo env does (`ragen sft --from-scratch`)
ORGANISM_SFT_PARTS: dict[str, dict[str, Any]] = {
    # at 2 epochs its organism misreads the coordinates and plays below random (0.05-0.07 greedy on
    # held-out boards, random 0.15); at 8 it plays 0.31-0.43 but GRPO does not lift it; with a quarter
    # of its demonstrated replies two moves long it starts at 0.32 and GRPO learns when two pay
    # (benchmarks/results/organism_learning-sokoban-mm25/)
    "Ragen/SokobanCoord-v0": {"epochs": 8, "multi_move": 0.25},
}
