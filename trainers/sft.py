"""Warm start: supervised fine-tuning on the environments' own oracle demonstrations.

    from trainers.sft import SFTConfig, warm_start
    warm_start(None, ["Ragen/FrozenLake-v0"], SFTConfig(episodes=200, output_dir="runs/warm"))

A demonstration is an episode played through ``ChatEnv`` with the same prompts, chat template and
``<think>`` prefill as RL rollouts, so the format learnt is exactly the one rewarded. Each reply is
``<reasoning></think><answer>action</answer>``: the action is the env's ``oracle_action()``, the
reasoning its ``oracle_reasoning()``, which describes the current state (where the player, goal,
holes, boxes are, and what the move does), so it differs from state to state and the warm-started
model does not start out collapsed onto one template. A share ``imperfect`` of the turns plays a
random valid action instead (the reasoning then says the move is a guess), so the warm-started
policy succeeds sometimes, not always: groups then differ in reward and RL has a signal.

An episode trains as one sequence (``episodes``): each turn's prompt extends the previous prompt and
reply, exactly as RL rollouts chain them, so the last prompt plus the last reply holds every turn
and is run once instead of once per turn. The loss is the mean log-loss of the reply tokens only
(prompt and observation tokens are context); the output folder's ``metrics.jsonl`` gets its mean every
few steps (``ragen plot`` draws it).
Training updates the top layers (``freeze_layers`` bottom decoder layers and the embeddings stay as
they are) with AdamW, in fp32. The result is a normal model folder: ``ragen eval --model`` and
``ragen train --model`` take it.
"""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ragen_envs.agent import ChatEnv, chat_encoding, progress
from ragen_envs.registry import ENVIRONMENTS
from ragen_envs.agent.parsing import ACTION_SEPARATOR, THINK_OPEN
from trainers.config import SFTConfig
from trainers.metrics import SFT_LOSS, WARM_START_FILE
from trainers.model import model_name, prepare_model
from trainers.run import Run

LOG_RECORDS = 100  # about this many records in metrics.jsonl a warm start: each one is synced to disk


@dataclass
class Demo:
    env_id: str
    seed: int
    prompt_ids: list[int]  # exactly what an RL rollout's prompt would be (with the <think> prefill)
    response_ids: list[int]  # the reply after the prefill, end-of-turn token included
    oracle: bool  # False for an imperfect (random) turn


def oracle_play(env_ids: list[str], config: SFTConfig, episodes: int):
    """Play ``episodes`` demonstrated episodes of each env through ``ChatEnv`` (env seeds from
    ``config.seed``). Yields ``(chat, seed, text, oracle)`` before each reply ``text`` is played (the
    chat's messages are then its prompt) and ``(chat, seed, None, None)`` when an episode ends (its
    messages are then the whole episode). ``chat`` is the one live ``ChatEnv`` of its env: read its
    messages before asking for the next item. One random generator (``config.seed``) serves every turn
    of every env, so the number of episodes played changes the draws of every env after the first."""
    rng = random.Random(config.seed)
    for env_id in env_ids:
        chat = ChatEnv(env_id, config.chat, config.max_new_tokens)
        for episode in range(episodes):
            seed = config.seed + episode
            chat.reset(seed=seed)
            while not chat.done:
                text, oracle = oracle_turn(chat, rng, config)
                if text is None:
                    break
                yield chat, seed, text, oracle
                chat.step(config.chat.prefill + text)
            yield chat, seed, None, None
        chat.close()


def oracle_texts(env_ids: list[str], config: SFTConfig, episodes: int):
    """The text of demonstrated episodes: every message (instructions, observations, feedback) and
    reply; what the model organism's tokenizer learns from."""
    for chat, _, text, _ in oracle_play(env_ids, config, episodes):
        if text is None:
            yield from (m["content"] for m in chat.messages)


def demonstrations(env_ids: list[str], tokenizer, config: SFTConfig) -> list[Demo]:
    """Demonstrated episodes of each env as per-turn (prompt, reply) token pairs."""
    prefill = config.chat.prefill
    prefill_ids = chat_encoding.tokenize(tokenizer, prefill) if prefill else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    demos, prompt = [], None
    for chat, seed, text, oracle in oracle_play(env_ids, config, config.episodes):
        if text is None:  # the episode ended: the next turn opens a new prompt
            prompt = None
            continue
        prompt = (chat_encoding.encode_chat(tokenizer, chat.messages) + prefill_ids if prompt is None
                  else chat_encoding.extend(tokenizer, prompt, demos[-1].response_ids, chat.messages, prefill))
        demos.append(Demo(chat.env_id, seed, prompt, chat_encoding.tokenize(tokenizer, text) + eos, oracle))
    return demos


def oracle_turn(chat: ChatEnv, rng: random.Random, config: SFTConfig) -> tuple[str | None, bool]:
    """A demonstrated reply (after the chat's prefill) for the chat's current state, and whether it is
    the oracle's: a share ``config.imperfect`` of the turns of a finite action set plays a random valid
    action (the reasoning then says it is a guess); a share ``config.multi_move`` of the oracle's turns
    plays its next moves up to the reply's allowance (``max_actions_per_turn``), the reasoning naming the
    later ones. (None, True) where the oracle knows no action."""
    env = chat.env.unwrapped
    action, reasoning, oracle = env.oracle_action(), env.oracle_reasoning(), True
    if action is None:
        return None, True
    actions = [action]
    if chat.valid_actions and rng.random() < config.imperfect:
        actions, oracle = [rng.choice(chat.valid_actions)], False
        reasoning = f"I am not sure which move is best here, so I try {actions[0]}."
    else:
        reasoning = reasoning or f"The best next step here is {action}."
        if config.multi_move and chat.max_actions > 1 and rng.random() < config.multi_move:
            actions += oracle_lookahead(env, action, chat.max_actions - 1, rng.getrandbits(64))
            reasoning += "".join(f" Then {a}." for a in actions[1:])
    answer = f" {ACTION_SEPARATOR} ".join(actions)
    reply = (f"{THINK_OPEN}{reasoning}</think>" if chat.config.enable_think else "") + f"<answer>{answer}</answer>"
    return reply[len(chat.config.prefill):], oracle  # the prefill opens every reply: <think>, <answer> or nothing


def oracle_lookahead(env, action, n: int, seed: int) -> list:
    """The oracle's next ``n`` moves after ``action`` (fewer where the episode ends first), played on a copy
    of ``env`` so the demonstrated episode itself is untouched. The copy draws its random transitions (a
    slip, a new tile) from its own generator, seeded with ``seed``: the later moves are planned for an
    outcome a policy could imagine, never for the one the episode will draw (the copy would otherwise
    carry the episode's generator, and the demonstration would foresee the slip). A TypeError where the
    env cannot be copied (a remote client): such an env takes ``multi_move=0``."""
    try:
        future = copy.deepcopy(env)
    except (TypeError, copy.Error) as error:
        raise TypeError(f"SFT's multi_move plans ahead on a copy of the env, and {type(env).__name__} cannot "
                        f"be copied ({error}); warm-start it with multi_move=0 (--multi-move 0)") from None
    future.np_random = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if any(future.step(action)[2:4]):  # terminated or truncated
            break
        action = future.oracle_action()
        if action is None:
            break
        out.append(action)
    return out


@dataclass
class Episode:
    """One episode's demonstrations as one token sequence: each turn's prompt extends the previous
    prompt and reply (as in RL rollouts), so the last prompt plus the last reply holds every turn."""
    ids: list[int]
    reply: list[bool]  # True on the demonstrated reply tokens: the loss is on these only


def episodes(demos: list[Demo]) -> list[Episode]:
    """Chain consecutive turns of an episode into one sequence (a turn that does not extend the last
    one, e.g. after the context cap, starts a new sequence)."""
    out: list[Episode] = []
    for d in demos:
        last = out[-1] if out else None
        if last is not None and len(d.prompt_ids) >= len(last.ids) and d.prompt_ids[:len(last.ids)] == last.ids:
            env = d.prompt_ids[len(last.ids):]
            last.ids.extend(env + d.response_ids)
            last.reply.extend([False] * len(env) + [True] * len(d.response_ids))
        else:
            out.append(Episode(d.prompt_ids + d.response_ids,
                               [False] * len(d.prompt_ids) + [True] * len(d.response_ids)))
    return out


def sft_loss(model, batch: list[Episode], pad_id: int, device) -> torch.Tensor:
    """Mean negative log-likelihood of the reply tokens of a batch of episodes."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, e in enumerate(batch):
        row = torch.tensor(e.ids)
        ids[i, :len(row)] = row
        attention[i, :len(row)] = 1
        labels[i, :len(row)] = row.masked_fill(~torch.tensor(e.reply), -100)
    out = model(input_ids=ids.to(device), attention_mask=attention.to(device), labels=labels.to(device))
    return out.loss


def warm_start(model, env_ids: list[str], config: SFTConfig, tokenizer=None, device: str = "cpu") -> dict:
    """Fine-tune ``model`` (a path or id, a loaded model with ``tokenizer``, or None for the default) on
    oracle demonstrations of ``env_ids``; save it to ``config.output_dir``; return what happened."""
    visual = [e for e in env_ids if e in ENVIRONMENTS and ENVIRONMENTS[e].visual]
    if visual:  # its demonstrations are text: an image would reach the model as a bare placeholder
        raise ValueError(f"SFT warm starts are made on text envs; {', '.join(visual)} shows images")
    out = Path(config.output_dir)
    name = model_name(model)
    made_from = _made_from(name, env_ids, config)
    cached = reused(name, env_ids, config)
    if cached is not None:
        return cached
    # the folder's own rule (``reused``) has refused another warm start; a model folder's config.json is the model's
    run = Run(out, what="the warm-started model")
    run.check_writable()
    model, tokenizer = prepare_model(model, tokenizer, device, config.freeze_layers)
    model.train()
    with progress.step(f"playing {config.episodes} oracle episodes per env"):
        demos = demonstrations(env_ids, tokenizer, config)
    sequences = episodes(demos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    losses = train(model, sequences, pad, config, device, run)
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    record = {**made_from, "demonstrations": len(demos), "episodes": len(sequences),
              "oracle_share": sum(d.oracle for d in demos) / max(len(demos), 1),
              "steps": len(losses), "first_loss": losses[0] if losses else None,
              "last_loss": losses[-1] if losses else None}

    def save(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / WARM_START_FILE).write_text(json.dumps(record, indent=2) + "\n")

    run.save(save, "the warm-started model", f"saving the warm-started model to {out}")
    return record


def train(model, sequences: list[Episode], pad: int, config: SFTConfig, device, run: Run) -> list[float]:
    """``config.epochs`` passes over ``sequences`` in shuffled batches; the loss of each step. ``run`` shows
    them on its bar and logs their mean every few steps (``LOG_RECORDS``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    rng = random.Random(config.seed)
    steps = config.epochs * -(-len(sequences) // config.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(_lr_factor, config.lr_schedule, steps))
    run.open_log(report_to=None)  # an interrupted start's records are set aside as abandoned
    run.start_bar(steps, "step", "warm start")
    every, logged, losses = max(1, steps // LOG_RECORDS), 0, []
    for epoch in range(config.epochs):
        order = list(range(len(sequences)))
        rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            batch = [sequences[i] for i in order[start:start + config.batch_size]]
            loss = sft_loss(model, batch, pad, device)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            rate = scheduler.get_last_lr()[0]  # this step's
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            run.show(len(losses), loss=f"{losses[-1]:.3f}")
            if len(losses) % every == 0 or len(losses) == steps:
                run.log({"iteration": len(losses), "epoch": epoch + 1, "learning_rate": rate,
                         SFT_LOSS: sum(losses[logged:]) / (len(losses) - logged)}, print_row=False)
                logged = len(losses)
    run.close(plot=False)
    return losses


def _made_from(name: str, env_ids: list[str], config: SFTConfig) -> dict:
    settings = {k: v for k, v in asdict(config).items() if k != "overwrite_output_dir"}
    return {"envs": list(env_ids), "model": name, "config": settings}


def reused(name: str, env_ids: list[str], config: SFTConfig) -> dict | None:
    """The warm start in ``config.output_dir`` when it was made from model ``name`` on ``env_ids`` with the
    same settings (its record, marked ``cached``), else None. A folder holding another warm start is
    refused unless ``overwrite_output_dir``, and then counts as incomplete (its record is removed) until
    the new one is saved."""
    out = Path(config.output_dir)
    made_from = _made_from(name, env_ids, config)
    previous = _previous(out)
    if previous is None:
        return None
    # a setting added since it was made (nested ones too) counts at its default (what it ran with)
    defaults = {k: v for k, v in asdict(SFTConfig()).items() if k != "overwrite_output_dir"}
    previous["config"] = _with_defaults(defaults, previous.get("config", {}))
    if {k: previous.get(k) for k in made_from} == made_from:
        print(f"using the warm start already in {out} (same model, envs and settings)", flush=True)
        return {**previous, "cached": True}
    if not config.overwrite_output_dir:
        raise ValueError(f"{out} holds a warm start made with other settings; pass --overwrite to replace it "
                         "or choose another --output-dir")
    (out / WARM_START_FILE).unlink()
    return None


def _with_defaults(defaults: dict, given: dict) -> dict:
    """``given`` with every key it lacks (at any depth) taken from ``defaults``."""
    out = {**defaults, **given}
    for key, value in defaults.items():
        if isinstance(value, dict) and isinstance(given.get(key), dict):
            out[key] = _with_defaults(value, given[key])
    return out


def _lr_factor(schedule: str, steps: int, step: int) -> float:
    """The learning rate's factor at ``step`` of ``steps`` (SFTConfig.lr_schedule)."""
    if schedule == "constant":
        return 1.0
    warmup = max(1, steps // 20)
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def warm_start_dir(env_id: str) -> Path:
    """Where ``make demo-smollm2`` and the speed benchmarks keep the default model's warm start on ``env_id``:
    the user cache, one folder per env."""
    from ragen_envs.agent.default_model import cache_dir

    return cache_dir() / "warm-start" / env_id.split("/")[-1].lower()


def _previous(out: Path) -> dict | None:
    """The record of a complete warm start in ``out`` (its weights written), else None."""
    try:
        record = json.loads((out / WARM_START_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if any(out.glob("*.safetensors")) else None
