"""ragen_envs.integrations.gem against GEM itself (gem-llm 0.1.0, in the venv `make test-frameworks`
builds): the env is made by GEM's registry, played through `gem.make_vec` (GEM's vector env, its
same-step autoreset) under GEM's own wrappers (`concat_with_action`: the history as GEM's trainers
show it; `episode_tracking`: the episode's summed reward), with only the model's replies scripted.
GEM's envs are text in, text out: there are no tokens or log-probs at this level to check."""

import pytest

from episodes import ENV, PREFILL, local_episode, require, scripted_generations

require("gem.envs.registration")  # gem-llm's gem, not another package of that name
import gem  # noqa: E402


def test_gem_make_vec_plays_the_episodes():
    from gem.wrappers.wrapper_factory import get_wrapper_fns

    from ragen_envs.integrations.gem import gem_id

    seeds = [2, 3]
    generations = [scripted_generations(s) for s in seeds]
    chats = [local_episode(s, g) for s, g in zip(seeds, generations)]
    vec = gem.make_vec([gem_id(ENV)] * 2, wrappers=get_wrapper_fns("concat_with_action,episode_tracking"))
    obs, _ = vec.reset(seed=seeds)
    for o, chat in zip(obs, chats):  # the instructions first: GEM has no system role (its wrapper ends a line)
        assert o == f"{chat.messages[0]['content']}\n\n{chat.messages[1]['content']}\n"
    rewards, ended = [[], []], [None, None]
    for turn in range(max(map(len, generations))):
        active = {i: g[turn] for i, g in enumerate(generations) if ended[i] is None}
        obs, step_rewards, terminated, truncated, infos = vec.step(active)
        for k, i in enumerate(active):
            rewards[i].append(step_rewards[k])
            if terminated[k] or truncated[k]:
                ended[i] = (bool(terminated[k]), bool(truncated[k]), infos[k])
            else:  # GEM's wrapper shows the history: the reply as generated, then the env's next message
                assert obs[k].endswith(chats[i].messages[2 * turn + 3]["content"] + "\n")
                assert generations[i][turn] + "\n" in obs[k]
    for chat, r, (terminated, truncated, info) in zip(chats, rewards, ended):
        assert chat.success and terminated and not truncated
        assert r == pytest.approx([t.reward for t in chat.turns])  # each step: that turn's reward
        # same-step autoreset: the info is the next episode's reset's, which keeps the last one's tally
        assert info["prev_ep_cumulative_rewards"] == pytest.approx(chat.episode_return)
        assert info["prev_ep_step_counter"] == len(chat.turns)


@pytest.mark.parametrize("prefilled", [False, True], ids=["reply-after-prefill", "reply-with-its-own-think"])
def test_gem_make_reports_success_and_the_turn_limit(prefilled):
    from ragen_envs.integrations.gem import gem_id

    env = gem.make(gem_id(ENV))
    generations = scripted_generations(2)
    chat = local_episode(2, generations)
    env.reset(seed=2)
    for text in generations:
        obs, reward, terminated, truncated, info = env.step((PREFILL if prefilled else "") + text)
    assert obs == "" and terminated and not truncated
    assert info["success"] and info["episode_return"] == pytest.approx(chat.episode_return)
    assert info["actions"] == chat.turns[-1].actions and info["format_ok"]

    env.reset(seed=2)  # never a valid reply: the turn limit ends it, truncated
    lost = local_episode(2, ["no format"] * 10)
    steps = [env.step("no format") for _ in lost.turns]
    assert [s[2:4] for s in steps] == [(False, False)] * (len(lost.turns) - 1) + [(True, True)]
    assert sum(s[1] for s in steps) == pytest.approx(lost.episode_return) and not steps[-1][4]["success"]


def test_gem_registers_the_catalogue():
    from ragen_envs.integrations.gem import RagenGemEnv, gem_id, register
    from ragen_envs.registry import ENVIRONMENTS

    from gem.envs.registration import ENV_REGISTRY

    assert all(gem_id(i) in ENV_REGISTRY for i in ENVIRONMENTS)
    assert register(ENV) == gem_id(ENV) == "ragen:" + ENV.split("/")[1]  # registering twice is harmless
    assert isinstance(gem.make(gem_id(ENV)), RagenGemEnv)
