"""The ``ragen`` command.

    ragen eval --env Ragen/Sokoban-v0 --backend transformers --groups 8 --group-size 4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from ragen_envs.agent.backends import BACKENDS


def env_mix(values: list[str], groups: int) -> dict[str, int]:
    """``--env ID`` or ``--env ID:GROUPS`` (repeatable) -> {id: groups}; ``groups`` where no count is given."""
    mix = {}
    for value in values:
        env_id, _, count = value.partition(":")
        mix[env_id] = int(count) if count else groups
    return mix


# Table columns: (header, key of ragen_envs.agent.trajectory.summarize)
COLUMNS = [("episodes", "episodes"), ("success", "success"), ("return", "return_mean"),
           ("format_valid", "format_valid"), ("turns", "turns"), ("response_tokens", "response_length")]


def summarize(trajectories) -> dict[str, dict[str, float]]:
    """Per env: the rollout summary (success rate, mean return, format validity, turns, tokens)."""
    from ragen_envs.agent.trajectory import summarize as summary

    by_env = defaultdict(list)
    for t in trajectories:
        by_env[t.env_id].append(t)
    return {env_id: summary(trajs) for env_id, trajs in by_env.items()}


def print_table(table: dict[str, dict[str, float]]) -> None:
    print(f"{'env':24s}" + "".join(f"{header:>16s}" for header, _ in COLUMNS))
    for env_id, row in table.items():
        print(f"{env_id:24s}" + "".join(f"{row[key]:16d}" if key == "episodes" else f"{row[key]:16.3f}"
                                        for _, key in COLUMNS))


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=BACKENDS, default="transformers")
    parser.add_argument("--model", default=None,
                        help="path or id (default: the embedded SmolLM2-135M-Instruct); served name for openai")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai backend: server URL")
    parser.add_argument("--tokenizer", default=None, help="openai backend: tokenizer path or id")
    parser.add_argument("--device", default=None, help="transformers backend: cpu, cuda, ...")


def make_policy_from_args(args):
    from ragen_envs.agent.backends import make_policy

    if args.backend == "openai":
        return make_policy("openai", args.model, base_url=args.base_url, tokenizer=args.tokenizer)
    if args.backend == "transformers":
        return make_policy("transformers", args.model, device=args.device)
    return make_policy("vllm", args.model)


def add_rollout_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", action="append", required=True,
                        help="env id, or ID:GROUPS for a mix; repeat for several envs")
    parser.add_argument("--env-kwargs", type=json.loads, default={},
                        help='JSON: {"Ragen/FrozenLake-v0": {"slip": 0.2}}')
    parser.add_argument("--groups", type=int, default=8, help="P: prompt groups (per env without counts)")
    parser.add_argument("--group-size", type=int, default=4, help="G: samples per group")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--max-actions-per-turn", type=int, default=2)
    parser.add_argument("--no-think", action="store_true", help="ask for <answer> only")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)


def rollout_config_from_args(args):
    from ragen_envs.agent import RolloutConfig, SamplingConfig

    return RolloutConfig(
        n_groups=args.groups, group_size=args.group_size, max_turns=args.max_turns,
        max_actions_per_turn=args.max_actions_per_turn, enable_think=not args.no_think,
        sampling=SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                                max_new_tokens=args.max_new_tokens, seed=args.seed),
        seed=args.seed, env_kwargs=args.env_kwargs,
    )


def cmd_eval(args) -> int:
    from ragen_envs.agent import RolloutRunner, save_jsonl

    config = rollout_config_from_args(args)
    policy = make_policy_from_args(args)
    runner = RolloutRunner(env_mix(args.env, args.groups), policy, config)
    bar = _progress(config.max_turns, "turns")
    trajectories = runner.collect(progress=lambda turn, active: bar(turn, active))
    bar(config.max_turns, 0)
    print_table(summarize(trajectories))
    if args.save:
        save_jsonl(trajectories, args.save)
        print(f"trajectories saved to {args.save}")
    if args.show:
        t = trajectories[0]
        for m in t.messages:
            print(f"--- {m['role']}\n{m['content']}")
    return 0


def cmd_train(args) -> int:
    from trainers import Trainer, TrainerConfig
    from trainers.metrics import plot_run

    config = TrainerConfig(
        algorithm=args.algorithm, num_iterations=args.iterations, output_dir=args.output_dir, seed=args.seed,
        num_prompts=args.groups, num_generations=args.group_size, max_turns=args.max_turns,
        max_actions_per_turn=args.max_actions_per_turn, max_completion_length=args.max_new_tokens,
        temperature=args.temperature, top_p=args.top_p, enable_think=not args.no_think,
        env_kwargs=args.env_kwargs, learning_rate=args.learning_rate, beta=args.beta,
        entropy_coef=args.entropy_coef, filter=args.filter, filter_value=args.filter_value,
        filter_metric=args.filter_metric, include_zero=not args.exclude_zero, mi_every=args.mi_every,
        save_steps=args.save_steps, resume_from_checkpoint=args.resume, mixed_precision=args.mixed_precision,
        ppo_epochs=args.ppo_epochs, micro_batch_size=args.micro_batch_size,
    )
    trainer = Trainer(args.model, env_mix(args.env, args.groups), config)
    trainer.train()
    if trainer.rank == 0:  # under torchrun, one process reports
        print(f"metrics: {config.output_dir}/metrics.jsonl, plot: {plot_run(config.output_dir)}")
    return 0


def cmd_plot(args) -> int:
    from trainers.metrics import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0


def _progress(total: int, unit: str):
    """A progress callback (tqdm when installed)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return lambda done, active: print(f"{unit} {done}/{total}, {active} active", file=sys.stderr)
    bar = tqdm(total=total, unit=unit, file=sys.stderr)

    def update(done: int, active: int) -> None:
        bar.n = done
        bar.set_postfix(active=active)
        bar.refresh()
        if done >= total:
            bar.close()
    return update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ragen", description="ragen-envs: LLM agents in multi-turn RL")
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("eval", help="run grouped rollouts and print per-env metrics")
    add_rollout_args(ev)
    add_model_args(ev)
    ev.add_argument("--save", default=None, help="write trajectories to this JSONL file")
    ev.add_argument("--show", action="store_true", help="print the first trajectory's conversation")
    ev.set_defaults(func=cmd_eval)

    tr = sub.add_parser("train", help="train a policy with PPO, GRPO, DAPO or Dr. GRPO")
    add_rollout_args(tr)
    tr.add_argument("--model", default=None, help="path or id (default: the embedded SmolLM2-135M-Instruct)")
    tr.add_argument("--algorithm", choices=["ppo", "grpo", "dapo", "drgrpo"], default="grpo")
    tr.add_argument("--iterations", type=int, default=10)
    tr.add_argument("--output-dir", default="runs/ragen")
    tr.add_argument("--learning-rate", type=float, default=1e-6)
    tr.add_argument("--beta", type=float, default=None, help="KL coefficient (default: per algorithm)")
    tr.add_argument("--entropy-coef", type=float, default=0.0)
    tr.add_argument("--filter", choices=["none", "top_p", "top_k"], default="none")
    tr.add_argument("--filter-value", type=float, default=0.9)
    tr.add_argument("--filter-metric", choices=["variance", "std"], default="variance")
    tr.add_argument("--exclude-zero", action="store_true", help="drop zero-variance groups before ranking")
    tr.add_argument("--mi-every", type=int, default=1)
    tr.add_argument("--save-steps", type=int, default=0)
    tr.add_argument("--resume", default=None, help='a checkpoint folder, or "latest"')
    tr.add_argument("--mixed-precision", choices=["auto", "bf16", "no"], default="auto")
    tr.add_argument("--ppo-epochs", type=int, default=1)
    tr.add_argument("--micro-batch-size", type=int, default=2)
    tr.set_defaults(func=cmd_train)

    pl = sub.add_parser("plot", help="draw a run's metrics to a PNG")
    pl.add_argument("run_dir")
    pl.add_argument("--out", default=None, help="default: RUN_DIR/metrics.png")
    pl.set_defaults(func=cmd_plot)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
