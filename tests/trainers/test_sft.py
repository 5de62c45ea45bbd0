"""The warm start: oracle demonstrations in the RL format, with state-dependent reasoning."""

import json
import random
import threading
from pathlib import Path

import pytest

from ragen_envs import ENVIRONMENTS
from ragen_envs.agent import ChatEnv, ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig, parse_response
from trainers.config import SFTConfig
from trainers.sft import demonstrations, oracle_turn, warm_start
from conftest import DEFAULT, OPEN_TEXT, SMOKE


@pytest.mark.parametrize("env_id", [SMOKE, DEFAULT, OPEN_TEXT])
def test_demonstrations_are_oracle_replies_in_the_rl_format(env_id, tokenizer):
    demos = demonstrations([env_id], tokenizer, SFTConfig(episodes=12, imperfect=0.0))
    assert demos and all(d.oracle for d in demos)
    firsts = {}
    for d in demos:
        reply = "<think>" + tokenizer.decode(d.response_ids, skip_special_tokens=True)
        parsed = parse_response(reply, 2, True, split=env_id != OPEN_TEXT)
        assert parsed.format_ok and parsed.reasoning
        firsts.setdefault(d.seed, (tokenizer.decode(d.prompt_ids), parsed.reasoning))
    # The reasoning follows the state: different first boards, different first reasonings.
    boards = {prompt for prompt, _ in firsts.values()}
    reasonings = {reasoning for _, reasoning in firsts.values()}
    assert len(reasonings) == len(boards) > 6


def test_a_demonstration_prompt_is_the_rl_prompt(tokenizer, scripted):
    sft = SFTConfig(episodes=1, imperfect=0.0, chat=ChatEnvConfig(max_turns=1))
    demo = demonstrations([SMOKE], tokenizer, sft)[0]
    runner = RolloutRunner(SMOKE, scripted(["<answer>Up</answer>"]),
                           RolloutConfig(n_groups=1, group_size=2, chat=ChatEnvConfig(max_turns=1),
                                         sampling=SamplingConfig(max_new_tokens=sft.max_new_tokens)))
    assert runner.collect()[0].turns[0].prompt_ids == demo.prompt_ids  # same template, prefill included


def test_the_imperfect_share(tokenizer):
    demos = demonstrations([SMOKE], tokenizer, SFTConfig(episodes=40, imperfect=0.5))
    share = sum(not d.oracle for d in demos) / len(demos)
    assert 0.3 < share < 0.7
    guesses = [tokenizer.decode(d.response_ids) for d in demos if not d.oracle]
    assert all("I try" in g for g in guesses)


def test_multi_move_turns_play_the_oracles_next_moves_in_one_reply(tokenizer):
    import gymnasium

    def played(multi_move):
        demos = demonstrations([SMOKE], tokenizer, SFTConfig(episodes=20, imperfect=0.0, multi_move=multi_move))
        return [(d, parse_response("<think>" + tokenizer.decode(d.response_ids, skip_special_tokens=True), 2, True))
                for d in demos]

    assert all(len(p.actions) == 1 for _, p in played(0.0))
    two = played(1.0)
    assert sum(len(p.actions) == 2 for _, p in two) > len(two) / 2  # all but an episode's last move
    assert all("Then" in p.reasoning for _, p in two if len(p.actions) == 2)  # the reasoning names the later move
    env = gymnasium.make(SMOKE).unwrapped  # as the demonstrations play it
    firsts = {d.seed: p.actions for d, p in reversed(two)}  # each episode's first reply
    for seed, actions in firsts.items():  # the later move is the oracle's own, after the first
        env.reset(seed=seed)
        env.step(actions[0])
        assert len(actions) == 1 or env.oracle_action() == actions[1]


def test_the_look_ahead_does_not_see_the_slips_the_episode_will_draw():
    # A demonstrator may know only what a policy could: from one state, the move planned after the first
    # is the same whatever slips the episode goes on to draw (its transition seed)
    slippery = next(e.id for e in ENVIRONMENTS.values() if e.kwargs.get("slip"))  # the catalogue's slippery lake
    chat = ChatEnv(slippery)
    config = SFTConfig(imperfect=0.0, multi_move=1.0)
    for seed in range(4):
        plans = set()
        for transition_seed in range(12):
            chat.reset(seed=seed, transition_seed=transition_seed)
            plans.add(oracle_turn(chat, random.Random(0), config)[0])
        assert len(plans) == 1, (seed, plans)
        assert "Then" in plans.pop()  # a two-move plan


def test_a_look_ahead_on_an_env_that_cannot_be_copied_says_why():
    chat = ChatEnv(SMOKE)
    chat.reset(seed=0)
    chat.env.unwrapped.connection = threading.Lock()  # as a remote client's: no copy of it can be made
    with pytest.raises(TypeError, match="multi_move"):
        oracle_turn(chat, random.Random(0), SFTConfig(imperfect=0.0, multi_move=1.0))


def test_warm_start_lowers_the_loss_and_saves_a_model_eval_can_load(tiny_model, tokenizer, tmp_path):
    import copy

    from ragen_envs.agent.backends.transformers import TransformersPolicy

    cfg = SFTConfig(episodes=3, imperfect=0.0, epochs=4, batch_size=2, learning_rate=3e-3, freeze_layers=0,
                    output_dir=str(tmp_path / "warm"))
    record = warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)
    assert record["last_loss"] < record["first_loss"]
    policy = TransformersPolicy(str(tmp_path / "warm"), device="cpu")
    assert policy.model.config.hidden_size == tiny_model.config.hidden_size
    assert (tmp_path / "warm" / "warm_start.json").is_file()


def test_a_warm_start_logs_its_loss_for_ragen_plot(tiny_model, tokenizer, tmp_path):
    import copy

    from trainers.metrics import _run_title, draw, plot_run, read_metrics

    out = tmp_path / "warm"
    cfg = SFTConfig(episodes=3, imperfect=0.0, epochs=2, batch_size=2, freeze_layers=0, output_dir=str(out))
    record = warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)
    logged = read_metrics(out)
    assert [r["iteration"] for r in logged] == list(range(1, record["steps"] + 1))  # few steps: every one
    assert logged[0]["loss/sft"] == pytest.approx(record["first_loss"])
    assert logged[-1]["loss/sft"] == pytest.approx(record["last_loss"]) and logged[-1]["epoch"] == 2
    assert json.loads((out / "config.json").read_text())["model_type"]  # the model's config.json, not a run's
    fig = draw(logged, "warm")
    assert [ax.get_title() for ax in fig.axes] == ["Warm-start loss"] and len(fig.axes[0].get_lines()) == 1
    assert plot_run(out) == out / "metrics.png"  # ragen plot's
    # titled with the warm start's own settings (its config.json is the model's, not a run's)
    assert _run_title(out).split("\n")[1].startswith("SFT on FrozenLake-v0, 3 episodes x 2 epochs, batch 2, lr ")


def test_bad_settings():
    with pytest.raises(ValueError, match="imperfect"):
        SFTConfig(imperfect=1.5)


def test_an_episode_trains_as_one_sequence_with_the_loss_on_its_replies(tokenizer):
    from trainers.sft import episodes

    demos = demonstrations([SMOKE], tokenizer,
                           SFTConfig(episodes=5, imperfect=0.0, chat=ChatEnvConfig(max_turns=3)))
    sequences = episodes(demos)
    assert len(sequences) == 5 < len(demos)  # several turns per episode, one sequence each
    replies = [d.response_ids for d in demos]
    for seq in sequences:
        marked = [t for t, r in zip(seq.ids, seq.reply) if r]
        taken = []
        while replies and len(taken) + len(replies[0]) <= len(marked) and \
                marked[len(taken):len(taken) + len(replies[0])] == replies[0]:
            taken += replies.pop(0)
        assert taken == marked  # the marked tokens are exactly the episode's replies, in order
    assert not replies


def test_a_warm_start_with_the_same_settings_is_reused_and_another_is_not_replaced_silently(
        tiny_model, tokenizer, tmp_path, capsys):
    import copy

    cfg = SFTConfig(episodes=2, imperfect=0.0, batch_size=2, freeze_layers=0, output_dir=str(tmp_path / "warm"))
    first = warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)
    again = warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)
    assert again["cached"] and again["last_loss"] == first["last_loss"] and "already in" in capsys.readouterr().out
    record = tmp_path / "warm" / "warm_start.json"  # made before a setting existed: it ran at its default
    older = json.loads(record.read_text())
    del older["config"]["lr_schedule"]
    del older["config"]["chat"]["max_images"]  # a nested one too
    record.write_text(json.dumps(older))
    assert warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)["cached"]
    other = SFTConfig(**{**cfg.__dict__, "episodes": 3})
    with pytest.raises(ValueError, match="--overwrite"):
        warm_start(copy.deepcopy(tiny_model), [SMOKE], other, tokenizer=tokenizer)
    replaced = warm_start(copy.deepcopy(tiny_model), [SMOKE],
                          SFTConfig(**{**other.__dict__, "overwrite_output_dir": True}), tokenizer=tokenizer)
    assert not replaced.get("cached") and replaced["config"]["episodes"] == 3


def test_a_trained_model_is_kept_when_saving_fails(tiny_model, tokenizer, tmp_path, monkeypatch):
    import copy
    import re

    from trainers import sft

    out = tmp_path / "warm"
    real = type(tiny_model).save_pretrained

    def read_only_here(self, folder, *args, **kwargs):
        if str(folder) == str(out):
            raise OSError(30, "Read-only file system")
        return real(self, folder, *args, **kwargs)

    monkeypatch.setattr(type(tiny_model), "save_pretrained", read_only_here)
    cfg = SFTConfig(episodes=2, imperfect=0.0, epochs=1, batch_size=2, freeze_layers=0, output_dir=str(out))
    with pytest.raises(ValueError, match="Read-only file system.*kept in") as error:
        sft.warm_start(copy.deepcopy(tiny_model), [SMOKE], cfg, tokenizer=tokenizer)
    kept = re.search(r"kept in (\S+) instead", str(error.value)).group(1)
    assert json.loads((Path(kept) / "warm_start.json").read_text())["steps"] == 1
    import shutil

    shutil.rmtree(kept)
