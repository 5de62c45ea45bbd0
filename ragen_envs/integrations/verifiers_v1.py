"""verifiers 0.4 (``verifiers.v1``): any registered env as a verifiers taskset and env.

    vf-eval ragen-envs-verifiers --env.taskset.env-id Ragen/Sokoban-v0 ...

or, from Python, ``load_environment(env_id, num_examples)`` returns the ``vf.Env``. The taskset holds
one task per env seed: the env's first prompt (system prompt and first user message, as ``ChatEnv``
writes them) and ``info`` naming the episode. ``RagenEnv.run(task, agents)`` plays it as the
run's user, as verifiers' own TextArena taskset plays its games: the player's reply goes to
``ChatEnv``, the env's next user message comes back as the next turn, and a finished episode ends
the exchange.

verifiers' harness renders the chat and calls the model itself, so the prompt cannot end with the
reply's prefill (``<think>``, ``ChatEnvConfig.prefill``) as this project's runner ends it: a reply is
read as the prefill followed by the reply, unless the reply opens with the prefill already.

What the env's reward becomes: ``trace.record_reward("episode_return", return, 1.0)``, the trace's
reward (the episode's return, format penalties included); ``success`` is a metric
(``trace.record_metric``) and ``trace.info["ragen"]`` holds the turns' rewards and actions.

Tested against verifiers 0.4.0 (``make test-frameworks``); the classic API of verifiers 0.3 is
``ragen_envs.integrations.verifiers``.
"""

from __future__ import annotations

from collections.abc import Iterator

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import as_reply, seed_rows

try:
    import verifiers.v1 as vf
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.verifiers_v1 needs verifiers 0.4 (verifiers.v1): "
                      "pip install verifiers") from None

__all__ = ["RagenTaskset", "RagenEnv"]
PLUGIN = "ragen-envs-verifiers"  # the taskset's id: the package ragen_envs_verifiers, which re-exports both


class RagenTasksetConfig(vf.TasksetConfig):
    env_id: str = ""
    """A registered env id; empty: the catalogue's default env."""
    num_examples: int = 256
    start_seed: int = 0
    chat: dict = {}
    """``ChatEnvConfig`` fields (turns, format penalty, prefill, ...)."""
    env_kwargs: dict = {}


class RagenData(vf.TaskData):
    info: dict
    """The env id, seed and settings ``RagenEnv.run`` replays the episode from."""


class RagenTask(vf.Task[RagenData, vf.State, vf.TaskConfig]):
    pass


class RagenTaskset(vf.Taskset[RagenTask, RagenTasksetConfig]):
    def load(self) -> Iterator[RagenTask]:
        from ragen_envs.registry import env_for

        c = self.config
        env_id = c.env_id or env_for("default")
        for row in seed_rows(env_id, c.num_examples, c.start_seed, ChatEnvConfig(**c.chat), **c.env_kwargs):
            system, user = row["prompt"]
            yield RagenTask(RagenData(name=f"{env_id}#{row['seed']}", system_prompt=system["content"],
                                      prompt=user["content"],
                                      info={"env_id": env_id, "seed": row["seed"], "chat": dict(c.chat),
                                            "env_kwargs": dict(c.env_kwargs)}), c.task)


class RagenEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class RagenEnv(vf.Env[RagenEnvConfig]):
    async def run(self, task, agents) -> None:
        info = task.data.info
        config = ChatEnvConfig(**info.get("chat", {}))
        chat = ChatEnv(info["env_id"], config, **info.get("env_kwargs", {}))
        chat.reset(seed=info["seed"])
        try:
            # The task's prompt is the env's first message, so the model moves first (a bare turn()).
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    chat.step(as_reply(segment.last_reply, config.prefill))
                    if chat.done:
                        break  # the episode is over: end the exchange
                    segment = await interaction.turn(chat.messages[-1]["content"])
        finally:
            chat.close()
        trace = interaction.trace
        trace.record_reward("episode_return", chat.episode_return, 1.0)
        trace.record_metric("success", float(chat.success))
        trace.info["ragen"] = {"rewards": [t.reward for t in chat.turns], "actions": [t.actions for t in chat.turns]}


def load_environment(env_id: str | None = None, num_examples: int = 256, **taskset) -> RagenEnv:
    """The ``vf.Env`` of ``env_id``'s episodes (``None``: the catalogue's default env)."""
    return RagenEnv(RagenEnvConfig(taskset=RagenTasksetConfig(
        id=PLUGIN, env_id=env_id or "", num_examples=num_examples, **taskset)))
