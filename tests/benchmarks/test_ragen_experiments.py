"""RAGEN's experiment scripts here: each cell's settings are its script's overrides, at RAGEN's scale and the
organism's, and an experiment runs end to end, resumes, and probes its checkpoint."""

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies"))

import findings  # noqa: E402
import ragen_experiments as rx  # noqa: E402
from ragen_envs.diagnose.filtering import select  # noqa: E402
from ragen_envs.registry import ENVIRONMENTS, env_for_task  # noqa: E402
from trainers import TrainerConfig  # noqa: E402

from tests.trainers.test_trainer import SeededReplies  # noqa: E402


def configs(argv):
    """Cell name -> its TrainerConfig, for ``ragen_experiments.py argv``."""
    args = rx.parse_args(argv)
    return {f"{task}/{name}": findings.preset_config(args, env_for_task(task), s, seed, fields)
            for task, cells in rx.cells(args).items() for name, _, s, seed, fields in cells}


def picked(config, *names):
    return tuple(getattr(config, n) for n in names)


FILTER = ("filter", "filter_value", "include_zero", "filter_prob_mode", "filter_order", "filter_metric")


def test_the_main_table_is_ragens_runs_of_each_task_algorithm_and_filter():
    # run_main_table_diff_algo.sh: common_overrides (KL off, entropy 0.001, top-p softmax, include_zero True),
    # filter 0.9 / nofilter 1.0, and each algorithm's overrides (get_algo_overrides)
    made = configs(["main-table", "--model", "m"])
    tasks = ("sokoban", "frozenlake", "webshop", "metamathqa", "countdown")
    assert len(made) == 5 * 4 * 2 and {k.split("/")[0] for k in made} == set(tasks)
    for name, c in made.items():
        algo, mode = name.split("/")[1].split("-")[:2]
        assert c.algorithm == {"PPO": "ppo", "DAPO": "dapo", "GRPO": "grpo", "DrGRPO": "drgrpo"}[algo]
        assert picked(c, *FILTER) == ("top_p", 0.9 if mode == "filter" else 1.0, True, "softmax", "largest", "std")
        assert (c.beta, c.entropy_coef, c.filter_loss_scaling) == (0.0, 0.001, "none")
    ppo, drgrpo = made["sokoban/PPO-filter-seed0"], made["sokoban/DrGRPO-filter-seed0"]
    assert (ppo.advantage, ppo.loss_type) == ("gae", "dapo")  # gae, token-mean
    assert (drgrpo.advantage, drgrpo.loss_type, drgrpo.scale_rewards) == ("group", "seq_sum", "none")
    assert made["frozenlake/PPO-filter-seed0"].rollout.env_kwargs.get("slip", 0.0) == 0.0  # success_rate 1


def test_the_intervention_sweeps_change_one_axis_each_as_ragens_scripts_do():
    top_p = configs(["top-p-sweep", "--model", "m"])
    values = ("1.0", "0.98", "0.95", "0.9", "0.8", "0.6", "0.4", "nofilter")
    assert [k.split("/")[1] for k in top_p] == [f"top_p{v}-seed0" for v in values]
    for c in top_p.values():
        assert (c.algorithm, c.beta, c.kl_loss_type, c.entropy_coef, c.filter_prob_mode) == (
            "ppo", 0.001, "kl", 0.001, "softmax")
    # two conditions at 1.0: without zero-variance groups, and nofilter with them
    assert picked(top_p["sokoban/top_p1.0-seed0"], "filter_value", "include_zero") == (1.0, False)
    assert picked(top_p["sokoban/top_p0.6-seed0"], "filter_value", "include_zero") == (0.6, False)
    assert picked(top_p["sokoban/top_pnofilter-seed0"], "filter_value", "include_zero") == (1.0, True)
    kl = configs(["kl-sweep", "--model", "m", "--no-include-zero"])
    assert [c.beta for c in kl.values()] == [0, 0.001, 0.003, 0.01, 0.03, 0.1]
    assert {picked(c, "entropy_coef", "filter_value", "include_zero", "kl_loss_type") for c in kl.values()} == {
        (0.0, 1.0, False, "kl")}
    k1, k3 = (configs(["kl-sweep", "--model", "m", "--values", "0,0.1", "--kl-loss-type", kind]).values()
              for kind in ("kl", "low_var_kl"))
    assert [picked(c, "beta", "kl_loss_type") for c in k3] == [(0.0, "low_var_kl"), (0.1, "low_var_kl")]
    # with the KL off the estimator is never used: the k1 sweep's 0 serves the k3 sweep (--reuse)
    assert [findings.trains_alike(a.to_dict(), b) for a, b in zip(k1, k3)] == [True, False]
    entropy = configs(["entropy-sweep", "--model", "m", "--values", "0,0.01"])
    assert [picked(c, "entropy_coef", "beta", "filter_value", "include_zero") for c in entropy.values()] == [
        (0.0, 0.0, 1.0, True), (0.01, 0.0, 1.0, True)]
    assert {env_for_task(k.split("/")[0]) for k in {**top_p, **kl, **entropy}} == {env_for_task("sokoban")}


def test_top_p_one_without_zero_variance_groups_is_not_nofilter():
    """What the top-p sweep's two 1.0 conditions do to a batch with flat groups, through the filter itself."""
    stds = np.array([0.0, 0.5, 0.0, 0.2])
    one, nofilter = configs(["top-p-sweep", "--model", "m", "--values", "1.0,nofilter"]).values()
    kept = [sorted(select(stds, c.filter, c.filter_value, c.filter_prob_mode, c.filter_order, c.include_zero))
            for c in (one, nofilter)]
    assert kept == [[1, 3], [0, 1, 2, 3]]


def test_the_slip_sweep_and_the_gradient_analysis_are_ragens():
    slip = configs(["slip-sweep", "--model", "m"])
    assert len(slip) == 7 * 2
    assert [c.rollout.env_kwargs["slip"] for c in slip.values()][::2] == [1, 0.5, 0.2, 0.1, 0.05, 0.02, 0]
    on, off = slip["frozenlake/slip0.5-filter-seed0"], slip["frozenlake/slip0.5-nofilter-seed0"]
    assert picked(on, "filter_value", "include_zero", "filter_prob_mode") == (0.9, False, "softmax")
    assert picked(off, "filter_value", "include_zero") == (1.0, True)
    assert (on.algorithm, on.beta, on.entropy_coef) == ("ppo", 0.0, 0.0)
    (grad,) = configs(["gradient-analysis", "--model", "m"]).values()
    assert picked(grad, *FILTER) == ("top_p", 0.9, False, "linear", "largest", "std")
    assert (grad.algorithm, grad.beta, grad.entropy_coef, grad.num_iterations) == ("ppo", 0.0, 0.001, 101)
    assert picked(grad, "gradient_analysis_every", "gradient_analysis_env_groups", "gradient_analysis_group_size",
                  "save_steps", "save_total_limit") == (50, 128, 16, 50, None)
    assert rx.PROBE == {"beta": 0.001, "kl_loss_type": "low_var_kl", "entropy_coef": 0.001}  # the probe's KL on
    assert grad.gradient_analysis_filter  # RAGEN's probe buckets the groups the filter kept; ours can take them all
    (whole,) = configs(["gradient-analysis", "--model", "m", "--probe-every", "20", "--probe-whole"]).values()
    assert picked(whole, "gradient_analysis_every", "save_steps", "gradient_analysis_filter") == (20, 20, False)


def test_the_ablation_arms_change_only_which_groups_the_filter_keeps():
    arms = {name.split("/")[1].rsplit("-seed", 1)[0]: c for name, c in configs(["ablation", "--model", "m"]).items()}
    assert list(arms) == ["filter-none", "filter-largest", "filter-smallest", "filter-mean", "filter-entropy",
                          "filter-entropy_top_k", "filter-random_k"]
    assert picked(arms["filter-none"], "filter_value", "include_zero") == (1.0, True)
    assert picked(arms["filter-largest"], *FILTER) == ("top_p", 0.9, True, "softmax", "largest", "std")
    assert picked(arms["filter-smallest"], "filter_order", "filter_metric") == ("smallest", "std")
    assert arms["filter-mean"].filter_metric == "mean" and arms["filter-entropy"].filter_metric == "entropy"
    assert picked(arms["filter-entropy_top_k"], "filter", "filter_value", "filter_metric") == (
        "top_k", 0.375, "entropy")
    # the control of "largest": its rule, then as many groups at random
    assert picked(arms["filter-random_k"], *FILTER) == picked(arms["filter-largest"], *FILTER)
    assert (arms["filter-random_k"].filter_control, arms["filter-largest"].filter_control) == ("random", "none")
    shared = ("algorithm", "beta", "entropy_coef", "num_iterations", "learning_rate", "rollout")
    assert len({picked(c, *shared).__repr__() for c in arms.values()}) == 1
    with pytest.raises(SystemExit, match="not one of"):
        configs(["ablation", "--model", "m", "--values", "largest,randomk"])


def test_filtering_final_is_ragens_fifteen_filters_with_the_kl_off():
    made = configs(["filtering-final", "--model", "m"])
    runs = {name.split("/")[1].rsplit("-seed", 1)[0]: c for name, c in made.items()}
    assert len(runs) == 15  # scripts/runs/run_filtering_final.sh's EXPS, by its run names
    assert picked(runs["rv_tp0.95"], *FILTER) == ("top_p", 0.95, False, "linear", "largest", "std")
    assert picked(runs["rv_mp0.2"], "filter", "filter_value") == ("min_p", 0.2)
    assert picked(runs["rv_tk0.25_rev"], "filter", "filter_value", "filter_order") == ("top_k", 0.25, "smallest")
    assert runs["entv_tp0.9"].filter_metric == "entropy_std" and runs["len_tp0.9_rev"].filter_order == "smallest"
    # its kl_ctrl.kl_coef and kl_loss_coef of 0.001 act on nothing: neither switch is on
    for c in runs.values():
        assert (c.algorithm, c.beta, c.use_kl_in_reward, c.entropy_coef, c.include_zero, c.num_iterations) == (
            "ppo", 0.0, False, 0.001, False, 400)
        assert (c.rollout.n_groups, c.rollout.group_size, c.mini_batch_size) == (8, 16, 32)


def labelled(argv):
    """Cell name -> (its labels, its TrainerConfig), for ``ragen_experiments.py argv``."""
    args = rx.parse_args(argv)
    return {f"{task}/{name}": (labels, findings.preset_config(args, env_for_task(task), s, seed, fields))
            for task, cells in rx.cells(args).items() for name, labels, s, seed, fields in cells}


MAIN_PPO = ("algorithm", "advantage", "loss_type", "beta", "entropy_coef", "filter_loss_scaling", "num_iterations")


def test_diff_model_and_diff_size_are_the_main_tables_ppo_cells_for_each_named_model():
    # run_main_table_diff_model.sh: PPO only (gae, token-mean), STEPS=400, TASKS without webshop, the main
    # table's common_overrides (KL off, entropy 0.001, top-p softmax, largest reward_variance, include_zero True),
    # filter 0.9 / nofilter 1.0, FrozenLake's success_rate 1.0
    made = labelled(["diff-model", "--models", "Qwen2.5-3B-Instruct,Llama-3.2-3B-Instruct"])
    assert len(made) == 4 * 2 * 2
    assert {k.split("/")[0] for k in made} == {"sokoban", "frozenlake", "metamathqa", "countdown"}
    assert {labels["model"] for labels, _ in made.values()} == {
        "Qwen/Qwen2.5-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"}
    for name, (labels, c) in made.items():
        mode = labels["filter"]
        assert name.split("/")[1] == f"PPO-{mode}-{findings.model_slug(labels['model'])}-seed0"
        assert picked(c, *FILTER) == ("top_p", 0.9 if mode == "filter" else 1.0, True, "softmax", "largest", "std")
        assert picked(c, *MAIN_PPO) == ("ppo", "gae", "dapo", 0.0, 0.001, "none", 400)
        assert (c.eval_steps, c.eval_episodes) == (10, 512)  # val_before_train, base.yaml's test_freq and val
    assert made["frozenlake/PPO-filter-Qwen__Qwen2.5-3B-Instruct-seed0"][1].rollout.env_kwargs.get("slip", 0) == 0
    # run_main_table_diff_size.sh: the same runs, webshop among its tasks, each name Qwen/<name>
    sizes = labelled(["diff-size", "--models", "Qwen2.5-0.5B,Qwen2.5-7B"])
    assert len(sizes) == 5 * 2 * 2 and "webshop/PPO-nofilter-Qwen__Qwen2.5-0.5B-seed0" in sizes
    assert [labels["model"] for labels, _ in sizes.values()][:4] == ["Qwen/Qwen2.5-0.5B"] * 2 + ["Qwen/Qwen2.5-7B"] * 2
    # a model's cells are the main table's PPO cells of that --model: --reuse copies them
    main = configs(["main-table", "--model", "Qwen/Qwen2.5-7B", "--algos", "PPO"])
    for task in ("sokoban", "webshop"):
        for mode in ("filter", "nofilter"):
            assert findings.trains_alike(main[f"{task}/PPO-{mode}-seed0"].to_dict(),
                                         sizes[f"{task}/PPO-{mode}-Qwen__Qwen2.5-7B-seed0"][1])


def test_a_model_comparison_asks_for_its_models_and_takes_ragens_names(tmp_path):
    # RAGEN's get_model_path: a name with "/" as it is, Llama-3.2-3B-Instruct meta-llama's, any other Qwen/<name>
    assert [rx.model_path(m) for m in ("Qwen2.5-7B-Instruct", "QwQ-32B", "Llama-3.2-3B-Instruct", "org/m")] == [
        "Qwen/Qwen2.5-7B-Instruct", "Qwen/QwQ-32B", "meta-llama/Llama-3.2-3B-Instruct", "org/m"]
    assert rx.model_path(str(tmp_path)) == str(tmp_path)
    with pytest.raises(SystemExit, match="Qwen2.5-0.5B,Qwen2.5-1.5B,Qwen2.5-3B,Qwen2.5-7B"):
        rx.parse_args(["diff-size"])  # RAGEN's defaults, named rather than downloaded unasked
    with pytest.raises(SystemExit, match="--models .*Qwen2.5-3B-Instruct"):
        rx.parse_args(["diff-model"])
    with pytest.raises(SystemExit, match="not both"):
        rx.parse_args(["diff-model", "--models", "a", "--model", "b"])
    with pytest.raises(SystemExit, match="takes no --models"):
        rx.parse_args(["main-table", "--models", "a"])
    one = labelled(["diff-model", "--model", "m", "--tasks", "sokoban"])  # one model in RAGEN's names' place
    assert [labels["model"] for labels, _ in one.values()] == ["m", "m"]
    organism = tmp_path / "organism"
    organism.mkdir()
    (organism / "warm_start.json").write_text(json.dumps({"model": 'organism:{"layers": 2}'}))
    assert rx.parse_args(["diff-model", "--models", str(organism)]).models == [str(organism)]
    with pytest.raises(SystemExit, match="mixes model organisms and real models"):
        rx.parse_args(["diff-model", "--models", f"{organism},Qwen2.5-0.5B"])
    # a study of organisms runs at the organism's scale, of real models at RAGEN's
    assert configs(["diff-model", "--models", str(organism), "--tasks", "sokoban"])[
        f"sokoban/PPO-filter-{findings.model_slug(str(organism))}-seed2"].num_iterations == 40


def test_the_search_benchmark_is_ragens_on_the_catalogues_searchqa():
    # run_search_benchmark.sh: STEPS=200, ALGORITHMS=(PPO), FILTER_STRATEGY top_p, FILTER_VALUE 1.0 (nofilter);
    # the filter's other settings base.yaml's (linear, include_zero True, largest, reward_variance); KL off,
    # entropy 0.001; config/_9_search.yaml: 16 groups x 8, 5 turns, validation on 256 episodes
    (only,) = labelled(["search-benchmark", "--model", "m"]).items()
    name, (labels, c) = only
    assert name == "search/PPO-nofilter-seed0" and labels == {"algo": "PPO", "filter": "nofilter", "seed": 0}
    assert ENVIRONMENTS[env_for_task("search")].package == "searchqa"  # the catalogue's SearchQA entry
    assert picked(c, *FILTER) == ("top_p", 1.0, True, "linear", "largest", "std")
    assert picked(c, *MAIN_PPO) == ("ppo", "gae", "dapo", 0.0, 0.001, "none", 200)
    assert (c.rollout.n_groups, c.rollout.group_size, c.mini_batch_size, c.rollout.chat.max_turns) == (16, 8, 32, 5)
    assert (c.eval_episodes, c.eval_steps) == (256, 10)
    swept = labelled(["search-benchmark", "--models", "Qwen2.5-7B-Instruct,Llama-3.2-3B-Instruct",
                      "--algos", "PPO,GRPO", "--values", "0.9,1.0"])
    assert len(swept) == 2 * 2 * 2
    grpo = swept["search/GRPO-top_p0.9-meta-llama__Llama-3.2-3B-Instruct-seed0"][1]
    # GRPO: grpo advantages normalised by the group's std, seq-mean-token-mean
    assert picked(grpo, "algorithm", "advantage", "loss_type", "scale_rewards", "filter_value") == (
        "grpo", "group", "grpo", "group", 0.9)
    (top_k,) = configs(["search-benchmark", "--model", "m", "--filter-strategy", "top_k", "--values", "0.25"])
    assert top_k == "search/PPO-top_k0.25-seed0"
    with pytest.raises(SystemExit, match="not one of RAGEN's script's PPO, GRPO"):
        configs(["search-benchmark", "--algos", "DrGRPO"])
    organism = configs(["search-benchmark"])  # its subject is the task: without a model, the organism
    assert len(organism) == 3 and organism["search/PPO-nofilter-seed0"].num_iterations == 200


def test_webshop_small_is_ragens_four_combos_with_filter_and_nofilter():
    # run_webshop_small_combos.sh: STEPS=100, 8 x 16, ppo_mini_batch_size=16, agent_proxy.max_turn=12, validation
    # on 128 episodes; filter top-p 0.9 without zero-variance groups, nofilter 1.0 with them, linear, largest
    # reward_variance; KL off, entropy 0.001; its combos (model, algorithm)
    made = labelled(["webshop-small", "--combos", "1,2,3,4"])
    assert len(made) == 4 * 2 and {k.split("/")[0] for k in made} == {"webshop"}
    assert list(dict.fromkeys((labels["model"], labels["algo"]) for labels, _ in made.values())) == [
        ("Qwen/Qwen2.5-3B-Instruct", "PPO"), ("Qwen/Qwen2.5-3B-Instruct", "GRPO"),
        ("Qwen/Qwen2.5-7B-Instruct", "PPO"), ("meta-llama/Llama-3.2-3B-Instruct", "PPO")]
    for labels, c in made.values():
        on = labels["filter"] == "filter"
        assert picked(c, *FILTER) == ("top_p", 0.9 if on else 1.0, not on, "linear", "largest", "std")
        assert c.algorithm == {"PPO": "ppo", "GRPO": "grpo"}[labels["algo"]]
        assert (c.beta, c.entropy_coef, c.filter_loss_scaling, c.num_iterations) == (0.0, 0.001, "none", 100)
        assert (c.rollout.n_groups, c.rollout.group_size, c.mini_batch_size) == (8, 16, 16)
        assert (c.rollout.chat.max_turns, c.eval_episodes) == (12, 128)
    assert list(configs(["webshop-small", "--combos", "2"])) == [
        "webshop/GRPO-filter-Qwen__Qwen2.5-3B-Instruct-seed0", "webshop/GRPO-nofilter-Qwen__Qwen2.5-3B-Instruct-seed0"]
    with pytest.raises(SystemExit, match="--combos .*1,2,3,4"):
        rx.parse_args(["webshop-small"])
    with pytest.raises(SystemExit):
        rx.parse_args(["webshop-small", "--combos", "5"])
    one = labelled(["webshop-small", "--model", "m", "--filters", "filter"])  # one model: each algorithm once
    assert [(labels["model"], labels["algo"]) for labels, _ in one.values()] == [("m", "PPO"), ("m", "GRPO")]
    (quick,) = configs(["webshop-small", "--model", "m", "--combos", "1", "--filters", "filter", "--quick"]).values()
    assert quick.mini_batch_size == 1  # an eighth of the batch, as 16 of 128


def test_webshop_release_is_grpo_with_ragens_four_filter_modes():
    # run_webshop_release_combos.sh: GRPO, STEPS=100, 16 x 8, ppo_mini_batch_size=32, agent_proxy.max_turn=9,
    # validation on 256 episodes; topk25, topp09, topp095, nofilter, each linear with include_zero True
    made = configs(["webshop-release", "--model", "m"])
    modes = {name.split("/")[1].rsplit("-seed", 1)[0]: c for name, c in made.items()}
    assert list(modes) == ["GRPO-topk25", "GRPO-topp09", "GRPO-topp095", "GRPO-nofilter"]
    assert [picked(c, "filter", "filter_value") for c in modes.values()] == [
        ("top_k", 0.25), ("top_p", 0.9), ("top_p", 0.95), ("top_p", 1.0)]
    for c in modes.values():
        assert picked(c, *FILTER)[2:] == (True, "linear", "largest", "std")
        assert (c.algorithm, c.beta, c.entropy_coef, c.num_iterations) == ("grpo", 0.0, 0.001, 100)
        assert (c.rollout.n_groups, c.rollout.group_size, c.mini_batch_size) == (16, 8, 32)
        assert (c.rollout.chat.max_turns, c.eval_episodes) == (9, 256)
    assert len(configs(["webshop-release"])) == 4 * 3  # RAGEN's one model: --model, else the organism
    with pytest.raises(SystemExit, match="topk25,topp09,topp095,nofilter"):
        rx.parse_args(["webshop-release", "--filters", "filter"])
    with pytest.raises(SystemExit, match="filter,nofilter"):
        rx.parse_args(["main-table", "--filters", "topk25"])


def test_the_collapse_designs_are_their_pre_registered_settings_with_one_filter_per_arm():
    b = {n.split("/")[1].rsplit("-seed", 1)[0]: c for n, c in configs(["collapse-frozenlake"]).items()
         if n.endswith("seed0")}
    assert list(b) == ["filter-none", "filter-top_p_linear", "filter-random_k"]
    none, top_p, control = b.values()
    assert (none.algorithm, none.entropy_coef, none.beta, none.mi_every, none.num_iterations) == (
        "drgrpo", 0.02, 0.0, 2, 200)
    assert (none.rollout.n_groups, none.rollout.group_size) == (16, 8)  # P = 16 x G = 8, not the preset's 8 x 16
    assert none.rollout.env_kwargs["solution_lengths"] == [1, 6] and none.rollout.env_kwargs["max_steps"] == 10
    assert picked(top_p, *FILTER) == ("top_p", 0.9, False, "linear", "largest", "std")  # the paper's rule
    assert picked(control, *FILTER) == picked(top_p, *FILTER) and control.filter_control == "random"
    assert picked(none, "filter_value", "include_zero") == (1.0, True)
    c = {n.split("/")[1].rsplit("-seed", 1)[0]: c for n, c in configs(["collapse-sokoban", "--seeds", "1"]).items()}
    assert list(c) == ["filter-none", "filter-top_p_linear", "filter-top_p_softmax", "filter-random_k"]
    ppo = c["filter-none"]
    assert (ppo.algorithm, ppo.beta, ppo.kl_loss_type, ppo.entropy_coef, ppo.num_iterations) == (
        "ppo", 0.01, "low_var_kl", 0.01, 150)
    assert ppo.critic_lr == 10 * ppo.learning_rate  # the fixed critic
    assert ppo.rollout.env_kwargs == {"max_steps": 10, "reward": "success", "solution_lengths": [1, 8]}
    assert picked(c["filter-top_p_softmax"], "filter_prob_mode", "include_zero") == ("softmax", True)
    assert picked(configs(["collapse-sokoban", "--quick"])["sokoban/filter-none-seed0"].rollout,
                  "n_groups", "group_size") == (2, 4)
    with pytest.raises(SystemExit, match="not one of"):
        configs(["collapse-sokoban", "--values", "largest"])


def test_design_a_is_the_slip_sweeps_cells_at_slip_0_8_run_longer_with_a_random_control():
    a = {n.split("/")[1]: c for n, c in configs(["collapse-slip"]).items()}
    assert sorted({n.rsplit("-seed", 1)[1] for n in a}) == ["0", "1", "2", "3"]  # 4 seeds by default
    none, top_p, control = (a[f"filter-{v}-seed0"] for v in ("none", "top_p_with_zero", "random_k_with_zero"))
    # the committed sweep cell's own record of what it ran
    swept = Path(findings.__file__).parents[1] / "results" / "frozenlake_slip_sweep" / "slip0.8-top_p-seed0"
    sweep = json.loads((swept / "result.json").read_text())["config"]
    assert (top_p.num_iterations, top_p.rollout.env_kwargs["slip"]) == (80, 0.8)
    for field in ("algorithm", "mi_every", "learning_rate", "entropy_coef", "beta", *FILTER):
        assert getattr(top_p, field) == sweep[field], field
    assert picked(control, *FILTER) == picked(top_p, *FILTER) and control.filter_control == "random"
    assert picked(none, "filter_value", "include_zero") == (1.0, True)


def test_the_collapse_summary_counts_seeds_censors_and_pairs_boards():
    rows = [{"filter": arm, "seed": seed, "collapse_iteration": at, "input_loss_iteration": lost,
             "last_iteration": 200, "val_wins": wins}
            for arm, seed, at, lost, wins in [("none", 0, 60, 50, "0010"), ("none", 1, None, 90, "0100"),
                                              ("top_p_linear", 0, None, None, "1110"),
                                              ("top_p_linear", 1, None, None, "0111")]]
    summary = rx.collapse_summary(rows)
    assert summary["none"]["collapse_iteration"] == {0: 60, 1: None} and summary["none"]["collapsed"] == 1
    assert summary["top_p_linear"]["collapsed"] == 0 and summary["top_p_linear"]["censored_at"] == 200
    mean, low, high = summary["top_p_linear"]["val_success_minus_none"]
    assert mean == pytest.approx(0.5) and low <= mean <= high
    assert summary["none"]["val_success_minus_none"] == (0.0, 0.0, 0.0)
    assert summary["none"]["lost_input"] == 2 and summary["top_p_linear"]["lost_input"] == 0
    assert "collapsed in 1 of 2 seeds (seed 0: 60, seed 1: -" in rx.collapse_text(summary)
    assert "lost its input dependence in 2 (seed 0: 50, seed 1: 90)" in rx.collapse_text(summary)


def test_the_stress_arms_keep_one_quartile_or_filter_inside_groups():
    arms = {name.split("/")[1].rsplit("-seed", 1)[0]: c for name, c in configs(["stress", "--model", "m"]).items()}
    assert list(arms) == ["filter-q1", "filter-q2", "filter-q3", "filter-q4", "filter-trajectory"]
    quartiles = [picked(arms[f"filter-q{q}"], "filter", "filter_value", "filter_skip", "include_zero")
                 for q in range(1, 5)]
    assert quartiles == [("top_k", 0.25, skip, True) for skip in (0.0, 0.25, 0.5, 0.75)]
    (largest,) = configs(["stress", "--model", "m", "--values", "largest"]).values()  # its prompt-level twin
    trajectory = arms["filter-trajectory"]
    assert (trajectory.filter_level, largest.filter_level) == ("trajectory", "prompt")
    assert picked(trajectory, *FILTER) == picked(largest, *FILTER)
    shared = ("algorithm", "beta", "entropy_coef", "num_iterations", "learning_rate", "rollout")
    assert len({picked(c, *shared).__repr__() for c in [*arms.values(), largest]}) == 1


def test_contrasts_pair_each_arm_with_the_reference_by_seed():
    success = {"largest": [0.4, 0.6], "q1": [0.5, 0.9], "q2": [0.3, 0.8], "q3": [0.2, 0.5], "q4": [0.1, 0.7]}
    rows = [{"filter": arm, "seed": seed, **dict.fromkeys(rx.CONTRASTED, 0.0), "val_success": v}
            for arm, values in success.items() for seed, v in enumerate(values)]
    result = rx.contrasts(rows[:-1], "filter", "largest")  # q4's seed 1 missing: paired over seed 0 only
    q1 = result["q1"]["val_success"]
    assert q1["mean"][0] == pytest.approx(0.7) and q1["minus_largest"][0] == pytest.approx(0.2)  # +0.1, +0.3
    assert q1["minus_largest"][1] < 0.2 < q1["minus_largest"][2] and q1["paired_seeds"] == 2
    assert result["q4"]["val_success"]["paired_seeds"] == 1
    trend = result["trend"]
    assert trend["arms"] == ["q1", "q2", "q3", "q4"]  # the prompt-level filter is off the quartiles' scale
    assert trend["val_success"]["rho"] == pytest.approx(-1.0)  # only seed 0 has all four, and it falls steadily
    assert "q4: val_success 0.100 (-0.300" in rx.contrasts_text(result, "largest")


def test_a_sweeps_trend_orders_its_values_as_numbers_and_leaves_nofilter_off_the_scale():
    mi = {"nofilter": [0.9, 0.9], "0.4": [0.2, 0.3], "1.0": [0.8, 0.7], "0.95": [0.6, 0.6], "0.9": [0.5, 0.4]}
    rows = [{"top_p": arm, "seed": seed, **dict.fromkeys(rx.CONTRASTED, 0.0), "retrieval_acc": v}
            for arm, values in mi.items() for seed, v in enumerate(values)]
    result = rx.contrasts(rows, "top_p", "nofilter")
    assert result["trend"]["arms"] == ["0.4", "0.9", "0.95", "1.0"]
    assert result["trend"]["retrieval_acc"]["rho"] == pytest.approx(1.0)  # rises with top-p in both seeds
    assert result["trend"]["retrieval_acc"]["form"] == "count"  # +1 in 2 of 2 seeds: no interval past 1
    assert result["0.4"]["retrieval_acc"]["minus_nofilter"][0] == pytest.approx(-0.65)
    assert "rank corr. with 0.4, 0.9, 0.95, 1.0: " in rx.contrasts_text(result, "nofilter")
    assert rx.rank("q3") == 3 and rx.rank("0.001") == 0.001 and rx.rank("largest") is None


def test_ragens_scale_with_a_model_and_the_organisms_without(tmp_path):
    ragen = configs(["kl-sweep", "--model", "m", "--values", "0"])["sokoban/kl0-seed0"]
    preset = TrainerConfig.from_preset("ragen2-main", env_for_task("sokoban"))
    assert (ragen.num_iterations, ragen.rollout.n_groups, ragen.rollout.group_size) == (400, 8, 16)
    assert (ragen.learning_rate, ragen.mini_batch_size, ragen.eval_steps, ragen.rollout.seed) == (1e-6, 32, 10, 10000)
    assert ragen.rollout.chat == preset.rollout.chat and ragen.rollout.sampling == preset.rollout.sampling
    assert ragen.rollout.env_kwargs == {"max_steps": 10}  # the env's preset arguments kept
    args = rx.parse_args(["kl-sweep", "--values", "0"])
    s = findings.preset_scale(args, env_for_task("sokoban"))
    assert (s.iterations, s.groups, s.group_size, s.seeds) == (40, 8, 16, 3)
    assert s.val_episodes == findings.ORGANISM_EPISODES
    organism = configs(["kl-sweep", "--values", "0"])
    assert len(organism) == 3 and organism["sokoban/kl0-seed2"].rollout.seed == 10002
    assert (organism["sokoban/kl0-seed0"].learning_rate, organism["sokoban/kl0-seed0"].eval_steps) == (1e-3, 0)
    # a model organism named by --model (`ragen sft --from-scratch`'s folder) runs at the organism's scale too
    folder = tmp_path / "organism"
    folder.mkdir()
    (folder / "warm_start.json").write_text(json.dumps({"model": 'organism:{"layers": 2}'}))
    assert configs(["kl-sweep", "--model", str(folder), "--values", "0"]).keys() == organism.keys()
    quick = configs(["kl-sweep", "--quick", "--model", "m", "--values", "0", "--learning-rate", "3e-6"])
    (q,) = quick.values()
    assert (q.num_iterations, q.rollout.n_groups, q.mini_batch_size, q.eval_steps) == (2, 2, 2, 0)
    assert q.learning_rate == 3e-6


def test_lists_are_checked_against_ragens_names():
    with pytest.raises(SystemExit):
        rx.parse_args(["main-table", "--algos", "PPO,A2C"])
    with pytest.raises(SystemExit):
        rx.parse_args(["main-table", "--tasks", "chess"])
    assert rx.parse_args(["main-table", "--tasks", "countdown"]).tasks == ["countdown"]


def test_the_gradient_analysis_trains_probes_its_checkpoint_plots_and_resumes(
        tmp_path, tiny_model, tokenizer, monkeypatch):
    import trainers

    class Varied(trainers.Trainer):  # the real trainer, rolling out replies whose rewards differ in a group
        def __init__(self, model, env, config, **kw):
            super().__init__(model, env, config, **{**kw, "rollout_policy": SeededReplies(tokenizer)})

    monkeypatch.setattr(trainers, "Trainer", Varied)
    model = tmp_path / "tiny"
    tiny_model.save_pretrained(model)
    tokenizer.save_pretrained(model)
    out = tmp_path / "out"
    argv = ["gradient-analysis", "--quick", "--model", str(model), "--out", str(out), "--max-turns", "1",
            "--max-new-tokens", "6", "--val-episodes", "2", "--groups", "2", "--group-size", "3"]
    rows = rx.main(argv)
    assert [r["algo"] for r in rows] == ["PPO"] and 0 <= rows[0]["val_success"] <= 1
    run = out / "sokoban" / "PPO-seed0" / "run"
    trained = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in trained if "grad_norm/all/sample_count" in r] == [1, 2]  # every 1 at --quick
    probes = [json.loads(line) for line in (run / "gradient_probe.jsonl").read_text().splitlines()]
    assert [p["iteration"] for p in probes] == [3] and "grad_norm/all/kl" in probes[0]  # KL on for the probe
    assert (out / "sokoban-PPO-seed0-gradients.png").stat().st_size > 0
    assert (out / "gradient-analysis.png").stat().st_size > 0 and (out / "results.csv").is_file()
    assert "sokoban/PPO-seed0" in json.loads((out / "settings.json").read_text())
    curves = (out / "curves.csv").read_text().splitlines()  # the run's proxies, at RAGEN's MI every 5: iteration 1
    assert curves[0].startswith("algo,seed,iteration,mi/retrieval_acc") and curves[1].startswith("PPO,0,1,")
    assert len(curves) == 2
    trends = json.loads((out / "sokoban-gradient-trends.json").read_text())
    assert list(trends) == ["1", "2", "3"] and "kl" in trends["3"] and "kl" not in trends["1"]
    kept = [json.loads(line) for line in (run.parent / rx.PROBES).read_text().splitlines()]  # to commit
    assert [p["iteration"] for p in kept] == [1, 2, 3] and kept[2] == probes[0]
    again = rx.main(argv)  # read back: nothing trained, the probe not repeated
    assert again[0]["wall_s"] == rows[0]["wall_s"]
    assert len((run / "gradient_probe.jsonl").read_text().splitlines()) == 1
    shutil.rmtree(run)  # a fresh clone: the trends come back from the committed rows alone
    (out / "sokoban-gradient-trends.json").unlink()
    rx.main(argv + ["--finished-only"])
    assert json.loads((out / "sokoban-gradient-trends.json").read_text()) == trends


def test_a_model_comparison_trains_each_model_from_its_own_start_and_resumes(
        tmp_path, tiny_model, tokenizer, monkeypatch):
    import trainers

    loaded = []

    class Varied(trainers.Trainer):  # the real trainer, rolling out replies whose rewards differ in a group
        def __init__(self, model, env, config, **kw):
            loaded.append(model)
            super().__init__(model, env, config, **{**kw, "rollout_policy": SeededReplies(tokenizer)})

    monkeypatch.setattr(trainers, "Trainer", Varied)
    models = []
    for name in ("tiny-a", "tiny-b"):  # two folders of one model: told apart by name only
        tiny_model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
        models.append(str(tmp_path / name))
    out = tmp_path / "out"
    argv = ["diff-model", "--quick", "--models", ",".join(models), "--tasks", "sokoban", "--filters", "filter",
            "--out", str(out), "--max-turns", "1", "--max-new-tokens", "6", "--val-episodes", "2", "--groups", "2",
            "--group-size", "3"]
    rows = rx.main(argv)
    assert loaded == models and [r["model"] for r in rows] == models
    folder = out / "sokoban"
    starts = [f"start-{findings.model_slug(m)}-max_steps10-seed0" for m in models]  # each model's own
    assert sorted(p.name for p in folder.glob("start-*")) == starts
    for m, start in zip(models, starts):
        cell = folder / f"PPO-filter-{findings.model_slug(m)}-seed0" / "result.json"
        assert json.loads(cell.read_text())["model"] == m
        assert json.loads((folder / start / "result.json").read_text())["model"] == m
    assert json.loads((out / "config.json").read_text())["models"] == models
    assert "model" in (out / "results.csv").read_text().splitlines()[0].split(",")
    again = rx.main(argv)  # read back: nothing trained
    assert len(loaded) == 2 and [r["wall_s"] for r in again] == [r["wall_s"] for r in rows]


def test_the_gradient_trends_rank_each_terms_norm_against_the_bucket_over_seeds(tmp_path):
    cells = []
    for seed, scale in enumerate((1.0, 2.0, 3.0)):
        cell = tmp_path / f"PPO-seed{seed}"
        cell.mkdir()
        row = {"iteration": 1, "grad_norm/all/sample_count": 96.0}
        for b in range(1, 5):  # the task norm rises with the bucket, the entropy norm falls, in every seed
            row.update({f"grad_norm/bucket_{b}/sample_count": 24.0, f"grad_norm/bucket_{b}/task": scale * b,
                        f"grad_norm/bucket_{b}/entropy": 1.0 / b, f"grad_norm/bucket_{b}/reward_std_mean": b / 2})
        (cell / rx.PROBES).write_text(json.dumps(row) + "\n")
        cells.append((f"PPO-seed{seed}",))
    trends = rx.gradient_trends(tmp_path, tmp_path, "sokoban", cells)["1"]
    assert trends["task"]["spearman"] == [1.0, 1.0, 1.0] and trends["task"]["bucket_means"] == [2.0, 4.0, 6.0, 8.0]
    assert trends["entropy"]["spearman_mean"] == -1.0 and "kl" not in trends
    assert trends["task"]["reading"] == "+1.00 in 3 of 3 seeds"  # rho 1: the count, not an interval
    assert (tmp_path / "sokoban-gradient-trends.png").stat().st_size > 0
    (tmp_path / "PPO-seed0" / rx.PROBES).write_text("")
    with pytest.raises(ValueError, match="no gradient probe"):
        rx.gradient_trends(tmp_path, tmp_path, "sokoban", cells[:1])


def test_a_stored_critic_rate_counts_as_it_acts():
    from trainers import TrainerConfig

    old = TrainerConfig(algorithm="grpo", learning_rate=1e-3, critic_learning_rate=1e-5).to_dict()  # before the fix
    assert findings.trains_alike(old, TrainerConfig(algorithm="grpo", learning_rate=1e-3))  # no critic: alike
    old_ppo = TrainerConfig(algorithm="ppo", learning_rate=1e-3, critic_learning_rate=1e-5).to_dict()
    assert not findings.trains_alike(old_ppo, TrainerConfig(algorithm="ppo", learning_rate=1e-3))  # 1e-5 vs 1e-2
    assert findings.trains_alike(TrainerConfig(algorithm="ppo").to_dict(),
                                 TrainerConfig(algorithm="ppo", critic_learning_rate=1e-5))  # 1e-5 either way


def committed_cells():
    """(result.json, its stored config, the TrainerConfig its study builds today) for every committed cell of a
    RAGEN experiment under benchmarks/results (its study's config.json holds the arguments it ran with)."""
    from argparse import Namespace

    for record in sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("*/config.json")):
        saved = json.loads(record.read_text())
        if saved.get("experiment") not in rx.EXPERIMENTS:
            continue
        args = Namespace(**{**vars(rx.parse_args([saved["experiment"], "--model", saved["model"]])),
                            **{k: v for k, v in saved.items() if k not in ("script", "scale", "commit")}})
        for task, cells in rx.cells(args).items():
            for name, _, s, seed, fields in cells:
                done = record.parent / task / name / "result.json"
                stored = json.loads(done.read_text()) if done.is_file() else {}
                if "config" in stored:
                    yield done, stored["config"], findings.preset_config(args, env_for_task(task), s, seed, fields)


def test_committed_cells_train_alike_with_the_configs_their_studies_build_today(monkeypatch):
    # their models were organisms (runs/..., not here): the organism's preset, as when they ran
    monkeypatch.setattr(findings, "real_model", lambda args: False)
    cells = list(committed_cells())
    assert len(cells) >= 90  # stored flat, before the filter, validation, probe, saving and LoRA were nested
    for done, stored, config in cells:
        assert findings.trains_alike(stored, replace(config, critic_learning_rate=stored["critic_learning_rate"])), done
        # most ran before the critic's rate followed the actor's: those reuse as they are only without a critic
        same_critic = config.advantage != "gae" or stored["critic_learning_rate"] == config.critic_learning_rate
        assert findings.trains_alike(stored, config) == same_critic, done
