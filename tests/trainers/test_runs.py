"""Runs never lose data: one run per folder, total iterations, checkpoints that are checked before
they are trusted, and metrics that survive a killed process."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ragen_envs.cli import main
from tests.trainers.test_trainer import SeededReplies, config, make_model
from trainers import Trainer
from conftest import SMOKE


def trainer(tokenizer, cfg):
    return Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                   rollout_policy=SeededReplies(tokenizer))


def iterations(run):
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_second_run_never_touches_the_first(tokenizer, tmp_path):
    cfg = config(tmp_path, save_steps=1)
    trainer(tokenizer, cfg).train()
    run = tmp_path / "run"
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    with pytest.raises(ValueError, match=r"already holds a run .*--resume latest.*--overwrite"):
        trainer(tokenizer, cfg)
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    trainer(tokenizer, replace(cfg, overwrite_output_dir=True, num_iterations=2, save_steps=0)).train()
    assert iterations(run) == [1, 2]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2"]  # the old run's is gone


def test_a_rollout_backend_factory_is_built_only_after_the_run_folder_is_checked(tokenizer, tmp_path):
    # A slow engine (vLLM) must not load just to be told the run folder is taken.
    cfg = config(tmp_path, save_steps=1)
    trainer(tokenizer, cfg).train()
    built = []

    def factory():
        built.append(1)
        return SeededReplies(tokenizer)

    with pytest.raises(ValueError, match="already holds a run"):
        Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer, rollout_policy=factory)
    assert built == []
    fresh = Trainer(make_model(tokenizer), SMOKE, replace(cfg, overwrite_output_dir=True),
                    tokenizer=tokenizer, rollout_policy=factory)
    assert built == [1] and isinstance(fresh.rollout_policy, SeededReplies)


def test_without_an_output_dir_each_run_gets_its_own_folder(tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config(tmp_path, output_dir=None, save_rollouts_steps=0)
    first, second = trainer(tokenizer, cfg), trainer(tokenizer, cfg)
    assert first.output_dir != second.output_dir
    for t in (first, second):
        assert t.output_dir.parent.name == "runs" and "grpo-FrozenLake-v0" in t.output_dir.name
        assert json.loads((t.output_dir / "config.json").read_text())["output_dir"] == str(t.output_dir)


def test_iterations_are_the_total_and_a_finished_run_has_nothing_to_do(tokenizer, tmp_path, capsys):
    cfg = config(tmp_path, num_iterations=2, save_steps=1, save_total_limit=1, save_rollouts_steps=1)
    trainer(tokenizer, cfg).train()
    run = tmp_path / "run"
    assert [p.name for p in run.glob("checkpoint-*")] == ["checkpoint-2"]  # save_total_limit=1
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["iteration-1.jsonl", "iteration-2.jsonl"]
    assert trainer(tokenizer, replace(cfg, resume_from_checkpoint="latest")).train() == []
    assert "nothing to train" in capsys.readouterr().out
    assert not (run / "metrics.png").exists()  # plot=False (the tests' default)
    resumed = trainer(tokenizer, replace(cfg, resume_from_checkpoint="latest", num_iterations=3, plot=True))
    assert len(resumed.train()) == 1
    assert iterations(run) == [1, 2, 3]
    assert (run / "metrics.png").is_file()  # train() draws the plot, as the CLI does


def test_resuming_an_older_checkpoint_keeps_the_later_records_aside(tokenizer, tmp_path):
    cfg = config(tmp_path, num_iterations=3, save_steps=1, save_rollouts_steps=1)
    trainer(tokenizer, cfg).train()
    run = tmp_path / "run"
    resumed = trainer(tokenizer, replace(cfg, resume_from_checkpoint=str(run / "checkpoint-1")))
    # before training again, the later iterations' rollouts no longer read as the run's
    assert sorted(p.name for p in (run / "rollouts").glob("*.jsonl")) == ["iteration-1.jsonl"]
    resumed.train()
    assert iterations(run) == [1, 2, 3]
    abandoned = [json.loads(line)["iteration"] for line in (run / "metrics.abandoned.jsonl").read_text().splitlines()]
    assert abandoned == [2, 3]
    assert sorted(p.name for p in (run / "rollouts" / "abandoned").iterdir()) == ["iteration-2.jsonl",
                                                                                  "iteration-3.jsonl"]
    assert sorted(p.name for p in (run / "rollouts").glob("*.jsonl")) == [f"iteration-{n}.jsonl" for n in (1, 2, 3)]


def test_an_interrupted_iteration_leaves_no_files_that_read_as_finished(tokenizer, tmp_path, monkeypatch):
    # Ctrl-C in iteration 2's update: its rollouts were collected, but the iteration never finished
    from trainers import Trainer

    cfg = config(tmp_path, num_iterations=3, save_rollouts_steps=1)
    run, real = tmp_path / "run", Trainer._update

    def interrupted(self, *args):
        if self.iteration == 1:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(Trainer, "_update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        trainer(tokenizer, cfg).train()
    assert iterations(run) == [1]
    assert [p.name for p in (run / "rollouts").iterdir()] == ["iteration-1.jsonl"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model, tokenizer):
    """A model folder and a one-iteration CLI run from it, with its checkpoint."""
    root = tmp_path_factory.mktemp("cli")
    model = root / "tiny"
    tiny_model.save_pretrained(model)
    tokenizer.save_pretrained(model)
    args = ["train", "--env", SMOKE, "--model", str(model), "--iterations", "1", "--groups", "2",
            "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--mixed-precision", "no",
            "--output-dir", str(root / "run")]
    assert main(args) == 0
    return root, args


def _copy_run(finished_run, tmp_path):
    import shutil

    root, args = finished_run
    shutil.copytree(root / "run", tmp_path / "run")
    args = [a if a != str(root / "run") else str(tmp_path / "run") for a in args]
    return tmp_path / "run" / "checkpoint-1", args


def _truncate(path):
    path.write_bytes(path.read_bytes()[:100])


CORRUPTIONS = {
    "missing optimizer": (lambda c: (c / "trainer.pt").unlink(), "incomplete: trainer.pt missing"),
    "state not JSON": (lambda c: (c / "trainer_state.json").write_text("{"), "trainer_state.json is unreadable"),
    "state lacks keys": (lambda c: (c / "trainer_state.json").write_text("{}"), "trainer_state.json lacks"),
    "weights truncated": (lambda c: _truncate(c / "model.safetensors"), "model.safetensors is unreadable"),
    "optimizer truncated": (lambda c: _truncate(c / "trainer.pt"), "trainer.pt is unreadable"),
    "foreign optimizer": (lambda c: torch.save({"optimizer": {"state": {}, "param_groups": [{"params": [0]}]},
                                                "value_head": None}, c / "trainer.pt"),
                          "optimizer state does not fit"),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_resume_names_what_is_wrong_with_a_checkpoint_in_one_line(finished_run, tmp_path, capsys, name):
    ckpt, args = _copy_run(finished_run, tmp_path)
    corrupt, message = CORRUPTIONS[name]
    corrupt(ckpt)
    capsys.readouterr()
    assert main([*args, "--iterations", "2", "--resume", "latest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and str(ckpt) in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("flags, message", [
    (["--algorithm", "dapo"], "trained with --algorithm grpo, this run uses dapo"),
    (["--model", "{other}"], "pass the same --model"),
])
def test_resume_refuses_another_algorithm_or_model(finished_run, tmp_path, capsys, flags, message):
    ckpt, args = _copy_run(finished_run, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")  # not loadable: the check must come first
    flags = [f.format(other=other) for f in flags]
    capsys.readouterr()
    assert main([*args, *flags, "--iterations", "2", "--resume", "latest"]) == 2
    assert message in capsys.readouterr().err


def test_resuming_a_finished_cli_run_exits_cleanly_before_the_model_loads(finished_run, tmp_path, capsys,
                                                                          monkeypatch):
    import transformers

    _, args = _copy_run(finished_run, tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("the model loaded for a run with nothing to train"))
        assert main([*args, "--resume", "latest"]) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert main(args) == 2  # the same command without --resume
    assert "--resume latest" in capsys.readouterr().err


def test_a_killed_run_resumes_with_every_finished_iteration_once(finished_run, tmp_path):
    root, args = finished_run
    run = tmp_path / "run"
    args = [a if a != str(root / "run") else str(run) for a in args]
    args[args.index("--iterations") + 1] = "60"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", *args, "--save-steps", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            metrics = run / "metrics.jsonl"
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be killed"
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        process.kill()
    finished = iterations(run)
    assert finished == list(range(1, len(finished) + 1))  # every finished iteration, in order
    total = str(len(finished) + 2)
    args[args.index("--iterations") + 1] = total
    assert main([*args, "--resume", "latest"]) == 0
    assert iterations(run) == list(range(1, int(total) + 1))  # each exactly once


def test_resume_needs_only_the_run_folder(finished_run, tmp_path, capsys):
    _, _ = _copy_run(finished_run, tmp_path)
    run = tmp_path / "run"
    before = json.loads((run / "config.json").read_text())
    assert main(["train", "--output-dir", str(run), "--resume", "latest", "--iterations", "2"]) == 0
    assert iterations(run) == [1, 2]
    after = json.loads((run / "config.json").read_text())
    # the same run, extended; no history: nothing changed (the copy's folder is another)
    assert after == {**before, "num_iterations": 2, "resume_from_checkpoint": "latest", "output_dir": str(run)}


def test_resume_refuses_a_changed_setting_before_the_model_loads(finished_run, tmp_path, capsys, monkeypatch):
    _, args = _copy_run(finished_run, tmp_path)
    run = tmp_path / "run"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    monkeypatch.setattr("trainers.base.prepare_model", lambda *a, **k: pytest.fail("the model loaded"))
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume", "latest", "--iterations", "2",
                 "--learning-rate", "1e-4", "--filter", "top_p"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--learning-rate 1e-06 -> 0.0001" in err[0] and "--filter 'none' -> 'top_p'" in err[0]
    assert "--allow-changes" in err[0]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing rewritten


def test_an_allowed_change_is_kept_in_the_runs_history(finished_run, tmp_path):
    _, _ = _copy_run(finished_run, tmp_path)
    run = tmp_path / "run"
    assert main(["train", "--output-dir", str(run), "--resume", "latest", "--iterations", "2",
                 "--learning-rate", "1e-4", "--allow-changes"]) == 0
    record = json.loads((run / "config.json").read_text())
    assert record["learning_rate"] == 1e-4
    assert record["history"] == [{"iterations": [1, 1], "settings": {"learning_rate": 1e-6}}]
    # the next resume keeps the history and, without --allow-changes, the new setting
    assert main(["train", "--output-dir", str(run), "--resume", "latest", "--iterations", "3",
                 "--temperature", "0.5"]) == 2
    assert main(["train", "--output-dir", str(run), "--resume", "latest", "--iterations", "3"]) == 0
    record = json.loads((run / "config.json").read_text())
    assert record["learning_rate"] == 1e-4 and record["allow_config_changes"] is False
    assert record["history"] == [{"iterations": [1, 1], "settings": {"learning_rate": 1e-6}}]
    assert iterations(run) == [1, 2, 3]


def test_the_trainer_refuses_a_changed_setting_on_resume(tokenizer, tmp_path):
    cfg = config(tmp_path, num_iterations=1)
    trainer(tokenizer, cfg).train()
    changed = replace(cfg, resume_from_checkpoint="latest", num_iterations=2, entropy_coef=0.05,
                      rollout=replace(cfg.rollout, seed=7))
    with pytest.raises(ValueError, match=r"--seed 0 -> 7; --entropy-coef 0.001 -> 0.05\)"):
        trainer(tokenizer, changed)
    assert len(trainer(tokenizer, replace(changed, allow_config_changes=True)).train()) == 1


def test_a_checkpoint_that_cannot_be_written_is_kept_elsewhere(tokenizer, tmp_path, monkeypatch):
    import re
    import shutil

    from trainers import checkpoint

    real = checkpoint.save

    def disk_full_in_the_run(folder, *args, **kwargs):
        if folder == tmp_path / "run":
            raise OSError(28, "No space left on device")
        return real(folder, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", disk_full_in_the_run)
    t = trainer(tokenizer, config(tmp_path, num_iterations=1))
    with pytest.raises(ValueError, match=r"cannot write checkpoint-1 to .*No space left on device\); kept in") as e:
        t.train()
    kept = Path(re.search(r"kept in (\S+) instead", str(e.value)).group(1))
    assert (kept / "checkpoint-1" / "model.safetensors").is_file() and iterations(tmp_path / "run") == [1]
    shutil.rmtree(kept)


def test_what_a_resume_may_change_and_a_study_may_ignore_is_declared_on_the_fields():
    from trainers.config import TrainerConfig

    # KL loss and penalty on, a critic: every conditional one learns
    run = TrainerConfig(algorithm="ppo", beta=0.01, use_kl_in_reward=True, kl_ctrl_coef=0.001).to_dict()
    assert TrainerConfig.resume_free(run) == {  # the list run_folder.py kept by hand before
        "num_iterations", "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "allow_config_changes",
        "logging_steps", "plot", "save_strategy", "save_steps", "save_total_limit", "save_rollouts_steps",
        "eval_steps", "eval_episodes", "eval_seed", "eval_temperature", "gradient_analysis_every",
        "gradient_analysis_num_buckets", "gradient_analysis_bucket_mode", "gradient_analysis_env_groups",
        "gradient_analysis_group_size", "gradient_analysis_filter", "exit_after_gradient_analysis", "report_to",
        "gradient_checkpointing", "fsdp_cpu_offload"}
    assert TrainerConfig.run_place(run) == {  # and the one findings.py kept
        "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "allow_config_changes", "report_to", "plot",
        "logging_steps", "save_strategy", "save_steps", "save_total_limit", "save_rollouts_steps"}
    grpo = TrainerConfig(algorithm="grpo").to_dict()  # beta 0, no critic: their settings do nothing
    kl_reward = {"kl_penalty", "kl_ctrl_type", "kl_ctrl_target", "kl_ctrl_horizon"}  # the penalty is off
    assert TrainerConfig.inert(grpo) == {"kl_loss_type", "critic_learning_rate"} | kl_reward
    assert {"kl_loss_type", "critic_learning_rate"} <= TrainerConfig.resume_free(grpo)


def test_an_adaptive_in_reward_kl_coefficient_resumes_where_it_moved_to(tokenizer, tmp_path):
    cfg = config(tmp_path, num_iterations=2, save_steps=1, use_kl_in_reward=True, kl_ctrl_coef=0.5,
                 kl_ctrl_type="adaptive", kl_ctrl_horizon=10)
    first = trainer(tokenizer, cfg)
    first.train()
    run = tmp_path / "run"
    coefs = [json.loads(line)["kl/reward_coef"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    saved = json.loads((run / "checkpoint-1" / "trainer_state.json").read_text())["kl_coef"]
    assert coefs[0] == 0.5 and saved == coefs[1] != 0.5  # moved after iteration 1, taken so by iteration 2
    resumed = trainer(tokenizer, replace(cfg, resume_from_checkpoint=str(run / "checkpoint-1")))
    assert resumed.rl.kl_coef == saved
