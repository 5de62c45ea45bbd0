"""OpenPipe ART (``pip install openpipe-art``): episodes of any registered env as ``art.Trajectory``
groups, for ``model.train``.

    import art
    from ragen_envs.integrations.art import trajectory_groups

    groups = await art.gather_trajectory_groups(
        trajectory_groups(model, "Ragen/Sokoban-v0", seeds=range(8), group_size=4))
    await model.train(groups)

``rollout(model, env_id, seed)`` plays one episode with ART's inference client
(``model.openai_client()``, ``model.get_inference_name()``): each turn asks the model for a chat
completion of the trajectory's messages so far, with ``logprobs`` on (ART trains only on choices that
carry them), plays the reply through ``ChatEnv`` and appends the env's next user message. The
trajectory's ``messages_and_choices`` is the system prompt, the user messages and the model's
``Choice`` objects, which ART tokenizes itself: the choices' tokens are the trained ones.
``trajectory_groups`` makes one ``art.TrajectoryGroup`` per seed, ``group_size`` episodes from it,
for ``art.gather_trajectory_groups``.

ART's server renders the chat, so a reply is read as ``common.as_reply`` says (the prefill before it, as
the runner would have prompted).

What the env's reward becomes: ``trajectory.reward``, the episode's return (format penalties
included), which ART normalises within the group (GRPO); ``metrics`` has ``success`` and ``turns`` (the
model's replies), ``metadata`` the env id and seed.

Tested against openpipe-art 0.5.18 (``make test-frameworks``; the last release for Python 3.11, with
openai < 3: its inference client does not take openai 3's httpx2): ``art.gather_trajectory_groups``
with only the model's endpoint scripted, and ART's own tokenization of the groups
(``tokenize_trajectory_groups``) for the masks and log-probs it trains on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import as_reply

try:
    import art
except ImportError:  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.art needs ART: pip install openpipe-art") from None

__all__ = ["rollout", "trajectory_groups"]


async def rollout(model: art.Model, env_id: str, seed: int, chat: ChatEnvConfig | None = None,
                  env_kwargs: dict | None = None, **completion_kwargs) -> art.Trajectory:
    """One episode of ``env_id`` from ``seed`` as an ``art.Trajectory``; ``completion_kwargs`` go to
    each chat completion (``max_completion_tokens``, ``temperature``, ...)."""
    config = chat or ChatEnvConfig()
    env = ChatEnv(env_id, config, **dict(env_kwargs or {}))
    client = model.openai_client()
    try:
        trajectory = art.Trajectory(messages_and_choices=[dict(m) for m in env.reset(seed=seed)], reward=0.0,
                                    metadata={"env_id": env_id, "seed": seed})
        while not env.done:
            completion = await client.chat.completions.create(
                model=model.get_inference_name(), messages=trajectory.messages(), logprobs=True,
                **completion_kwargs)
            choice = completion.choices[0]
            trajectory.messages_and_choices.append(choice)
            env.step(as_reply(choice.message.content or "", config.prefill))
            if not env.done:
                trajectory.messages_and_choices.append(dict(env.messages[-1]))
    finally:
        env.close()
    trajectory.reward = env.episode_return
    trajectory.metrics.update(success=float(env.success), turns=len(env.turns))
    return trajectory.finish()


def trajectory_groups(model: art.Model, env_id: str, seeds: Iterable[int], group_size: int = 4,
                      **kwargs) -> list[Awaitable[art.TrajectoryGroup]]:
    """One ``art.TrajectoryGroup`` per seed, ``group_size`` episodes each, for
    ``art.gather_trajectory_groups``; ``kwargs`` go to ``rollout``."""
    return [art.TrajectoryGroup(rollout(model, env_id, seed, **kwargs) for _ in range(group_size))
            for seed in seeds]
