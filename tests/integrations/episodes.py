"""What the adapter tests share: one scripted episode (an invalid reply, then the oracle's moves), the
same replies played on a local ChatEnv for the expected rewards, and the real framework package.

Replies are scripted as the model's generations: the text after the prefill (``<think>``) that every
prompt ends with, as this project's runner prompts. ``local_episode`` plays the prefill plus each.
"""

import importlib
import os

import pytest

from ragen_envs.agent import ChatEnv, ChatEnvConfig
from conftest import SMOKE

ENV = SMOKE
PREFILL = ChatEnvConfig().prefill


def require(module: str):
    """The real framework package. In .venv it is skipped when absent; in the venv `make
    test-frameworks` builds for it (RAGEN_FRAMEWORK set) a missing package fails the test."""
    if os.environ.get("RAGEN_FRAMEWORK"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason="`make test-frameworks` runs it in the framework's own venv")


def oracle_generation(chat: ChatEnv) -> str:
    action = chat.env.get_wrapper_attr("oracle_action")()
    return f"the oracle says {action}</think><answer>{action}</answer>"


def scripted_generations(seed: int) -> list[str]:
    """An invalid reply, then the oracle's moves, each as generated after the prefill."""
    chat = ChatEnv(ENV)
    chat.reset(seed=seed)
    generations = ["no format"]
    chat.step(PREFILL + generations[0])
    while not chat.done:
        generations.append(oracle_generation(chat))
        chat.step(PREFILL + generations[-1])
    return generations


def local_episode(seed: int, generations, prefill: str = PREFILL) -> ChatEnv:
    """The same generations played on a local ChatEnv (each reply the prefill plus the generation)."""
    chat = ChatEnv(ENV)
    chat.reset(seed=seed)
    for text in generations:
        chat.step(prefill + text)
        if chat.done:
            break
    return chat
