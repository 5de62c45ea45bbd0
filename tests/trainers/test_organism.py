"""The model organism: a tokenizer learnt on the env's text, a small decoder from scratch, trained on the
demonstrations; an ordinary model folder that eval loads; deterministic for a seed."""

import json
import re

import torch

from ragen_envs.agent import ChatEnv
from ragen_envs.cli import main
from ragen_envs.cli.commands import parse
from ragen_envs.registry import env_for
from trainers.config import ORGANISM_SFT, OrganismArchitecture, SFTConfig
from trainers.sft import _lr_factor, oracle_texts
from trainers.organism import build_model, build_tokenizer, from_scratch
from conftest import SMOKE

SMALL = OrganismArchitecture(layers=2, width=64, heads=2, corpus_episodes=10)


def test_the_tokenizer_learns_the_envs_text_round_trips_and_keeps_the_tags_whole():
    demo = env_for("demo")  # its observations state coordinates
    texts = list(oracle_texts([demo], SFTConfig(), 10))
    tokenizer = build_tokenizer(texts, 2000)
    prompt = "\n".join(m["content"] for m in ChatEnv(demo).reset(seed=123))
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == prompt and len(ids) < len(prompt) / 4  # phrases, not characters
    pieces = [tokenizer.decode([i]) for i in ids]
    numbers = [p for p in pieces if any(c.isdigit() for c in p)]
    # a position is one token and any other digit its own, so a number reads the same wherever it stands
    assert "(0, 0)" in numbers and all(len(p) == 1 or re.fullmatch(r"\(\d, \d\)", p) for p in numbers)
    reply = "<think>go right</think><answer>Right</answer>"
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[0] == "<think>" and pieces[-1] == "</answer>"
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == reply
    unseen = "Zebra ünïcode 🙂"
    assert tokenizer.decode(tokenizer(unseen, add_special_tokens=False)["input_ids"]) == unseen
    model = build_model(tokenizer, OrganismArchitecture(), seed=0)
    assert 2e5 < sum(p.numel() for p in model.parameters()) < 2e6  # about half a million parameters


def test_built_the_same_for_a_seed_trained_and_loaded_by_eval(tmp_path, capsys):
    sft = SFTConfig(episodes=6, output_dir=str(tmp_path / "a"))
    first = from_scratch([SMOKE], sft, SMALL)
    assert first["last_loss"] < first["first_loss"]
    again = from_scratch([SMOKE], SFTConfig(episodes=6, output_dir=str(tmp_path / "b")), SMALL)
    assert again["last_loss"] == first["last_loss"]
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert main(["eval", "--env", SMOKE, "--model", str(tmp_path / "a"), "--groups", "1", "--group-size", "2",
                 "--max-turns", "2", "--max-new-tokens", "16"]) == 0
    assert "format_valid" in capsys.readouterr().out


def test_the_default_organism_is_a_cache_replaced_when_its_settings_change(tmp_path, monkeypatch):
    from trainers import config as settings
    from trainers.organism import default_organism

    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(settings, "ORGANISM_SFT", {**ORGANISM_SFT, "episodes": 3, "epochs": 1})
    monkeypatch.setattr("trainers.organism.OrganismArchitecture", lambda: SMALL)
    folder = default_organism([SMOKE])
    first = json.loads((tmp_path / "organism" / folder.split("/")[-1] / "warm_start.json").read_text())
    monkeypatch.setattr(settings, "ORGANISM_SFT", {**ORGANISM_SFT, "episodes": 3, "epochs": 2})  # a newer catalogue
    assert default_organism([SMOKE]) == folder  # rebuilt in place, not refused as another warm start
    again = json.loads((tmp_path / "organism" / folder.split("/")[-1] / "warm_start.json").read_text())
    assert (first["config"]["epochs"], again["config"]["epochs"]) == (1, 2)


def test_the_command(tmp_path):
    out = tmp_path / "organism"
    flags = ["--env", SMOKE, "--episodes", "4", "--corpus-episodes", "5", "--layers", "1", "--width", "32",
             "--heads", "2", "--output-dir", str(out)]
    assert main(["sft", "--from-scratch", *flags]) == 0
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    made = json.loads((out / "warm_start.json").read_text())["config"]
    # the organism's training settings, where no flag says otherwise
    assert made["episodes"] == 4 and made["learning_rate"] == ORGANISM_SFT["learning_rate"]
    assert made["lr_schedule"] == "cosine" and made["chat"]["max_turns"] == ORGANISM_SFT["chat"]["max_turns"]
    assert main(["sft", "--from-scratch", *flags, "--model", "some/model"]) == 2
    assert parse(["sft", "--env", SMOKE]).learning_rate == SFTConfig().learning_rate  # the warm start's own


def test_the_learning_rate_warms_up_then_decays_to_zero():
    factors = [_lr_factor("cosine", 100, step) for step in range(100)]
    assert factors[0] == 0.2 and factors[4] == 1.0 and all(a >= b for a, b in zip(factors[4:], factors[5:]))
    assert factors[-1] < 0.01 and _lr_factor("constant", 100, 50) == 1.0


def test_an_envs_own_organism_settings_go_over_the_organisms():
    """Sokoban's organism needs more epochs than the demo env's to read the board (its env settings say so); the
    library and `ragen sft --from-scratch` both take them, and a flag still wins."""
    from ragen_envs.registry import env_for_task
    from trainers.config import organism_sft, organism_sft_settings
    from trainers.env_settings import ORGANISM_SFT_PARTS

    sokoban, demo = env_for_task("sokoban"), env_for("demo")
    assert ORGANISM_SFT_PARTS.get(sokoban, {}) == {"epochs": 8, "multi_move": 0.25}
    assert not ORGANISM_SFT_PARTS.get(demo, {})
    assert organism_sft_settings([demo]) == ORGANISM_SFT and organism_sft([demo]) == organism_sft()
    assert organism_sft([sokoban]).epochs == 8 and organism_sft([sokoban]).episodes == ORGANISM_SFT["episodes"]
    assert parse(["sft", "--from-scratch", "--env", sokoban]).epochs == 8
    assert parse(["sft", "--from-scratch", "--env", sokoban]).multi_move == 0.25
    assert parse(["sft", "--from-scratch", "--env", f"{sokoban}:2"]).epochs == 8
    assert parse(["sft", "--from-scratch", "--env", sokoban, "--epochs", "3"]).epochs == 3
    assert parse(["sft", "--from-scratch", "--env", demo]).epochs == ORGANISM_SFT["epochs"]
