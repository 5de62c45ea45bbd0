"""The ``ragen`` command. Its flags are derived from the config dataclasses (``cli_args``), so each
flag has the dataclass's default and the help declared on the field (``metadata["help"]``).

    ragen list
    ragen eval --env Ragen/Sokoban-v0 --groups 8 --group-size 4
    ragen train --env Ragen/FrozenLake-v0 --algorithm grpo --filter top_p --output-dir runs/fl
    ragen train --output-dir runs/fl --iterations 20 --resume latest               # extend it, as recorded
    ragen train --config runs/fl/config.json --output-dir runs/fl-again           # repeat it elsewhere
    ragen plot runs/fl
    ragen view runs/fl                                                            # episodes as HTML
    ragen diagnose runs/fl --model runs/fl/checkpoint-20                # template collapse: a verdict
    ragen serve --env Ragen/Sokoban-v0 --port 8000                   # envs over HTTP (RemoteEnv, OpenEnv)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

from ragen_envs import __version__
from ragen_envs.agent import vision
from ragen_envs.cli import args as cli_args
from ragen_envs.extras import install_hint, install_line, missing_module_hint
from ragen_envs.agent.backends import PolicyConfig
from ragen_envs.agent.rollout import RolloutConfig
from ragen_envs.agent.threads import set_threads
from ragen_envs.registry import (CLIENTS, ENVIRONMENTS, NOT_IN_CATALOGUE, env_table, missing_modules,
                                 system_problem)
from ragen_envs.training import trainers_shadowed

# The policy fields `ragen sft` and `ragen train` take (they train a transformers model; train may roll
# out with vLLM, loading the new weights into it after each update).
TRAIN_POLICY_FIELDS = {"model", "device", "threads"}
ROLLOUT_POLICY_FIELDS = TRAIN_POLICY_FIELDS | {"backend", "vllm"}


def parse_env_flags(values: list[str], groups: int) -> dict[str, int]:
    """``--env ID`` or ``--env ID:GROUPS`` (repeatable) -> {id: groups}; ``groups`` where no count is given.
    The clients of envs run elsewhere too: ``Ragen/Remote-v0`` (an env server's, with ``--env-kwargs
    '{"url": ..., "env_id": ...}'``) and ``Ragen/Ray-v0`` (a Ray actor pool's, ``'{"env_id": ...}'``)."""
    mix = {}
    for value in values:
        env_id, _, count = value.partition(":")
        if env_id not in ENVIRONMENTS and env_id not in CLIENTS:
            hint = cli_args.did_you_mean(env_id, [*ENVIRONMENTS, *CLIENTS])
            raise ValueError(f"unknown env {env_id!r}{hint if hint.startswith(';') else ''} (`ragen list` shows "
                             "the catalogue)")
        if count and not (count.isdigit() and int(count) >= 1):
            raise ValueError(f"--env {value!r}: the group count after ':' must be a positive integer")
        mix[env_id] = int(count) if count else groups
    return mix


# Table columns: (header, key of ragen_envs.agent.trajectory.rollout_metrics)
COLUMNS = [("episodes", "episodes"), ("success", "success"), ("random", "random_success"),
           ("return", "return_mean"), ("format_valid", "format_valid"), ("turns", "turns"),
           ("response_tokens", "response_length")]


def per_env_metrics(trajectories, chat, labels: dict[str, str] | None = None,
                    pass_k: list[int] | None = None) -> dict[str, dict[str, float]]:
    """Per env (named by ``labels`` where given): the rollout summary (success rate, mean return, format
    validity, turns, tokens, RAGEN's pass@k at the group size), the unbiased pass@k for each k of ``pass_k``,
    and the success of random valid actions on the same episodes (nan for open-text envs)."""
    from ragen_envs.agent.baseline import random_success
    from ragen_envs.agent.trajectory import pass_at, rollout_metrics

    chance = random_success(trajectories, chat)
    by_env = defaultdict(list)
    for t in trajectories:
        by_env[t.env_id].append(t)
    return {(labels or {}).get(env_id, env_id): {**rollout_metrics(trajs), **pass_at(trajs, pass_k or []),
                                                 "random_success": chance.get(env_id, float("nan"))}
            for env_id, trajs in by_env.items()}


def print_env_table(table: dict[str, dict[str, float]]) -> None:
    """One row per env, COLUMNS and then any pass@k; "-" where a value does not exist (random actions on an
    open-text env)."""
    width = max([28, *(len(name) + 1 for name in table)])
    passes = sorted({key for row in table.values() for key in row if key.startswith("pass@")},
                    key=lambda key: int(key[5:]))
    columns = COLUMNS + [(key, key) for key in passes]
    print(f"{'env':{width}s}" + "".join(f"{header:>16s}" for header, _ in columns))
    for env_id, row in table.items():
        cells = [f"{row[key]:16d}" if key == "episodes" else f"{'-':>16s}" if math.isnan(row.get(key, math.nan))
                 else f"{row[key]:16.3f}" for _, key in columns]
        print(f"{env_id:{width}s}" + "".join(cells))


def pass_k_list(text: str) -> list[int]:
    """``--pass-k``'s value: comma-separated positive integers."""
    ks = [part.strip() for part in text.split(",") if part.strip()]
    if not ks or not all(k.isdigit() and int(k) >= 1 for k in ks):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers such as 1,4,16, got {text!r}")
    return sorted({int(k) for k in ks})


def cmd_list(args) -> int:
    if args.markdown:
        print(env_table())
        return 0
    print(f"{'id':28s} {'extra':7s} {'offline data':20s} {'ready':24s} description")
    for e in ENVIRONMENTS.values():
        ready = install_line(e.extra) if missing_modules(e) else \
            f"install {e.system}" if system_problem(e) else "yes"
        print(f"{e.id:28s} {e.extra or '-':7s} {e.offline_data or 'no (network)':20s} {ready:24s} {e.description}")
    print("\nRAGEN's envs without an entry here, and what each needs:")
    for name, needs in NOT_IN_CATALOGUE.items():
        print(f"  {name}: {needs}")
    return 0


def cmd_eval(args) -> int:
    from ragen_envs.agent import progress, save_jsonl
    from ragen_envs.agent.async_rollout import make_runner
    from ragen_envs.agent.outputs import check_writable, save_or_keep
    from ragen_envs.agent.rollout import NO_MODEL, check_envs

    config = cli_args.build(RolloutConfig, args)
    policy = cli_args.build(PolicyConfig, args)
    if args.pass_k and args.pass_k[-1] > config.group_size:  # said before any model loads
        raise ValueError(f"--pass-k {args.pass_k[-1]} needs groups of at least {args.pass_k[-1]} samples; "
                         f"--group-size is {config.group_size}")
    # an OpenAI server's model is not here to check: its images go as chat messages
    seen_by = NO_MODEL if policy.backend == "openai" else policy.model
    mix = check_envs(parse_env_flags(args.env, config.n_groups), config, seen_by)
    if args.save:
        check_writable(Path(args.save).parent, "trajectories")
    set_threads(policy.threads)
    runner = make_runner(mix, policy.make(), config)
    bar = progress.bar(config.chat.max_turns, "turns")
    trajectories = runner.collect(progress=lambda turn, active: bar(turn, active=active))
    bar(config.chat.max_turns, active=0)
    print_env_table(per_env_metrics(trajectories, config.chat, runner.labels(), args.pass_k))
    if args.save:
        save_or_keep(partial(save_jsonl, trajectories), args.save, "the trajectories")
        print(f"trajectories saved to {args.save}")
    if args.show:
        for m in trajectories[0].messages:
            print(f"--- {m['role']}\n{vision.message_text(m['content'], images=True)}")
    return 0


def cmd_train(args) -> int:
    from trainers import Trainer, TrainerConfig
    from trainers.base import finished_iteration, nothing_to_train

    config = cli_args.build(TrainerConfig, args)
    mix = parse_env_flags(args.env, config.rollout.n_groups)
    if args.backend == "openai":
        raise ValueError("ragen train rolls out in process: --backend transformers (default) or vllm; an "
                         "OpenAI server cannot load the trained weights")
    policy = cli_args.build(PolicyConfig, args, include=ROLLOUT_POLICY_FIELDS)
    if policy.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError(f"--backend vllm needs vLLM: {install_hint('gpu')} (docs/gpu.md)")
    done = finished_iteration(config, policy.model)
    if done is not None:  # told before the model loads, as Trainer.train would after it
        print(nothing_to_train(config.output_dir, done, config.num_iterations))
        return 0
    set_threads(policy.threads)
    # A factory: the Trainer builds the vLLM engine only after its own checks have passed.
    rollout_policy = policy.make if policy.backend == "vllm" else None
    trainer = Trainer(policy.model, mix, config, device=policy.device, rollout_policy=rollout_policy)
    trainer.train()
    if trainer.rank == 0 and trainer.plot_path:  # under torchrun, one process reports
        print(f"run folder: {trainer.output_dir} (metrics.jsonl, checkpoints, plot {trainer.plot_path.name}); "
              f"`ragen view {trainer.output_dir}` shows the episodes")
    return 0


def cmd_sft(args) -> int:
    from trainers.config import SFTConfig
    from trainers.sft import warm_start

    config = cli_args.build(SFTConfig, args)
    envs = list(parse_env_flags(args.env, 1))
    policy = cli_args.build(PolicyConfig, args, include=TRAIN_POLICY_FIELDS)
    set_threads(policy.threads)
    device = str(policy.device or "cpu")
    if args.from_scratch:
        from trainers.config import OrganismArchitecture
        from trainers.organism import from_scratch

        if policy.model is not None:
            raise ValueError("--from-scratch builds its own model: leave out --model")
        record = from_scratch(envs, config, cli_args.build(OrganismArchitecture, args), device=device)
    else:
        record = warm_start(policy.model, envs, config, device=device)
    made = "the model organism (a small decoder built from scratch)" if args.from_scratch else "the warm-started model"
    if record.get("cached"):
        print(f"{made}: {config.output_dir} (ragen train --model {config.output_dir})")
        return 0
    print(f"{record['demonstrations']} demonstration turns ({record['oracle_share']:.0%} oracle), "
          f"{record['steps']} steps, loss {record['first_loss']:.3f} -> {record['last_loss']:.3f}; "
          f"{made}: {config.output_dir} (ragen train --model {config.output_dir})")
    return 0


def cmd_serve(args) -> int:
    from ragen_envs.remote.server import ServerConfig

    args.envs = list(args.env)  # --env, repeated: the config's envs
    config = cli_args.build(ServerConfig, args)
    from ragen_envs.remote.server.app import serve  # the 'server' extra, after the flags are checked

    serve(config)
    return 0


def cmd_plot(args) -> int:
    from trainers.metrics import plot_gradients, plot_run

    if args.gradients:
        print(plot_gradients(args.run_dir, args.iteration, args.out, args.scale))
    else:
        print(plot_run(args.run_dir, args.out))
    return 0


def cmd_view(args) -> int:
    from ragen_envs.cli.report import write_report

    print(write_report(args.source, args.out, args.iteration, images=not args.no_images, env_kwargs=args.env_kwargs,
                       trust_env_kwargs=args.trust_env_kwargs))
    return 0


def load_run_config(path: str) -> dict:
    """A saved run config (JSON, or YAML by extension): TrainerConfig's fields, plus "env" and "model"."""
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"{path} is not valid YAML: {error}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a run config is a mapping of config fields")
    data.pop("history", None)  # a run's record: which iterations ran under which settings
    return data


def _add_env(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", action="append", default=None,
                        help="env id, or ID:GROUPS for a mix; repeat for several envs (`ragen list`)")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    from trainers.config import PRESETS, OrganismArchitecture, SFTConfig, TrainerConfig

    # --debug is taken before or after the command; SUPPRESS keeps a subcommand from resetting it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")
    parser = cli_args.Parser(prog="ragen", description="ragen-envs: LLM agents in multi-turn RL", parents=[common])
    parser.add_argument("--version", action="version", version=f"ragen-envs {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       help="list, eval, train, sft, serve, plot, view or diagnose; COMMAND --help "
                                            "for more")
    commands = {}

    def sub(name, **kwargs):
        return subparsers.add_parser(name, parents=[common], short_help=True, **kwargs)

    ls = commands["list"] = sub("list", help="the environment catalogue")
    ls.add_argument("--markdown", action="store_true", help="print the env table of docs/envs.md, in Markdown")
    ls.set_defaults(func=cmd_list)

    ev = commands["eval"] = sub("eval", help="run grouped rollouts and print per-env metrics")
    ev.add_argument("--preset", default=None, choices=PRESETS,
                    help="named settings: ragen2-main (RAGEN's validation for the --env: its turns, reply "
                         "budget and env settings, 512 episodes from seed 123), cpu-quick; flags override it")
    _add_env(ev)
    cli_args.add_config(ev, PolicyConfig, "model")
    cli_args.add_config(ev, RolloutConfig, "rollout")
    ev.add_argument("--save", default=None, help="write trajectories to this JSONL file")
    ev.add_argument("--show", action="store_true", help="print the first trajectory's conversation")
    ev.add_argument("--pass-k", type=pass_k_list, default=None, metavar="K[,K...]",
                    help="also the unbiased pass@k for each k, from each group's samples (k at most the group size); "
                         "RAGEN's pass@k, k the group size, is shown whenever groups hold more than one")
    ev.set_defaults(func=cmd_eval)

    tr = commands["train"] = sub("train", help="train a policy with PPO, GRPO, DAPO or Dr. GRPO")
    tr.add_argument("--config", default=None,
                    help="a run config (JSON or YAML, e.g. a run's config.json); flags given here override it")
    tr.add_argument("--preset", default=None, choices=PRESETS,
                    help="named settings: ragen2-main (RAGEN's main-table run for the --env), cpu-quick (a few "
                         "minutes on a CPU); --config and flags override it")
    _add_env(tr)
    cli_args.add_config(tr, PolicyConfig, "model", include=ROLLOUT_POLICY_FIELDS)
    cli_args.add_config(tr, TrainerConfig, "run")
    tr.set_defaults(func=cmd_train)

    sf = commands["sft"] = sub("sft", help="warm start: fine-tune a model on the envs' oracle demonstrations")
    _add_env(sf)
    cli_args.add_config(sf, PolicyConfig, "model", include=TRAIN_POLICY_FIELDS)
    cli_args.add_config(sf, SFTConfig, "demonstrations and training")
    sf.add_argument("--from-scratch", action="store_true",
                    help="build a model organism (a small decoder and a tokenizer learnt on the envs' text, "
                         "sized by the flags below) and train it on the demonstrations, every layer; the "
                         "defaults above become the organism's (trainers.config.ORGANISM_SFT, with the env's own)")
    cli_args.add_config(sf, OrganismArchitecture, "the organism (--from-scratch)")
    sf.set_defaults(func=cmd_sft)

    sv = commands["serve"] = sub("serve", help="serve envs over HTTP to many clients (RemoteEnv, OpenEnv)")
    sv.add_argument("--env", action="append", default=None, help="an env id to serve; repeat for several")
    from ragen_envs.remote.server import ServerConfig

    allow = {"--allow-host": "allowed_hosts", "--allow-origin": "allowed_origins"}  # repeated, not one list
    cli_args.add_config(sv, ServerConfig, "server",
                        include={f.name for f in dataclasses.fields(ServerConfig)} - {"envs", *allow.values()})
    for flag, name in allow.items():
        cli_args._group(sv, "server").add_argument(  # unset (SUPPRESS): the config's default
            flag, dest=name, metavar=flag[8:].upper(), action="append", default=argparse.SUPPRESS,
            help=cli_args.field_help(ServerConfig)[name].replace("%", "%%") + "; repeat for several")
    sv.set_defaults(func=cmd_serve)

    pl = commands["plot"] = sub("plot", help="draw a run's metrics to a PNG")
    pl.add_argument("run_dir", help="a run folder (its metrics.jsonl)")
    pl.add_argument("--out", default=None, help="default: RUN_DIR/metrics.png (RUN_DIR/gradients.png)")
    pl.add_argument("--gradients", action="store_true",
                    help="the gradient probe's norms against reward-std bucket, a line per probed iteration")
    pl.add_argument("--iteration", type=int, action="append", default=None,
                    help="with --gradients: this probed iteration only; repeat for several")
    pl.add_argument("--scale", default="", choices=["", "per_sample", "per_token"],
                    help="with --gradients: the norm, or the norm over the bucket's samples or tokens")
    pl.set_defaults(func=cmd_plot)

    vw = commands["view"] = sub("view", help="an HTML report of episodes (boards, reasoning, actions, rewards)")
    vw.add_argument("source", help="a trajectory file (ragen eval --save) or a run folder (its latest rollouts)")
    vw.add_argument("--out", default=None, help="default: RUN_DIR/report.html, or NAME.html beside NAME.jsonl")
    vw.add_argument("--iteration", type=int, default=None, help="a run folder's rollouts of this iteration")
    vw.add_argument("--no-images", action="store_true", help="text boards only (no replay of the episodes)")
    # A rollouts file is data: its env arguments could point an env at a file or a URL, so a replay takes
    # the catalogue's unless the user says otherwise.
    vw.add_argument("--env-kwargs", type=cli_args._json_object, default=None, metavar="JSON",
                    help="env arguments for the replay, over the catalogue's (the file's own are not used): "
                         "'{\"size\": 4}', or keyed by env id for a file of several envs")
    vw.add_argument("--trust-env-kwargs", action="store_true",
                    help="replay with the file's env_kwargs: only for your own runs (they may make an env read "
                         "a file or use much memory). Envs that run code, fetch or read data are never replayed")
    vw.set_defaults(func=cmd_view)

    from ragen_envs.cli.diagnose import add_parser

    commands["diagnose"] = add_parser(sub)
    return parser, commands


def run_layer(data: dict, *leave_out: str) -> tuple[dict | None, dict]:
    """A run config's envs, and its settings (but ``leave_out``) as ``train``'s defaults."""
    from trainers.config import TrainerConfig

    for key in leave_out:
        data.pop(key, None)
    envs, model = data.pop("env", None), data.pop("model", None)
    return envs, {**cli_args.flatten(TrainerConfig, data), "model": model}


def _parse(parser, commands, argv) -> argparse.Namespace:
    """``parser.parse_args``, with a misspelt flag reported by its command's parser (its usage, not ragen's)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        (commands.get(getattr(args, "command", None)) or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``. Defaults come in layers, each over the one before: the dataclasses'; for ``train
    --resume``, the run's own config.json; ``--preset NAME``; ``--config FILE``; ``sft --from-scratch``'s.
    Flags given on the command line override them all."""
    from trainers.config import SFTConfig, TrainerConfig, eval_preset, organism_sft_settings, preset

    parser, commands = build_parser()
    args = _parse(parser, commands, argv)
    layers = []  # (subparser, defaults)
    envs = None
    if args.command == "train" and args.resume:
        folder = args.output_dir or (Path(args.resume).parent if args.resume != "latest" else None)
        if folder is None:
            raise ValueError("--resume latest needs --output-dir, the run folder to resume")
        if args.config:
            raise ValueError("--resume reads the run's own config.json: leave out --config")
        record = Path(folder) / "config.json"
        if not record.is_file():
            raise ValueError(f"--resume: no run in {folder} (it has no config.json); leave out --resume to start one")
        envs, defaults = run_layer(load_run_config(str(record)), "allow_config_changes", "resume_from_checkpoint")
        layers.append((commands["train"], defaults))  # without this resume's own settings
    if args.command in ("train", "eval") and args.preset:
        env = args.env[0].partition(":")[0] if args.env else next(iter(envs or {}), None)
        layers.append((commands[args.command], cli_args.flatten(TrainerConfig, preset(args.preset, env))
                       if args.command == "train" else cli_args.flatten(RolloutConfig, eval_preset(args.preset, env))))
    if args.command == "train" and args.config:
        envs, defaults = run_layer(load_run_config(args.config))
        layers.append((commands["train"], defaults))
    if args.command == "sft" and args.from_scratch:  # the organism's own training settings
        env_ids = [e.partition(":")[0] for e in args.env or ()]
        layers.append((commands["sft"], cli_args.flatten(SFTConfig, organism_sft_settings(env_ids))))
    for subparser, defaults in layers:
        subparser.set_defaults(**defaults)
    if layers:
        args = _parse(parser, commands, argv)
    if args.command == "train" and args.env is None and envs:
        args.env = [f"{env_id}:{groups}" for env_id, groups in envs.items()]
    if args.command in ("eval", "train", "sft", "serve") and not args.env:
        parser.error(f"{args.command}: give at least one --env (`ragen list` shows the catalogue)")
    return args


# Errors in what the user asked for: one line, exit 2. Anything else is reported in one line too,
# with its type and a pointer to --debug, and exits 1.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, ImportError)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        try:
            args = parse(argv)  # a run config file is read here
        except SystemExit as stop:  # argparse: --help, or a usage error it has printed
            return stop.code if isinstance(stop.code, int) else 2
        return args.func(args)
    except KeyboardInterrupt:
        print("ragen: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        if isinstance(error, ImportError) and missing_module_hint(error):  # "No module named 'torch'" says too little
            message = f"{message}: {missing_module_hint(error)}"
        shadowed = trainers_shadowed()  # a user's own trainers/ folder fails in ways that name nothing
        if shadowed is not None:
            message = f"{message} ({shadowed})"
        if isinstance(error, USER_ERRORS):
            print(f"ragen: error: {message}", file=sys.stderr)
            return 2
        print(f"ragen: error: {type(error).__name__}: {message} (--debug shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
