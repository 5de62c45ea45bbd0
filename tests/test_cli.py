"""The ragen command on a tiny model saved to disk."""

import json

import pytest

from ragen_envs.cli import main


@pytest.fixture
def model_dir(tiny_model, tokenizer, tmp_path):
    path = tmp_path / "tiny"
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_eval_prints_the_table_and_saves(model_dir, tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["eval", "--env", "Ragen/Sokoban-v0", "--env", "Ragen/FrozenLake-v0:1", "--groups", "1",
                 "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--model", model_dir,
                 "--save", str(out)]) == 0
    text = capsys.readouterr().out
    assert "success" in text and "format_valid" in text
    assert len(out.read_text().splitlines()) == 4  # 1 group x 2 samples for each env


def test_train_then_plot(model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--env", "Ragen/FrozenLake-v0", "--model", model_dir, "--iterations", "2",
                 "--groups", "2", "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4",
                 "--filter", "top_p", "--output-dir", str(run), "--mixed-precision", "no"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2]
    assert (run / "metrics.png").stat().st_size > 1000
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").is_file()
    assert "success" in capsys.readouterr().out


def test_bad_arguments_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--env", "Ragen/FrozenLake-v0", "--algorithm", "a3c"])
    assert "invalid choice" in capsys.readouterr().err
