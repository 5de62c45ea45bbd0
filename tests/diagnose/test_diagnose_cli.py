"""``ragen diagnose``: a generic JSONL file and a run folder in, diagnosis.json (a row per step and a verdict)
and diagnosis.png out; bad input is one line on stderr and exit 2 before any model loads."""

import json

import pytest

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig, save_jsonl
from ragen_envs.agent.trajectory import rollouts_path
from ragen_envs.cli import diagnose as cli_diagnose
from ragen_envs.cli import main
from conftest import DEFAULT, SMOKE

BOARDS = ["the box is left of the target", "the box is right of the target", "the box is above the target"]


def write_lines(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def generic_lines():
    """Steps 0 and 1: three prompts, two samples each; step 2: one sample a prompt."""
    lines = []
    for step, size in [(0, 2), (1, 2), (2, 1)]:
        for g, board in enumerate(BOARDS):
            for k in range(size):
                reply = f"<think>push the box {board.split()[3]} {k}</think><answer>Left</answer>"
                lines.append({"prompt": f"Board: {board}\n", "response": reply, "reward": float(k + g % 2),
                              "group": f"g{g}", "step": step})
    return lines


def test_generic_jsonl_gives_a_row_per_step_and_a_verdict(model_dir, tmp_path, capsys):
    source = write_lines(tmp_path / "samples.jsonl", generic_lines())
    assert main(["diagnose", str(source), "--model", model_dir, "--out", str(tmp_path / "diag")]) == 0
    result = json.loads((tmp_path / "diag" / "diagnosis.json").read_text())
    assert [row["step"] for row in result["rows"]] == [0, 1, 2]
    assert result["format"] == "generic JSONL" and result["model"] == model_dir
    assert isinstance(result["verdict"], str) and result["verdict"]
    for row in result["rows"]:  # every step scored, MI included where groups have one sample
        assert 0 <= row["mi/retrieval_acc"] <= 1 and row["mi/retrieval_chance"] == pytest.approx(1 / 3)
        assert row["reasoning_length"] > 0
    assert len(result["rows"][0]["reward_std"]) == 3 and "reward_std" not in result["rows"][2]
    assert result["rows"][2]["notes"] == ["reward statistics skipped: every group has one sample"]
    assert (tmp_path / "diag" / "diagnosis.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "verdict: " in out and f"scored by {model_dir}" in out


def test_a_reasoning_pattern_reads_the_reasoning(tmp_path):
    from ragen_envs.diagnose import read_records

    lines = [{**line, "response": "[plan: go up] Up"} for line in generic_lines()]
    kind, records = read_records(write_lines(tmp_path / "s.jsonl", lines), pattern=r"\[plan: (.*?)\]")
    assert kind == "generic JSONL" and {r.reasoning for r in records} == {"go up"}


REPLIES = ["<think>I should move the box toward the target.</think><answer>Left || Down</answer>",
           "<think>down looks safe</think><answer>Down</answer>"]


def test_a_run_folder_gives_a_row_per_iteration(scripted, model_dir, tmp_path):
    config = RolloutConfig(n_groups=2, group_size=2, chat=ChatEnvConfig(max_turns=2), seed=4,
                           sampling=SamplingConfig(max_new_tokens=32))
    run = tmp_path / "run"
    for iteration in (0, 2):
        trajs = RolloutRunner({DEFAULT: 2, SMOKE: 2}, scripted(REPLIES), config).collect()
        rollouts_path(run, iteration).parent.mkdir(parents=True, exist_ok=True)
        save_jsonl(trajs, rollouts_path(run, iteration))
    assert main(["diagnose", str(run), "--model", model_dir]) == 0
    result = json.loads((run / "diagnosis.json").read_text())
    assert result["format"] == "run folder" and [row["step"] for row in result["rows"]] == [0, 2]
    assert all("mi/mi_est" in row and row["episodes"] == len(trajs) for row in result["rows"])
    assert (run / "diagnosis.png").is_file()
    from ragen_envs.cli.report import write_report

    page = write_report(run).read_text()  # ragen view: the diagnosis beside the episodes
    assert "Template-collapse diagnosis" in page and result["verdict"].split(":")[0] in page
    assert page.count("<tr class=\"repeat\"><td>2</td>") == 1 and 'href="diagnosis.png"' in page


def test_the_reports_diagnosis_section_treats_the_file_as_data(tmp_path):
    from ragen_envs.cli.report import diagnosis_section

    source = tmp_path / "run"
    (tmp_path / "diagnosis.json").write_text(json.dumps({
        "source": "elsewhere/run", "verdict": "<script>alert(1)</script>", "model": "<b>m</b>",
        "rows": [{"step": "<img src=x>", "mi/retrieval_acc": "high", "warning": "<i>w</i>"}, "not a row"]}))
    section = diagnosis_section(tmp_path, source)
    assert "<script>" not in section and "&lt;script&gt;" in section and "<img" not in section
    assert "<i>w</i>" not in section and "high" in section
    (tmp_path / "diagnosis.json").write_text(json.dumps({"source": "other.jsonl", "rows": []}))
    assert diagnosis_section(tmp_path, source) == ""  # another file's diagnosis
    (tmp_path / "diagnosis.json").write_text("{broken")
    assert "is not readable" in diagnosis_section(tmp_path, source)


@pytest.mark.parametrize("case", ["unknown format", "no groups", "missing file", "every step unusable",
                                  "empty folder"])
def test_bad_input_is_one_line_and_exit_2_before_any_model(case, tmp_path, monkeypatch, capsys):
    def no_model(args):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(cli_diagnose, "load_scorer", no_model)
    lines = generic_lines()
    source = {"unknown format": lambda: (tmp_path / "notes.txt").write_text("hello\n") and tmp_path / "notes.txt",
              "no groups": lambda: write_lines(tmp_path / "s.jsonl", [{k: v for k, v in line.items() if k != "group"}
                                                                      for line in lines]),
              "missing file": lambda: tmp_path / "nowhere.jsonl",
              "every step unusable": lambda: write_lines(tmp_path / "s.jsonl", [{**line, "group": 0}
                                                                                for line in lines]),
              "empty folder": lambda: tmp_path}[case]()
    assert main(["diagnose", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragen: error: ") and err.count("\n") == 1, err
    assert {"unknown format": "unknown format", "no groups": "has no 'group'", "missing file": "does not exist",
            "every step unusable": "no step can be diagnosed", "empty folder": "unknown format"}[case] in err


def test_the_verdict_names_the_step_where_retrieval_fell_to_chance_while_entropy_held():
    from ragen_envs.diagnose import judge

    def row(step, acc, h):
        return {"step": step, "mi/retrieval_acc": acc, "mi/retrieval_chance": 0.125, "mi/conditional_entropy": h}

    verdict, step = judge([row(0, 0.9, 2.0), row(5, 0.6, 2.1), row(10, 0.2, 2.2)])
    assert step == 10 and verdict.startswith("template collapse: Retrieval-Acc fell to within 2x chance at step 10")
    assert judge([row(0, 0.9, 2.0), row(10, 0.6, 3.0)]) == ("no collapse signature", None)
    verdict, step = judge([row(0, 0.9, 2.0), row(10, 0.2, 1.0)])  # at chance, H(Z|X) fell with it
    assert step is None and verdict.startswith("no collapse signature (not the template kind): Retrieval-Acc fell")
    assert judge([row(0, 0.2, 2.0), row(10, 0.2, 2.0)])[0].startswith("no collapse signature: Retrieval-Acc was")


def test_a_ragen_dump_is_diagnosed_and_a_pickle_refused_unopened(model_dir, tmp_path, capsys):
    from tests.diagnose.test_read_ragen import WritesFile, write_dump

    dump = tmp_path / "val_rollouts_20260101_000000.jsonl"
    write_dump(dump, groups=3, size=2)
    assert main(["diagnose", str(dump), "--model", model_dir, "--out", str(tmp_path / "diag")]) == 0
    result = json.loads((tmp_path / "diag" / "diagnosis.json").read_text())
    assert result["format"] == "RAGEN rollout dump" and result["rows"][0]["mi/retrieval_chance"] == pytest.approx(1 / 3)
    import pickle

    (tmp_path / "val_rollouts.pkl").write_bytes(pickle.dumps(WritesFile(tmp_path / "planted")))
    assert main(["diagnose", str(tmp_path / "val_rollouts.pkl"), "--model", model_dir]) == 2
    assert "convert_to_jsonl.py" in capsys.readouterr().err and not (tmp_path / "planted").exists()
