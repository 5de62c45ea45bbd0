"""verifiers: any registered env as a verifiers multi-turn environment (the classic API).

    import verifiers as vf
    env = vf.load_environment("ragen-envs", env_id="Ragen/Sokoban-v0")   # or load_environment() below

``load_environment(env_id=..., num_examples=...)`` returns a ``vf.MultiTurnEnv`` whose dataset holds
the env's first prompts (one per seed, the seed in ``info``). Each rollout keeps its own ``ChatEnv``
in the state: ``env_response`` plays the model's last reply and answers with the env's next user
message; when the episode ends it sets ``final_env_response``, which stops the rollout.

verifiers renders the chat and calls the model itself, so the prompt cannot end with the reply's
prefill (``<think>``, ``ChatEnvConfig.prefill``) as this project's runner ends it: a reply is read as
the prefill followed by the reply, unless the reply opens with the prefill already.

What the env's reward becomes: the rubric's weighted sum, the rollout's ``reward``: the episode's
return (weight 1, format penalties included); ``success`` is logged as a metric (weight 0), and
``num_turns`` (verifiers' own monitor) counts the model's replies.

Written against verifiers' classic environment API (``vf.MultiTurnEnv``: ``setup_state``,
``env_response``, ``final_env_response``; ``vf.Rubric`` with functions of ``state``), which verifiers
0.3 keeps as ``verifiers.legacy`` and 0.4 removed; ``ragen_envs.integrations.verifiers_v1`` targets
``verifiers.v1``. Tested against verifiers 0.3.1 (``make test-frameworks``): its ``generate`` with
only the model's client scripted.
"""

from __future__ import annotations

from ragen_envs.agent.chat_env import ChatEnv, ChatEnvConfig
from ragen_envs.integrations.common import as_reply, seed_rows

try:
    import verifiers as vf

    vf.MultiTurnEnv, vf.Rubric  # verifiers 0.4 removed them: its API is verifiers_v1's
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed packages
    raise ImportError("ragen_envs.integrations.verifiers needs verifiers' classic API: pip install 'verifiers<0.4' "
                      "(verifiers 0.4: ragen_envs.integrations.verifiers_v1)") from None


def episode_return(state, **kwargs) -> float:
    return float(state["ragen"].episode_return)


def success(state, **kwargs) -> float:
    return float(state["ragen"].success)


class RagenMultiTurnEnv(vf.MultiTurnEnv):
    def __init__(self, env_id: str, num_examples: int = 256, start_seed: int = 0, chat: ChatEnvConfig | None = None,
                 env_kwargs: dict | None = None, **kwargs):
        from datasets import Dataset

        self.ragen_env_id, self.chat_config, self.env_kwargs = env_id, chat or ChatEnvConfig(), dict(env_kwargs or {})
        rows = seed_rows(env_id, num_examples, start_seed, self.chat_config, **self.env_kwargs)
        dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": "",
                                      "info": {"env_id": env_id, "seed": r["seed"]}} for r in rows])
        rubric = vf.Rubric(funcs=[episode_return, success], weights=[1.0, 0.0])
        # No turn limit of verifiers' own: it stops before the env sees the last reply. ChatEnv ends the
        # episode at chat.max_turns, and env_response then stops the rollout.
        super().__init__(dataset=dataset, rubric=rubric, max_turns=-1, **kwargs)

    async def setup_state(self, state, **kwargs):
        chat = ChatEnv(self.ragen_env_id, self.chat_config, **self.env_kwargs)
        chat.reset(seed=state["info"]["seed"])
        state["ragen"] = chat
        return state

    async def env_response(self, messages, state, **kwargs):
        chat: ChatEnv = state["ragen"]
        chat.step(as_reply(messages[-1]["content"] or "", self.chat_config.prefill))
        if chat.done:
            state["final_env_response"] = []  # nothing more to say: the rollout stops here
            return []
        message = dict(chat.messages[-1])
        # verifiers 0.3 wants its message type (a plain dict is validated again every turn); older releases take dicts
        return [vf.UserMessage(**message) if hasattr(vf, "UserMessage") else message]


def load_environment(env_id: str | None = None, num_examples: int = 256, **kwargs) -> RagenMultiTurnEnv:
    """verifiers' entry point for an environment module (``env_id`` None: the catalogue's default env)."""
    from ragen_envs.registry import env_for

    return RagenMultiTurnEnv(env_id or env_for("default"), num_examples, **kwargs)
