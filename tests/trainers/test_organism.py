"""The model organism: a tokenizer learnt on the env's text, a small decoder from scratch, trained on the
demonstrations; an ordinary model folder that eval loads; deterministic for a seed."""

import torch

from ragen_envs.agent import ChatEnv
from ragen_envs.cli import main
from trainers.config import OrganismConfig, SFTConfig
from trainers.organism import build_model, build_tokenizer, corpus, from_scratch
from conftest import SMOKE

SMALL = OrganismConfig(layers=2, width=64, heads=2, corpus_episodes=10)


def test_the_tokenizer_learns_the_envs_text_round_trips_and_keeps_the_tags_whole():
    texts = list(corpus([SMOKE], SFTConfig(), 10))
    tokenizer = build_tokenizer(texts, 2000)
    prompt = ChatEnv(SMOKE).reset(seed=123)[0]["content"]
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == prompt and len(ids) < len(prompt) / 2  # words, not characters
    reply = "<think>go right</think><answer>Right</answer>"
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert pieces[0] == "<think>" and pieces[-1] == "</answer>"
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == reply
    unseen = "Zebra ünïcode 🙂"
    assert tokenizer.decode(tokenizer(unseen, add_special_tokens=False)["input_ids"]) == unseen
    model = build_model(tokenizer, OrganismConfig(), seed=0)
    assert 1e6 < sum(p.numel() for p in model.parameters()) < 2e7  # a few million parameters


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


def test_the_command(tmp_path):
    out = tmp_path / "organism"
    flags = ["--env", SMOKE, "--episodes", "4", "--corpus-episodes", "5", "--layers", "1", "--width", "32",
             "--heads", "2", "--output-dir", str(out)]
    assert main(["sft", "--from-scratch", *flags]) == 0
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert main(["sft", "--from-scratch", *flags, "--model", "some/model"]) == 2
