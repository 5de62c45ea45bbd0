"""The ragen command on a tiny model saved to disk."""

import json
import re
from inspect import signature
from pathlib import Path

import pytest

from ragen_envs.cli import main, parse
from ragen_envs.cli.commands import COLUMNS
from ragen_envs.agent import load_jsonl, vision
from ragen_envs.registry import ENVIRONMENTS, env_for, load_class
from conftest import DEFAULT, OPEN_TEXT, SMOKE, SMOKE_KWARGS, USABLE_IDS


def test_eval_prints_the_table_and_saves(model_dir, tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["eval", "--env", DEFAULT, "--env", f"{SMOKE}:1", "--groups", "1",
                 "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--model", model_dir,
                 "--save", str(out), "--pass-k", "1"]) == 0
    text = capsys.readouterr().out
    assert "success" in text and "format_valid" in text
    assert len(out.read_text().splitlines()) == 4  # 1 group x 2 samples for each env
    header, *rows = [line.split() for line in text.splitlines() if line.startswith(("env ", "Ragen/"))]
    assert header[-2:] == ["pass@1", "pass@2"]  # asked for, and RAGEN's at the group size
    saved = load_jsonl(out)
    for row in rows:
        won = [t.success for t in saved if t.env_id == row[0]]
        assert float(row[-2]) == float(row[header.index("success")]) and float(row[-1]) == float(any(won))


def test_eval_refuses_a_pass_k_beyond_the_group_size_before_loading_a_model(capsys):
    assert main(["eval", "--env", SMOKE, "--group-size", "2", "--pass-k", "1,4", "--model", "no/such-model"]) == 2
    assert "--pass-k 4 needs groups of at least 4 samples; --group-size is 2" in capsys.readouterr().err
    assert main(["eval", "--env", SMOKE, "--pass-k", "1,x"]) == 2
    assert "expected comma-separated positive integers such as 1,4,16, got '1,x'" in capsys.readouterr().err


def test_eval_prints_a_dash_where_random_actions_do_not_exist(model_dir, capsys):
    assert main(["eval", "--env", OPEN_TEXT, "--env", SMOKE, "--groups", "1", "--group-size", "2", "--max-turns", "1",
                 "--max-new-tokens", "4", "--model", model_dir]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("Ragen/")}
    random = [header for header, _ in COLUMNS].index("random") + 1
    assert rows[OPEN_TEXT][random] == "-" and rows[SMOKE][random] != "-" and "nan" not in " ".join(rows[OPEN_TEXT])


def test_eval_with_ragens_validation_preset_runs_on_every_catalogue_env(model_dir, tiny_vlm_path, tmp_path, capsys):
    for env_id in USABLE_IDS:  # RAGEN's turns and env settings per env, one short episode each here
        out = tmp_path / f"{env_id.split('/')[1]}.jsonl"
        model = str(tiny_vlm_path) if ENVIRONMENTS[env_id].visual else model_dir  # images: a vision-language model
        assert main(["eval", "--preset", "ragen2-main", "--env", env_id, "--groups", "1", "--max-turns", "1",
                     "--max-new-tokens", "4", "--model", model, "--save", str(out)]) == 0, env_id
        episode = json.loads(out.read_text())
        assert episode["seed"] == 123 and episode["env_id"] == env_id
        stated = ENVIRONMENTS[env_id].max_tokens  # the length line says the env's own budget
        assert f"Max response length: {stated} words" in vision.message_text(episode["messages"][1]["content"])


def test_train_then_plot(model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--env", SMOKE, "--model", model_dir, "--iterations", "2",
                 "--groups", "2", "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4",
                 "--filter", "top_p", "--output-dir", str(run), "--mixed-precision", "no"]) == 0
    out, err = capsys.readouterr()
    # Long steps: one complete line each on stderr; the table alone on stdout.
    steps = [line for line in err.splitlines() if " ..." in line]
    assert [line.split(" ...")[0] for line in steps] == [f"loading model {model_dir}", "writing checkpoint-2"]
    assert all(re.search(r" \.\.\. done \([0-9.]+ s(, \d+ MB)?\)$", line) for line in steps), steps
    table = out.splitlines()
    assert table[0].split()[:4] == ["it", "success", "random", "format"]
    assert [line.split()[0] for line in table[1:3]] == ["1", "2"] and table[3].startswith("run folder:")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    saved = json.loads((run / "config.json").read_text())  # the resolved config, to repeat the run
    assert saved["env"] == {SMOKE: 2} and saved["model"] == model_dir
    assert saved["rollout"]["sampling"]["max_new_tokens"] == 4 and saved["filter"] == "top_p"
    assert [r["iteration"] for r in records] == [1, 2]
    assert (run / "metrics.png").stat().st_size > 1000
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").is_file()
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["iteration-2.jsonl"]  # the last
    assert main(["view", str(run)]) == 0
    assert (run / "report.html").read_text().count('class="episode') == 4


def test_bad_arguments_exit_with_a_message(capsys):
    assert main(["train", "--env", SMOKE, "--algorithm", "a3c"]) == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["eval", "train", "sft", "serve", "plot", "view", "list"])
def test_help_is_grouped_one_line_a_flag_and_help_all_has_the_rest(command, capsys):
    assert main([command, "--help"]) == 0
    short = capsys.readouterr().out
    lines = short.splitlines()
    # one screenful or two: train's grows with RAGEN's options and vLLM's (its groups say where each is)
    assert lines[0].startswith(f"usage: ragen {command} [options]") and len(lines) <= 145
    assert all(len(line) <= 110 for line in lines)
    assert main([command, "--help-all"]) == 0
    full = capsys.readouterr().out
    flags = {word.strip("[],|") for word in full.split() if word.startswith(("--", "[--"))}
    missing = {f for f in flags if f not in short and f.replace("--no-", "--[no-]") not in short
               and f.replace("--", "--[no-]") not in short and not f.startswith("--help") and f != "--debug"}
    assert not missing  # every flag is in the short help
    assert "(default: cuda when available) (default" not in full


def test_train_help_reads_in_groups(capsys):
    main(["train", "--help"])
    groups = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith(" ")][1:]
    assert [g.split(":")[0].split(" (")[0] for g in groups] == [
        "options", "model", "vllm", "run", "rollout", "chat", "sampling", "optimisation", "LoRA", "devices",
        "algorithm", "filter", "RAGEN's reward and advantage options", "MI", "gradient probe", "validation", "output"]


def _leaves(cls):
    """(field, owner class) of every non-dataclass field, nested configs included."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name])
        else:
            yield f, cls


@pytest.mark.parametrize("command, classes", [
    ("train", ("TrainerConfig",)), ("eval", ("RolloutConfig", "PolicyConfig"))])
def test_every_config_field_is_a_flag_with_its_default_and_help(command, classes):
    import dataclasses

    from ragen_envs.cli import args as cli_args
    from ragen_envs.agent.backends import PolicyConfig
    from ragen_envs.agent.rollout import RolloutConfig
    from ragen_envs.cli import build_parser
    from trainers import TrainerConfig

    known = {"TrainerConfig": TrainerConfig, "RolloutConfig": RolloutConfig, "PolicyConfig": PolicyConfig}
    _, commands = build_parser()
    actions = {a.dest: a for a in commands[command]._actions}
    for name in classes:
        for f, owner in _leaves(known[name]):
            if command == "train" and owner is PolicyConfig:
                continue
            action = actions.get(cli_args._dest(f))
            assert action is not None, f"{owner.__name__}.{f.name} has no flag"
            assert action.default == cli_args._default(f), f.name
            assert cli_args.field_help(owner).get(f.name), f"{owner.__name__}.{f.name} has no help"
    # Parsing no flags gives the dataclass defaults, nested configs included.
    args = parse([command, "--env", DEFAULT])
    if command == "train":
        assert cli_args.build(TrainerConfig, args) == TrainerConfig()
    else:
        assert cli_args.build(RolloutConfig, args) == RolloutConfig()
        assert cli_args.build(PolicyConfig, args) == PolicyConfig()
    assert dataclasses.is_dataclass(RolloutConfig().chat) and dataclasses.is_dataclass(RolloutConfig().sampling)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_saved_config_repeats_the_run_and_flags_override_it(tmp_path, suffix):
    import yaml

    from ragen_envs.cli import args as cli_args
    from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig
    from trainers import TrainerConfig

    saved = TrainerConfig(algorithm="dapo", num_iterations=7, filter="top_p", filter_value=0.5, beta=0.01,
                          rollout=RolloutConfig(n_groups=3, seed=5, chat=ChatEnvConfig(max_turns=2),
                                                sampling=SamplingConfig(max_new_tokens=33, top_p=0.9)))
    record = {"model": "some/model", "env": {SMOKE: 3}, **saved.to_dict()}
    path = tmp_path / f"run{suffix}"
    path.write_text(json.dumps(record) if suffix == ".json" else yaml.safe_dump(record))
    args = parse(["train", "--config", str(path)])
    assert cli_args.build(TrainerConfig, args) == saved
    assert args.env == [f"{SMOKE}:3"] and args.model == "some/model"
    args = parse(["train", "--config", str(path), "--max-turns", "4", "--env", DEFAULT])
    assert cli_args.build(TrainerConfig, args).rollout.chat.max_turns == 4 and args.env == [DEFAULT]
    path.write_text(json.dumps({"rollout": {"max_turn": 3}}))
    with pytest.raises(ValueError, match="rollout.'max_turn'"):
        parse(["train", "--config", str(path)])


def test_a_config_file_takes_a_groups_settings_nested_or_by_their_flat_names(tmp_path):
    from ragen_envs.cli import args as cli_args
    from trainers import EvalConfig, FilterConfig, GradientProbeConfig, TrainerConfig

    want = TrainerConfig(filtering=FilterConfig("top_k", 0.25, include_zero=False), evaluation=EvalConfig(steps=3),
                         probe=GradientProbeConfig(only=True))
    written = [{"filtering": {"strategy": "top_k", "value": 0.25, "include_zero": False}, "evaluation": {"steps": 3},
                "probe": {"only": True}},  # nested, by the groups' own field names
               {"filter": "top_k", "filter_value": 0.25, "include_zero": False, "eval_steps": 3,
                "exit_after_gradient_analysis": True},  # flat, as config.json was and is written
               {"filter": "top_k", "filter-value": 0.25, "include-zero": False, "eval-steps": 3,
                "gradient-analysis-only": True}]  # by the flags' names
    for n, data in enumerate(written):
        path = tmp_path / f"run{n}.json"
        path.write_text(json.dumps(data))
        assert cli_args.build(TrainerConfig, parse(["train", "--config", str(path), "--env", DEFAULT])) == want, data
    args = parse(["train", "--config", str(path), "--env", DEFAULT, "--filter-value", "0.5",
                  "--no-gradient-analysis-only"])
    assert cli_args.build(TrainerConfig, args) == TrainerConfig(filter="top_k", filter_value=0.5, include_zero=False,
                                                                eval_steps=3)


@pytest.mark.parametrize("text, message", [
    ('{"rollout": {"max_turn": 3}}', "unknown config key rollout.'max_turn'; did you mean 'max_turns'?"),
    ('{"learning_rat": 0.1}', "did you mean 'learning_rate'?"),
    ('{"rollout": {"n_groups": "8"}}', "'rollout.n_groups' must be an integer, got '8'"),
    ('{"algorithm": "a3c"}', "'algorithm' must be one of 'ppo'"),
    ('{"learning_rate": true}', "'learning_rate' must be a number, got True"),
    ('{"rollout": {"chat": 3}}', "must be a mapping"),
    ('{"rollout": ', "is not valid JSON"),
])
def test_a_bad_run_config_is_one_line_not_a_traceback(tmp_path, capsys, text, message):
    path = tmp_path / "run.json"
    path.write_text(text)
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_a_config_file_takes_the_flag_names_too(tmp_path):
    from ragen_envs.cli import args as cli_args
    from trainers import TrainerConfig

    path = tmp_path / "run.yaml"
    path.write_text("iterations: 3\nresume: latest\ntemperature: 0.5\nrollout:\n  groups: 2\n  max-turns: 4\n")
    config = cli_args.build(TrainerConfig, parse(["train", "--config", str(path), "--env", SMOKE]))
    assert (config.num_iterations, config.resume_from_checkpoint, config.rollout.sampling.temperature,
            config.rollout.n_groups, config.rollout.chat.max_turns) == (3, "latest", 0.5, 2, 4)


def test_list_shows_the_catalogue(capsys):
    from ragen_envs import ENVIRONMENTS
    from ragen_envs.registry import NOT_IN_CATALOGUE, env_table

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(env_id in out for env_id in ENVIRONMENTS)
    # RAGEN's envs with no entry, each with what it needs
    assert all(f"  {name}: {needs}" in out for name, needs in NOT_IN_CATALOGUE.items())
    assert {"ALFWorld", "Lean"} <= set(NOT_IN_CATALOGUE) and not set(NOT_IN_CATALOGUE) & {
        e.id.split("/")[1].split("-")[0] for e in ENVIRONMENTS.values()}
    assert main(["list", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == env_table()


def test_an_unknown_env_fails_before_any_model_loads(capsys):
    assert main(["eval", "--env", "Ragen/NoSuchEnv-v0", "--model", "/no/such/model"]) == 2
    assert "unknown env 'Ragen/NoSuchEnv-v0'" in capsys.readouterr().err


# an env that takes a slip probability (a float argument)
VISUAL = next(i for i, e in ENVIRONMENTS.items() if e.visual and not e.extra)  # an env that shows images
SLIPPERY = next(i for i, e in ENVIRONMENTS.items() if not e.extra and "slip" in signature(load_class(e)).parameters)
TRAIN = ["train", "--env", SMOKE, "--iterations", "1", "--groups", "1", "--group-size", "2"]


def no_loading(*args, **kwargs):
    raise AssertionError("a model was loaded before the arguments were checked")


@pytest.mark.parametrize("argv, message", [
    (["eval", "--env", SMOKE, "--model", "/no/such/model"], "no model folder at /no/such/model"),
    (["eval", "--env", SMOKE, "--model", "{empty}"], "is not a model folder (no config.json"),
    (["eval", "--env", SMOKE, "--backend", "openai", "--model", "m"], "needs --tokenizer"),
    (["eval", "--env", f"{SMOKE}:abc"], "must be a positive integer"),
    (["eval", "--env", SMOKE, "--groups", "0"], "n_groups must be a positive integer"),
    (["eval", "--env", SMOKE, "--temperature", "-1"], "temperature must be >= 0"),
    (TRAIN + ["--filter", "top_k", "--filter-value", "2"], "filter value (rho) must be in (0, 1] for top_k"),
    (TRAIN + ["--gamma", "1.5"], "gamma must be in [0, 1]"),
    (TRAIN + ["--save-total-limit", "0"], "save_total_limit must be >= 1"),
    (TRAIN + ["--env-kwargs", json.dumps({DEFAULT: {}})], f"{DEFAULT}, which is not in this run"),
    (TRAIN + ["--env-kwargs", '{"colour": 2}'], "colour"),
    (TRAIN + ["--env", DEFAULT, "--env-kwargs", '{"slip": 0.1}'], "not keyed by env id"),
    (TRAIN + ["--env-kwargs", "[1]"], "argument --env-kwargs: a JSON object is needed"),
    (TRAIN + ["--env-kwargs", "{slip: 0.2}"], "not JSON (Expecting property name enclosed in double quotes"),
    (["eval", "--env", SLIPPERY, "--env-kwargs", '{"slip": "high"}'], "argument 'slip' must be a number, got 'high'"),
    (["eval", "--env", SLIPPERY, "--env-kwargs", '{"slp": 0.2}'], "unknown argument 'slp'; did you mean 'slip'?"),
    (["eval", "--env", DEFAULT.lower()], f"did you mean {DEFAULT!r}?"),
    (TRAIN + ["--temprature", "0.5"], "unrecognized arguments: --temprature 0.5; did you mean '--temperature'?"),
    (TRAIN + ["--lr", "1e-4"], "unrecognized arguments: --lr 1e-4; did you mean '--learning-rate'?"),  # others' name
    (TRAIN + ["--iteration", "3"], "unrecognized arguments: --iteration 3; did you mean '--iterations'?"),  # no abbrev.
    (["eval", "--env", SMOKE, "--lerning-rate", "1"], "ragen eval: error: unrecognized arguments: --lerning-rate"),
    (["train", "--iterations", "x"], "argument --iterations: invalid int value: 'x'"),
    (TRAIN + ["--backend", "openai", "--model", "m"], "cannot load the trained weights"),
    (TRAIN + ["--freeze-layers", "-1"], "freeze_layers must be >= 0"),
    (TRAIN + ["--group-size", "1"], "group_size must be >= 2"),
    (["eval", "--env", VISUAL, "--model", "{text}"], f"{VISUAL} shows images and {{text}} is a text model"),
    (["train", "--env", VISUAL, "--model", "{text}"], f"{VISUAL} shows images and {{text}} is a text model"),
    (["eval", "--env", VISUAL], "is a text model: use a vision-language model"),  # the embedded default
    (["train", "--resume", "latest", "--output-dir", "{empty}"], "--resume: no run in {empty}"),
])
def test_every_error_is_one_line_before_any_model_loads(argv, message, tmp_path, capsys, monkeypatch):
    import transformers

    for loader in (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText):
        monkeypatch.setattr(loader, "from_pretrained", no_loading)
    (tmp_path / "empty").mkdir()
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "config.json").write_text('{"model_type": "llama"}')  # no vision_config
    paths = {"{empty}": str(tmp_path / "empty"), "{text}": str(tmp_path / "text")}
    argv = [paths.get(a, a) for a in argv]
    message = message.replace("{empty}", paths["{empty}"]).replace("{text}", paths["{text}"])
    if argv[0] == "train" and "--output-dir" not in argv:
        argv += ["--output-dir", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    lines = err.strip().splitlines()  # one line; argparse's after a one-line usage of the command
    assert len(lines) == 1 or len(lines) == 2 and lines[0].startswith(f"usage: ragen {argv[0]} [options]")
    assert "Traceback" not in err


def test_cuda_without_a_gpu_is_one_line_before_any_model_loads(capsys, monkeypatch):
    import torch
    import transformers

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for loader in (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText):
        monkeypatch.setattr(loader, "from_pretrained", no_loading)
    for command in (["eval"], TRAIN):
        assert main([*command, "--env", SMOKE, "--device", "cuda"]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err


def test_a_hub_id_that_is_neither_cached_nor_reachable_fails_fast(capsys, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "model_info", offline)
    assert main(["eval", "--env", SMOKE, "--model", "someone/not-cached-here"]) == 2
    assert "Hub cannot be reached" in capsys.readouterr().err


def test_a_model_that_will_not_load_leaves_no_empty_run_folder(tmp_path, capsys, monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "model_info", offline)
    run = tmp_path / "run"
    assert main(TRAIN + ["--model", "someone/not-cached-here", "--output-dir", str(run)]) == 2
    assert "Hub cannot be reached" in capsys.readouterr().err and not run.exists()
    run.mkdir()  # a folder the user made stays
    assert main(TRAIN + ["--model", "someone/not-cached-here", "--output-dir", str(run)]) == 2
    assert run.is_dir()


def test_lora_without_peft_is_one_line_before_any_model_loads(capsys, monkeypatch):
    import importlib.util

    import transformers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    assert main(TRAIN + ["--lora-rank", "8"]) == 2
    assert 'needs peft, which is not installed: pip install "ragen-envs[lora]"' in capsys.readouterr().err


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(ValueError, match="no model folder"):
        main(["eval", "--env", SMOKE, "--model", "/no/such/model", "--debug"])
    with pytest.raises(ValueError, match="no model folder"):
        main(["--debug", "eval", "--env", SMOKE, "--model", "/no/such/model"])


def test_flat_env_kwargs_go_to_the_single_env(model_dir, tmp_path):
    from ragen_envs.agent import load_jsonl

    out = tmp_path / "t.jsonl"
    assert main(["eval", "--env", SMOKE, "--groups", "1", "--group-size", "2", "--max-turns", "1",
                 "--max-new-tokens", "4", "--model", model_dir, "--save", str(out),
                 "--env-kwargs", json.dumps(SMOKE_KWARGS)]) == 0
    trajectory = load_jsonl(out)[0]
    assert SMOKE_KWARGS and trajectory.env_kwargs == SMOKE_KWARGS
    assert trajectory.transition_seed is not None


def test_version_and_help(capsys):
    from ragen_envs import __version__

    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
    assert main(["train", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--[no-]overwrite" in text and "--save-total-limit" in text and "[10]" in text
    assert main(["train", "--help-all"]) == 0
    assert "(default: 10)" in capsys.readouterr().out


def test_every_option_of_every_command_has_help():
    from ragen_envs.cli import build_parser

    parser, commands = build_parser()
    for name, command in [("ragen", parser), *commands.items()]:
        for action in command._actions:
            assert action.help and action.help.strip(), f"{name} {action.option_strings or action.dest} has no help"


def test_every_field_of_every_config_the_cli_exposes_declares_its_help(monkeypatch):
    """Help is data on the field (``metadata["help"]``, TRL's way), never a comment: a new field without it
    fails here, whichever command's config holds it, and so does an empty one."""
    import dataclasses
    import typing

    from ragen_envs.cli import args as cli_args
    from ragen_envs.cli import build_parser

    exposed, real = [], cli_args.add_config

    def record(parser, cls, *args, **kwargs):  # the configs the commands' flags come from
        exposed.append(cls)
        real(parser, cls, *args, **kwargs)

    monkeypatch.setattr(cli_args, "add_config", record)
    build_parser()
    names = {c.__name__ for c in exposed}
    assert {"TrainerConfig", "SFTConfig", "PolicyConfig", "RolloutConfig", "ServerConfig"} <= names
    seen, missing = set(), []
    while exposed:
        cls = exposed.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # every field, those a command leaves out (include=) too
            text = f.metadata.get("help")
            if not isinstance(text, str) or not text.strip():
                missing.append(f"{cls.__name__}.{f.name}")
            if dataclasses.is_dataclass(hints[f.name]):
                exposed.append(hints[f.name])
    assert not missing, f"declare metadata['help'] on: {', '.join(missing)}"
    assert {"ChatEnvConfig", "SamplingConfig", "VLLMConfig", "FilterConfig"} <= {c.__name__ for c in seen}

    @dataclasses.dataclass
    class Commented:
        size: int = 3  # a comment is not help

    assert cli_args.field_help(Commented) == {}


def test_list_says_which_envs_lack_their_extra(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bm25s" else real(name, *a))
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]}
    searching = [e.id for e in ENVIRONMENTS.values() if "bm25s" in e.requires]
    assert searching and all('pip install "ragen-envs[search]"' in lines[i] for i in searching)
    core = [e.id for e in ENVIRONMENTS.values() if not e.extra and not e.system]
    assert core and all(" yes " in lines[i] for i in core)


def test_presets_set_the_defaults_and_flags_override_them():
    from ragen_envs.cli import args as cli_args
    from trainers import TrainerConfig
    from trainers.env_settings import PRESET_PARTS

    args = parse(["train", "--preset", "ragen2-main", "--env", SMOKE, "--algorithm", "ppo"])
    cfg = cli_args.build(TrainerConfig, args)
    r = cfg.rollout
    assert (r.n_groups, r.group_size, r.sampling.max_new_tokens, r.seed) == (8, 16, 400, 10000)  # seed.train
    assert (cfg.filter, cfg.filter_value, cfg.filter_prob_mode, cfg.mini_batch_size, cfg.num_iterations) == \
        ("top_p", 0.9, "softmax", 32, 400)
    assert cfg.advantage == "gae" and cfg.critic == "separate"
    for entry in ENVIRONMENTS.values():  # each env's own part of the preset is its PRESET_PARTS entry
        own = PRESET_PARTS.get(entry.id, {}).get("ragen2-main", {})
        run = TrainerConfig.from_preset("ragen2-main", entry.id).rollout
        chat = {"max_turns": 5, "max_actions_per_turn": 2, **own.get("rollout", {}).get("chat", {})}
        assert (run.chat.max_turns, run.chat.max_actions_per_turn) == (chat["max_turns"], chat["max_actions_per_turn"])
        assert run.env_kwargs == ({entry.id: own["env_kwargs"]} if "env_kwargs" in own else {})
    quick = cli_args.build(TrainerConfig, parse(["train", "--preset", "cpu-quick", "--env", SMOKE,
                                                 "--iterations", "5"]))
    assert quick.num_iterations == 5 and quick.rollout.group_size == 4 and quick.mini_batch_size == 8
    with pytest.raises(SystemExit):
        parse(["train", "--preset", "huge", "--env", SMOKE])


def test_the_eval_preset_is_ragens_validation_with_each_envs_own_settings():
    from ragen_envs.agent.rollout import RolloutConfig
    from ragen_envs.cli import args as cli_args
    from trainers import TrainerConfig

    for entry in ENVIRONMENTS.values():
        val = cli_args.build(RolloutConfig, parse(["eval", "--preset", "ragen2-main", "--env", entry.id]))
        run = TrainerConfig.from_preset("ragen2-main", entry.id).rollout
        assert (val.n_groups, val.group_size, val.seed, val.sampling.temperature) == (512, 1, 123, 0.5)
        assert (val.chat, val.env_kwargs, val.sampling.max_new_tokens) == \
            (run.chat, run.env_kwargs, run.sampling.max_new_tokens)
        # every RAGEN config leaves base.yaml's "full": RubiksCube's and 2048's max_context_window (5) is read
        # only in the other modes (ragen/llm_agent/ctx_manager.py), so their prompts hold the whole episode
        assert (run.context_window_mode, val.context_window_mode) == ("full", "full"), entry.id
    few = cli_args.build(RolloutConfig, parse(["eval", "--preset", "ragen2-main", "--env", SMOKE, "--groups", "2"]))
    assert few.n_groups == 2 and few.seed == 123


def test_the_demo_warm_start_prompts_match_the_cpu_quick_runs():
    """`make demo-smollm2` trains the warm start with SFTConfig's defaults, then RL with cpu-quick: the prompts
    (turns left, reply budget) must be the same, or the warm start learnt other prompts."""
    from trainers.config import SFTConfig, TrainerConfig

    quick, sft = TrainerConfig.from_preset("cpu-quick"), SFTConfig()
    assert quick.rollout.chat == sft.chat
    assert quick.rollout.sampling.max_new_tokens == sft.max_new_tokens
    assert quick.freeze_layers == sft.freeze_layers


def test_the_organism_learns_the_prompts_its_preset_plays():
    """`make demo` builds the organism with ORGANISM_SFT, then trains it with the organism preset (RAGEN's
    main-table run with the organism's rate): the prompts must be the very same."""
    from ragen_envs.agent import ChatEnv
    from trainers.config import ORGANISM_RL, TrainerConfig, organism_sft, preset

    demo = env_for("demo")
    sft, run = organism_sft(), TrainerConfig.from_preset("organism", demo)
    played = ChatEnv(demo, run.rollout.chat, run.rollout.sampling.max_new_tokens, **run.rollout.env_kwargs[demo])
    assert ChatEnv(demo, sft.chat, sft.max_new_tokens).reset(seed=5) == played.reset(seed=5)
    assert preset("organism", demo) == {**preset("ragen2-main", demo), **ORGANISM_RL}


def test_list_says_which_envs_lack_their_system_program(capsys, monkeypatch):
    import ragen_envs.cli.commands as commands

    monkeypatch.setattr(commands, "system_problem", lambda entry: "not here" if entry.system else None)
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]}
    from ragen_envs.registry import missing_modules

    needing = [e for e in ENVIRONMENTS.values() if e.system and not missing_modules(e)]
    assert needing and all(f"install {e.system}" in lines[e.id] for e in needing)


def _unwritable(tmp_path):
    """A path no file can be written under (its parent is a file), for a root user too."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "out"


@pytest.mark.parametrize("command", ["eval", "train", "sft"])
def test_an_unwritable_output_is_refused_before_the_work(command, model_dir, tmp_path, capsys, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the model loaded before the output was checked"))
    out = _unwritable(tmp_path)
    where = ["--save", f"{out}/t.jsonl"] if command == "eval" else ["--output-dir", str(out)]
    assert main([command, "--env", SMOKE, "--model", model_dir, *where]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragen: error: cannot write") and "Not a directory" in err and len(err.splitlines()) == 1


def test_trajectories_are_kept_when_saving_fails_at_the_end(model_dir, tmp_path, capsys, monkeypatch):
    import ragen_envs.agent.trajectory as trajectory

    out = tmp_path / "t.jsonl"
    real = trajectory.save_jsonl

    def disk_full_here(trajectories, path):
        if Path(path) == out:
            raise OSError(28, "No space left on device")
        real(trajectories, path)

    monkeypatch.setattr("ragen_envs.agent.save_jsonl", disk_full_here)
    assert main(["eval", "--env", SMOKE, "--groups", "1", "--group-size", "2", "--max-turns", "1",
                 "--max-new-tokens", "4", "--model", model_dir, "--save", str(out)]) == 2
    captured = capsys.readouterr()
    assert "success" in captured.out  # the table was printed
    kept = Path(re.search(r"kept in (\S+) instead", captured.err).group(1))
    assert "No space left on device" in captured.err and len(kept.read_text().splitlines()) == 2
    kept.unlink()


def test_the_docs_ragen_options_table_names_real_flags(capsys):
    """Every flag in docs/training.md's table of RAGEN's other training options is one `ragen train` has."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    table = page.split("RAGEN's other training options", 1)[1].split("\n\n", 2)[1]
    named = {re.sub(r"\s.*", "", cell).replace("\\", "") for cell in re.findall(r"`(--[^`]+)`", table)}
    assert len(named) >= 12
    main(["train", "--help"])
    usage = capsys.readouterr().out
    forms = {f: (f, f.replace("--no-", "--[no-]"), f.replace("--", "--[no-]", 1)) for f in named}
    assert not {f for f, spelt in forms.items() if not any(form in usage for form in spelt)}
