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

The loss is the mean log-loss of the reply tokens only (prompt and observation tokens are context).
Training updates the top layers (``freeze_layers`` bottom decoder layers and the embeddings stay as
they are) with AdamW, in fp32. The result is a normal model folder: ``ragen eval --model`` and
``ragen train --model`` take it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ragen_envs.agent import ChatEnv, chat_encoding, progress
from ragen_envs.agent.parsing import THINK_OPEN
from trainers.config import SFTConfig


@dataclass
class Demo:
    env_id: str
    seed: int
    prompt_ids: list[int]  # exactly what an RL rollout's prompt would be (with the <think> prefill)
    response_ids: list[int]  # the reply after the prefill, end-of-turn token included
    oracle: bool  # False for an imperfect (random) turn


def demonstrations(env_ids: list[str], tokenizer, config: SFTConfig) -> list[Demo]:
    """Oracle episodes of each env as per-turn (prompt, reply) token pairs."""
    rng = random.Random(config.seed)
    prefill = THINK_OPEN if config.chat.enable_think else ""
    prefill_ids = chat_encoding.tokenize(tokenizer, prefill) if prefill else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    demos = []
    for env_id in env_ids:
        chat = ChatEnv(env_id, config.chat, config.max_new_tokens)
        env = chat.env.unwrapped
        for episode in range(config.episodes):
            seed = config.seed + episode
            prompt = chat_encoding.encode_chat(tokenizer, chat.reset(seed=seed)) + prefill_ids
            while not chat.done:
                action, reasoning, oracle = env.oracle_action(), env.oracle_reasoning(), True
                if action is None:
                    break
                if chat.valid_actions and rng.random() < config.imperfect:
                    action, oracle = rng.choice(chat.valid_actions), False
                    reasoning = f"I am not sure which move is best here, so I try {action}."
                reasoning = reasoning or f"The best next step here is {action}."
                text = (f"{reasoning}</think><answer>{action}</answer>" if prefill
                        else f"<answer>{action}</answer>")
                reply = chat_encoding.tokenize(tokenizer, text) + eos
                demos.append(Demo(env_id, seed, prompt, reply, oracle))
                chat.step(prefill + text)
                if not chat.done:
                    prompt = chat_encoding.extend(tokenizer, prompt, reply, chat.messages, prefill)
        chat.close()
    return demos


def _freeze(model, layers: int) -> None:
    """Keep the embeddings and the bottom ``layers`` decoder layers as they are."""
    if layers <= 0:
        return
    base = model.base_model
    for p in base.get_input_embeddings().parameters():
        p.requires_grad_(False)
    for layer in list(getattr(base, "layers", []))[:layers]:
        for p in layer.parameters():
            p.requires_grad_(False)


def sft_loss(model, demos: list[Demo], pad_id: int, device) -> torch.Tensor:
    """Mean negative log-likelihood of the reply tokens of a batch of demonstrations."""
    rows = [d.prompt_ids + d.response_ids for d in demos]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, d) in enumerate(zip(rows, demos)):
        ids[i, :len(row)] = torch.tensor(row)
        attention[i, :len(row)] = 1
        labels[i, len(d.prompt_ids):len(row)] = torch.tensor(d.response_ids)
    out = model(input_ids=ids.to(device), attention_mask=attention.to(device), labels=labels.to(device))
    return out.loss


def warm_start(model, env_ids: list[str], config: SFTConfig, tokenizer=None, device: str = "cpu") -> dict:
    """Fine-tune ``model`` (a path or id, a loaded model with ``tokenizer``, or None for the default) on
    oracle demonstrations of ``env_ids``; save it to ``config.output_dir``; return what happened."""
    from ragen_envs.agent.default_model import load_model

    if model is None or isinstance(model, (str, Path)):
        model, tokenizer = load_model(model, torch.float32, tokenizer)
    if tokenizer is None:
        raise ValueError("pass the tokenizer together with a loaded model")
    model = model.to(device).float().train()
    with progress.step(f"playing {config.episodes} oracle episodes per env"):
        demos = demonstrations(env_ids, tokenizer, config)
    _freeze(model, config.freeze_layers)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate)
    rng = random.Random(config.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    losses = []
    steps = config.epochs * -(-len(demos) // config.batch_size)
    bar = progress.bar(steps, "step", "warm start")
    for _ in range(config.epochs):
        order = list(range(len(demos)))
        rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            batch = [demos[i] for i in order[start:start + config.batch_size]]
            loss = sft_loss(model, batch, pad, device)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(loss.item())
            bar(len(losses), loss=f"{losses[-1]:.3f}")
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    out = Path(config.output_dir)
    with progress.step(f"saving the warm-started model to {out}"):
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record = {"envs": env_ids, "demonstrations": len(demos),
                  "oracle_share": sum(d.oracle for d in demos) / max(len(demos), 1),
                  "steps": len(losses), "first_loss": losses[0] if losses else None,
                  "last_loss": losses[-1] if losses else None, "config": asdict(config)}
        (out / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
