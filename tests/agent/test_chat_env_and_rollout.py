"""The chat wrapper, token-space prompts and grouped rollouts."""

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from ragen_envs import CHARSET, ENVIRONMENTS, LLMEnv, TextSpace
from ragen_envs.agent import (ChatEnv, ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig,
                              load_jsonl, save_jsonl)
from ragen_envs.agent import chat_encoding
from ragen_envs.agent.trajectory import Trajectory, pass_at, pass_at_k, rollout_metrics, think_span
from conftest import DEFAULT, OPEN_TEXT, SMOKE, SMOKE_KWARGS, USABLE_IDS, env_params

LEVEL = "#######\n#P_X_O#\n#_____#\n#_____#\n#######"


def sokoban_chat(**config):
    env = gym.make(DEFAULT, dim_room=(5, 7))
    chat = ChatEnv(env, ChatEnvConfig(**config))
    return chat


def test_chat_messages_and_rewards():
    chat = sokoban_chat(max_turns=4)
    messages = chat.reset(seed=0)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "push all boxes" in system and "Up, Down, Left, Right" in system and "||" in system
    assert "<think>" in system and user.startswith("Turn 1:") and "Observation:" in user
    assert "You have 8 actions left." in user
    chat.env.reset(options={"level": LEVEL})
    record = chat.step("<think>push right</think><answer>Right || Right || Right</answer>")
    assert record.actions == ["Right", "Right"] and record.env_steps == 2  # third action dropped
    assert record.reward == pytest.approx(-0.2) and record.format_ok
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "user"]
    assert "Reward:\n-0.2\n" in chat.messages[-1]["content"]
    assert "You have 6 actions left." in chat.messages[-1]["content"]


def test_invalid_reply_costs_the_penalty_and_does_not_step():
    chat = sokoban_chat(format_penalty=-0.5)
    chat.reset(seed=0)
    state = chat.env.unwrapped.grid_text()
    record = chat.step("I will go up")
    assert record.reward == -0.5 and record.actions == [] and not record.format_ok
    assert chat.env.unwrapped.grid_text() == state and chat.env.unwrapped._elapsed_steps == 0
    assert "Your last reply was invalid" in chat.messages[-1]["content"]
    record = chat.step("<think>x</think><answer>jump || fly</answer>")
    assert record.reward == -0.5 and record.invalid_actions == ["jump", "fly"] and not record.format_ok
    assert "no valid action among 'jump', 'fly'" in chat.messages[-1]["content"]
    # the template's own placeholder has the tags but no action: not format-valid (format_valid's definition)
    assert not chat.step("<think>x</think><answer> Your action(s) </answer>").format_ok


def test_some_invalid_actions_are_reported_and_skipped():
    chat = sokoban_chat()
    chat.reset(seed=0)
    record = chat.step("<think>x</think><answer>fly || Up</answer>")
    assert record.actions == ["Up"] and record.invalid_actions == ["fly"] and record.format_ok
    assert "Ignored invalid actions: 'fly'" in chat.messages[-1]["content"]


def test_feedback_quotes_an_invalid_reply_normalised_and_capped():
    chat = sokoban_chat(max_turns=20)
    chat.reset(seed=0)

    def quoted(answer):  # what the feedback quotes of the reply
        chat.step(f"<think>x</think><answer>{answer}</answer>")
        return chat.messages[-1]["content"].split("no valid action among ")[1].split(". Nothing happened")[0]

    tabs = "Up" + "\t" * 400 + "Left"  # one invalid action, mostly tabs
    assert len(quoted(tabs)) <= len("Up Left") + 10  # whitespace runs are one space: no echo amplified
    for answer in (tabs, "x" * 10_000, "\x00" * 5000, "a\u200b" * 3000 + "||" + "b\n" * 3000):
        assert len(quoted(answer)) <= min(len(answer), 200) + 40, answer[:20]
    assert quoted("y" * 1000).endswith("more characters)")
    assert quoted("jump || fly") == "'jump', 'fly'"  # short ones whole


def test_episode_end_stops_the_actions_and_the_chat():
    chat = sokoban_chat()
    chat.reset(seed=0)
    chat.env.reset(options={"level": "#######\n#_PXO_#\n#_____#\n#_____#\n#######"})
    record = chat.step("<think>x</think><answer>Right || Left</answer>")
    assert record.actions == ["Right"] and chat.done and chat.success
    assert record.reward == pytest.approx(10.9)
    assert chat.messages[-1]["role"] == "assistant"
    with pytest.raises(RuntimeError):
        chat.step("<answer>Up</answer>")


def test_no_think_mode():
    chat = ChatEnv(SMOKE, ChatEnvConfig(enable_think=False))
    messages = chat.reset(seed=0)
    assert "<think>" not in messages[0]["content"] and "<think>" not in messages[1]["content"]
    assert chat.step("<answer>Up</answer>").format_ok


def test_extend_keeps_generated_tokens_verbatim(tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Turn 1"}]
    prompt = chat_encoding.encode_chat(tokenizer, messages)
    reply = "<think>hm</think><answer>Up</answer>"
    # An unusual tokenisation of the reply: one token per character, then end-of-turn.
    reply_ids = [tokenizer.convert_tokens_to_ids(ch) for ch in reply] + [tokenizer.eos_token_id]
    assert tokenizer.decode(reply_ids[:-1]) == reply
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Turn 2"}]
    nxt = chat_encoding.extend(tokenizer, prompt, reply_ids, messages)
    assert nxt[:len(prompt) + len(reply_ids)] == prompt + reply_ids
    # Same text as the template renders for the whole conversation.
    assert tokenizer.decode(nxt) == chat_encoding.render(tokenizer, messages, add_generation_prompt=True)
    # Without an end-of-turn token (stopped at </answer>) the template's closing text is added.
    nxt2 = chat_encoding.extend(tokenizer, prompt, reply_ids[:-1], messages)
    assert tokenizer.decode(nxt2) == tokenizer.decode(nxt)


def test_think_span(tokenizer):
    text = "<think> I should go up.</think> <answer>Up</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    start, end = think_span(tokenizer, ids)
    assert tokenizer.decode(ids[start:end]).strip() == "I should go up."
    assert "<think>" in tokenizer.decode(ids[:start]) and "</think>" in tokenizer.decode(ids[end:])
    assert think_span(tokenizer, tokenizer("<answer>Up</answer>")["input_ids"]) == (None, None)
    empty = tokenizer("<think></think><answer>Up</answer>", add_special_tokens=False)["input_ids"]
    s, e = think_span(tokenizer, empty)
    assert s == e


def test_groups_share_initial_state_and_differ_across_groups(scripted):
    policy = scripted(["<think>look</think><answer>Up</answer>"])
    runner = RolloutRunner(DEFAULT, policy,
                           RolloutConfig(n_groups=4, group_size=3, chat=ChatEnvConfig(max_turns=1)))
    trajs = runner.collect()
    assert len(trajs) == 12 and [t.group for t in trajs] == [g for g in range(4) for _ in range(3)]
    first_states = [t.messages[1]["content"] for t in trajs]
    for g in range(4):
        assert len(set(first_states[3 * g:3 * g + 3])) == 1
    assert len(set(first_states[::3])) == 4
    again = runner.collect()  # the seed advances: a new batch of states
    assert {t.seed for t in again}.isdisjoint({t.seed for t in trajs})


class StepsEnv(LLMEnv):
    """Test env: the episode lasts (seed % 3) + 1 valid "go" actions."""

    valid_actions = ["go"]
    instructions = "Say go."

    def __init__(self):
        super().__init__(max_steps=10)
        self.observation_space = TextSpace(64, charset=CHARSET)

    def _new_episode(self, options):
        self.left = self.seed % 3 + 1
        return {}

    def reset(self, *, seed=None, options=None):
        self.seed = seed
        return super().reset(seed=seed, options=options)

    def parse_action(self, action):
        return self.parse_choice(action)

    def _apply(self, action):
        self.left -= 1
        return 1.0, self.left == 0, True

    def _observation(self):
        return f"{self.left} left"

    def _is_success(self):
        return self.left == 0


gym.register("Test/Steps-v0", entry_point=StepsEnv)


def test_rollout_batches_active_envs_and_drops_finished(scripted):
    policy = scripted(["<think>a</think><answer>go</answer>"])
    runner = RolloutRunner("Test/Steps-v0", policy, RolloutConfig(
        n_groups=3, group_size=2, chat=ChatEnvConfig(max_turns=5, max_actions_per_turn=1)))
    trajs = runner.collect()
    assert [len(call) for call in policy.calls] == [6, 4, 2]
    assert [t.num_turns for t in trajs] == [1, 1, 2, 2, 3, 3]
    assert all(t.success and t.episode_return == t.num_turns for t in trajs)


def test_prompts_in_trajectories_are_what_the_model_saw(scripted):
    policy = scripted(["<think>go</think><answer>Left || Up</answer>", "<think>hm</think><answer>Down</answer>"])
    runner = RolloutRunner(DEFAULT, policy,
                           RolloutConfig(n_groups=2, group_size=2, chat=ChatEnvConfig(max_turns=3)))
    trajs = runner.collect()
    seen = [p for call in policy.calls for p in call]
    stored = [turn.prompt_ids for t in trajs for turn in t.turns]
    assert sorted(map(tuple, seen)) == sorted(map(tuple, stored))
    for t in trajs:
        for a, b in zip(t.turns, t.turns[1:]):  # each prompt continues the last: one token sequence
            assert b.prompt_ids[:len(a.prompt_ids) + len(a.response_ids)] == a.prompt_ids + a.response_ids
        # and it is the same text as the chat template renders for the stored conversation
        for n, turn in enumerate(t.turns):  # messages: system, user, then (assistant, user) per turn
            assert t.messages[2 + 2 * n] == {"role": "assistant", "content": turn.response}
            rendered = chat_encoding.render(policy.tokenizer, t.messages[:2 + 2 * n], add_generation_prompt=True)
            assert policy.tokenizer.decode(turn.prompt_ids) == rendered + "<think>"  # prefilled
    played = [len(turn.actions) for t in trajs for turn in t.turns]
    assert set(played) == {1, 2} and rollout_metrics(trajs)["actions_per_turn"] == sum(played) / len(played)


def test_context_cap_drops_oldest_turns(scripted):
    policy = scripted(["<think>" + "very long thoughts " * 20 + "</think><answer>Up</answer>"])
    first = policy.encode_chat(ChatEnv(DEFAULT).reset(seed=0))
    cap = len(first) + 80
    runner = RolloutRunner(DEFAULT, policy,
                           RolloutConfig(n_groups=1, group_size=1, max_prompt_tokens=cap,
                                         chat=ChatEnvConfig(max_turns=4)))
    traj = runner.collect()[0]
    assert all(len(t.prompt_ids) <= cap for t in traj.turns)
    assert traj.turns[0].messages_dropped == 0 and traj.turns[-1].messages_dropped > 0
    tiny = RolloutRunner(DEFAULT, policy,
                         RolloutConfig(n_groups=1, group_size=1, max_prompt_tokens=10,
                                       chat=ChatEnvConfig(max_turns=2)))
    traj = tiny.collect()[0]
    assert traj.context_overflow and traj.num_turns == 0


def test_env_mix_and_thread_pool(scripted):
    policy = scripted(["<think>a</think><answer>Up || Left</answer>"])
    runner = RolloutRunner({DEFAULT: 2, SMOKE: 1}, policy,
                           RolloutConfig(group_size=2, env_workers=3, chat=ChatEnvConfig(max_turns=2)))
    trajs = runner.collect()
    assert [t.env_id for t in trajs] == [DEFAULT] * 4 + [SMOKE] * 2


@pytest.mark.parametrize("env_id", env_params(sorted(ENVIRONMENTS)))
def test_full_rollout_with_a_tiny_model_on_every_env(env_id, request, tmp_path):
    """A visual env's with the tiny vision-language model, the others' with the tiny text model."""
    tiny_policy = request.getfixturevalue("tiny_vlm" if ENVIRONMENTS[env_id].visual else "tiny_policy")
    config = RolloutConfig(n_groups=2, group_size=2, chat=ChatEnvConfig(max_turns=2),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=12, seed=0))
    trajs = RolloutRunner(env_id, tiny_policy, config).collect()
    assert len(trajs) == 4
    for t in trajs:
        assert t.num_turns >= 1
        for turn in t.turns:
            assert 1 <= len(turn.response_ids) <= 12 and len(turn.logprobs) == len(turn.response_ids)
            assert all(lp <= 0 for lp in turn.logprobs)
            think = tiny_policy.tokenizer("<think>", add_special_tokens=False)["input_ids"]  # prefilled
            generation_prompt = tiny_policy.encode_chat([{"role": "user", "content": "x"}])[-3:]
            assert turn.prompt_ids[-3 - len(think):] == generation_prompt + think
    path = tmp_path / "t.jsonl"
    save_jsonl(trajs, path)
    back = load_jsonl(path)
    assert [b.to_dict() for b in back] == [t.to_dict() for t in trajs]
    # Reproducible: the same config and seed give the same batch.
    again = RolloutRunner(env_id, tiny_policy, config).collect()
    assert [a.to_dict() for a in again] == [t.to_dict() for t in trajs]


def test_bad_config_values():
    with pytest.raises(ValueError):
        RolloutConfig(group_size=0)
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError):
        ChatEnvConfig(max_actions_per_turn=0)
    with pytest.raises(ValueError):
        RolloutRunner({}, None)
    assert np.isfinite(SamplingConfig().temperature)


def test_no_think_mode_says_why_a_reply_was_invalid():
    chat = ChatEnv(SMOKE, ChatEnvConfig(enable_think=False))
    chat.reset(seed=0)
    chat.step("Up")
    assert "no <answer>...</answer> found" in chat.messages[-1]["content"]
    chat.step("<answer> </answer>")
    assert "the answer held no action" in chat.messages[-1]["content"]


def test_group_members_share_the_start_but_not_the_slips(scripted):
    policy = scripted(["<think>a</think><answer>Left || Right</answer>"])
    config = RolloutConfig(n_groups=1, group_size=6, chat=ChatEnvConfig(max_turns=3),
                           env_kwargs={SMOKE: {"slip": 0.8, "size": 6, "p": 1.0}})
    trajs = RolloutRunner(SMOKE, policy, config).collect()
    assert len({t.messages[1]["content"] for t in trajs}) == 1  # one initial state
    later = {tuple(m["content"] for m in t.messages[2:]) for t in trajs}
    assert len(later) > 1  # the same actions slipped differently


def test_the_think_prefill_and_the_penalty_for_invalid_actions(scripted):
    from ragen_envs.agent import ChatEnv

    # Prefilled: the model's text continues after <think>; the reply keeps it, the reasoning span starts at once.
    policy = scripted(["go right</think><answer>Right || Jump</answer>"])
    trajs = RolloutRunner(SMOKE, policy,
                          RolloutConfig(n_groups=1, group_size=2, chat=ChatEnvConfig(max_turns=1))).collect()
    turn = trajs[0].turns[0]
    # RAGEN's length line states the env's own budget, not the rollout's (128 tokens here)
    own = ENVIRONMENTS[SMOKE].max_tokens
    assert own != 128 and f"Max response length: {own} words (tokens)." in trajs[0].messages[1]["content"]
    stated = ChatEnv(SMOKE, ChatEnvConfig(length_line="rollout"), 128).reset(seed=0)[1]["content"]
    assert "Max response length: 128 words (tokens)." in stated
    assert turn.response.startswith("<think>go right") and turn.reasoning == "go right" and turn.think_start == 0
    assert policy.tokenizer.decode(turn.reasoning_ids).strip() == "go right"
    # One invalid and one valid action: RAGEN's rule penalises the turn; the lenient rule does not.
    for rule, penalty in ((True, -0.1), (False, 0.0)):
        env = ChatEnv(SMOKE, ChatEnvConfig(penalize_invalid_actions=rule))
        env.reset(seed=0)
        record = env.step("<think>x</think><answer>Jump || Up</answer>")
        assert record.actions == ["Up"] and record.invalid_actions == ["Jump"]
        assert record.reward == pytest.approx(penalty + (1.0 if env.success else 0.0))
    off = RolloutRunner(SMOKE, scripted(["<think>a</think><answer>Up</answer>"]),
                        RolloutConfig(n_groups=1, group_size=2, chat=ChatEnvConfig(max_turns=1, prefill_think=False)))
    assert not off.collect()[0].turns[0].response.startswith("<think><think>")


def test_the_random_baseline_plays_the_same_episodes(scripted):
    from ragen_envs.agent.baseline import random_success

    config = RolloutConfig(n_groups=40, group_size=2, chat=ChatEnvConfig(max_turns=3),
                           env_kwargs={SMOKE: SMOKE_KWARGS})
    runner = RolloutRunner({SMOKE: 40, OPEN_TEXT: 2}, scripted(["<answer>Up</answer>"]),
                           config)
    trajs = runner.collect()
    chance = random_success(trajs, config.chat, seed=1)
    assert set(chance) == {SMOKE}  # open-text envs have no random valid action
    assert 0.05 < chance[SMOKE] < 0.7  # 3x3 maps, 6 random moves: sometimes
    assert random_success(trajs, config.chat, seed=1) == chance  # seeded


def test_held_out_parts_together_are_the_whole(scripted):
    """Ranks share validation out: rank r's episodes are the whole set's r-th, (r + world)-th, ..., with
    the same rows (a fixed reply; random actions seeded per episode), whatever the split."""
    from ragen_envs.agent.baseline import held_out, held_out_part, play_held_out, summarise_held_out

    config = RolloutConfig(n_groups=5, group_size=1, seed=100, chat=ChatEnvConfig(max_turns=3),
                           env_kwargs={SMOKE: SMOKE_KWARGS})
    envs, policy = {SMOKE: 5, OPEN_TEXT: 2}, scripted(["<answer>Up</answer>"])
    whole = play_held_out(policy, envs, config, seed=1)
    assert whole.shape == (7, 3) and np.isnan(whole[5:, 2]).all()  # open text: no random policy
    assert 0 < np.nansum(whole[:, 2]) < 5  # random actions win some of these episodes
    parts = [play_held_out(policy, envs, config, seed=1, part=(r, 3)) for r in range(3)]
    assert [held_out_part(envs, config, (r, 3))[1] for r in range(3)] == [[100, 103, 106], [101, 104], [102, 105]]
    assert held_out_part(envs, config, (1, 3))[2].env_kwargs == {SMOKE: SMOKE_KWARGS}  # only its envs' kwargs
    for r, part in enumerate(parts):
        np.testing.assert_array_equal(part, whole[r::3])
    assert summarise_held_out(np.concatenate(parts)) == held_out(policy, envs, config, seed=1)
    assert play_held_out(policy, SMOKE, replace(config, n_groups=1), part=(1, 2)).shape == (0, 3)
    with pytest.raises(ValueError, match="rank"):
        held_out_part(envs, config, (3, 3))


def test_a_runners_state_continues_its_seed_sequence(scripted):
    config = RolloutConfig(n_groups=2, group_size=1, seed=5, chat=ChatEnvConfig(max_turns=1))
    first = RolloutRunner(SMOKE, scripted(["<answer>Up</answer>"]), config)
    first.collect()
    first.collect(seeds=[99, 100])  # given seeds leave the sequence where it was
    state = first.state_dict()
    assert state == {"calls": 2, "seed_offset": 2}
    resumed = RolloutRunner(SMOKE, scripted(["<answer>Up</answer>"]), config)
    resumed.load_state_dict(state)
    assert [t.seed for t in resumed.collect()] == [t.seed for t in first.collect()] == [7, 8]


def test_an_open_text_answer_is_stepped_whatever_it_says_and_only_a_missing_format_costs_the_penalty():
    """RAGEN's rule for envs without an action lookup (its five text tasks: their default arguments read
    any text): the <answer> text goes to the env (which scores it or does nothing); -0.1 only when no
    <think>...</think><answer>...</answer> is found. (Bandit and Sudoku have RAGEN action lookups.)"""
    open_text = [i for i in USABLE_IDS if gym.make(i).unwrapped.parse_action("no idea, sorry") is not None]
    assert len(open_text) >= 2  # five where every extra and bubblewrap are installed
    for env_id in open_text:
        chat = ChatEnv(env_id, ChatEnvConfig(max_turns=3), **ENVIRONMENTS[env_id].test_kwargs)
        chat.reset(seed=0)
        unreadable = chat.step("<think>hm</think><answer>no idea, sorry</answer>")
        assert unreadable.env_steps == 1 and unreadable.reward >= 0.0, env_id
        chat.reset(seed=0)
        untagged = chat.step("no idea, sorry")
        assert untagged.env_steps == 0 and untagged.reward == -0.1, env_id


def test_grounding_counts_the_state_facts_a_reasoning_states():
    from ragen_envs.agent.chat_env import grounding

    facts = {"position": "I am at (1, 2)", "goal": "the goal is at (3, 3)"}
    assert grounding(facts, "I am at (1,2) and THE goal is at (3, 3).") == 1.0  # spaces and case aside
    assert grounding(facts, "The goal is at (3, 3).") == 0.5  # one fact of two
    assert grounding(facts, None) == 0.0 and grounding({}, "anything") is None
    chat = sokoban_chat()
    chat.reset(seed=0)
    env = chat.env.unwrapped
    right = chat.step(f"<think>{env.oracle_reasoning()}</think><answer>{env.oracle_action()}</answer>")
    assert right.grounded == 1.0
    assert chat.step("<think>I am somewhere</think><answer>Up</answer>").grounded == 0.0


def test_grounding_counts_wrong_statements_too():
    from ragen_envs.agent.chat_env import grounding

    facts = {"position": "I am at (1, 2)", "goal": "the goal is at (3, 3)"}
    # a wrong statement of a fact costs what a right one earns: wrong position, right goal
    assert grounding(facts, "I am at (2, 1) and the goal is at (3, 3).") == 0.0
    assert grounding(facts, "I am at (0, 0).") == -0.5  # a wrong guess costs: guessing pays only if mostly right
    assert grounding(facts, "I am at (1, 2), 3 moves away. The goal is at (3,3)") == 1.0  # the value ends there
    boxes = {"boxes": "boxes at (1, 2), (2, 3)"}
    assert grounding(boxes, "Boxes at (2, 3), (1, 2).") == 1.0  # in any order
    assert grounding(boxes, "Boxes at (1, 2).") == -1.0  # one box missing is a wrong statement
    # one reasoning for every board, stating every cell: as good as stating nothing
    for env_id, size in ((SMOKE, 4), (DEFAULT, 10)):
        env = gym.make(env_id).unwrapped
        every = " ".join(f"{words} ({r}, {c})." for r in range(size) for c in range(size)
                         for words in ("I am at", "the goal is at", "boxes at", "targets at"))
        for seed in range(5):
            env.reset(seed=seed)
            assert grounding(env.facts(), every) < 0
            assert grounding(env.facts(), env.oracle_reasoning()) == 1.0


def test_the_budget_line_never_promises_more_actions_than_the_env_has_left():
    # 25 replies of 4 actions would say 100 actions (RubiksCube stops at 20 steps); here an env of 7 steps
    action = gym.make(SMOKE).unwrapped.valid_actions[0]
    chat = ChatEnv(SMOKE, ChatEnvConfig(max_turns=25, max_actions_per_turn=4), max_steps=7)
    messages = chat.reset(seed=0)
    assert "You have 7 actions left." in messages[-1]["content"]
    chat.step(f"<think>x</think><answer>{action}</answer>")
    assert chat.done or "You have 6 actions left." in chat.messages[-1]["content"]
    # where the turns are fewer, the turns count (2 turns of 2 actions: 4)
    short = ChatEnv(SMOKE, ChatEnvConfig(max_turns=2, max_actions_per_turn=2), max_steps=7)
    assert "You have 4 actions left." in short.reset(seed=0)[-1]["content"]
    # an open-text env counts replies: the fewer of its steps and the turns
    text = ChatEnv(OPEN_TEXT, ChatEnvConfig(max_turns=50))
    n = text.env.unwrapped.max_steps
    assert f"You have {n} {'reply' if n == 1 else 'replies'} left." in text.reset(seed=0)[-1]["content"]


def test_one_held_out_config_for_the_trainer_and_the_studies():
    from ragen_envs.agent.baseline import held_out_config

    rollout = RolloutConfig(n_groups=8, group_size=16, seed=10000, chat=ChatEnvConfig(max_turns=3),
                            sampling=SamplingConfig(max_new_tokens=40, temperature=1.0), env_kwargs={"x": {"a": 1}})
    greedy = held_out_config(rollout, 256, 100_000, 0.0)  # a study's boards, greedy
    assert greedy == RolloutConfig(n_groups=256, group_size=1, seed=100_000, chat=ChatEnvConfig(max_turns=3),
                                   sampling=SamplingConfig(max_new_tokens=40, temperature=0.0),
                                   env_kwargs={"x": {"a": 1}})
    assert held_out_config(rollout, 512, 123, 0.5).sampling.temperature == 0.5  # the trainer's validation


def test_pass_at_k_is_the_unbiased_estimator_and_ragens_at_the_group_size():
    # by hand: 4 samples, 1 success; 2 drawn hold it with chance 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 1, 2) == 0.5 and pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == pass_at_k(4, 3, 4) == 1.0  # k = n: any success (RAGEN's es_manager)
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_at_k(4, 1, 5)

    def group(index, won):  # one group's samples from one initial state
        return [Trajectory(env_id=SMOKE, group=index, seed=index, messages=[], success=w) for w in won]
    batch = group(0, [1, 0, 0, 0]) + group(1, [0, 0, 0, 0]) + group(2, [1, 1, 1, 0])
    assert pass_at(batch) == {"pass@4": 2 / 3}  # RAGEN's: the share of groups with a success
    assert pass_at(batch, [1, 2]) == {"pass@1": (0.25 + 0 + 0.75) / 3, "pass@2": (0.5 + 0 + 1.0) / 3}
    assert rollout_metrics(batch)["pass@4"] == 2 / 3 and rollout_metrics(batch)["success"] == 4 / 12
    assert "pass@1" not in rollout_metrics(group(0, [1]) + group(1, [0]))  # pass@1 is the success rate
    with pytest.raises(ValueError, match="at least 5 samples; these have 4"):
        pass_at(batch, [5])
