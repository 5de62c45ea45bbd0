"""TRL: a real GRPOTrainer trains on multi-turn FrozenLake episodes through EnvRollout."""

import pytest
import torch

pytest.importorskip("trl", reason="the 'trl' extra")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, SamplingConfig  # noqa: E402
from ragen_envs.integrations.trl import EnvRollout, ToolEnv, env_reward  # noqa: E402
from conftest import SMOKE  # noqa: E402


def test_grpo_trainer_trains_on_multi_turn_episodes(tmp_path, tokenizer, tiny_model):
    model = tmp_path / "tiny"  # the README's example runs TRL on the real model; a tiny one keeps this fast
    tiny_model.save_pretrained(model)
    tokenizer.save_pretrained(model)
    config = RolloutConfig(chat=ChatEnvConfig(max_turns=2),
                           sampling=SamplingConfig(max_new_tokens=16, temperature=1.0), seed=3)
    rollout = EnvRollout(SMOKE, config)
    seen = []

    def recorded(prompts, trainer):
        seen.append((prompts, out := rollout(prompts, trainer)))
        return out

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2, max_steps=2,
                      learning_rate=1e-4, max_completion_length=512, logging_steps=1, report_to=[],
                      save_strategy="no", use_cpu=True, bf16=False, seed=0, disable_tqdm=True,
                      model_init_kwargs={"dtype": torch.float32}, gradient_checkpointing=False)

    # The untrained model's returns are all alike (no format), so a second reward makes advantages non-zero.
    def shorter(completions, **kwargs):
        return [-len(str(c)) / 1000 for c in completions]

    trainer = GRPOTrainer(model=str(model), reward_funcs=[env_reward, shorter], args=args,
                          train_dataset=rollout.dataset(8), rollout_func=recorded)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert len(seen) == 2 and trainer.state.global_step == 2
    changed = sum(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed > 0
    logged = [h for h in trainer.state.log_history if "rewards/env_reward/mean" in h]
    returns = [r for _, out in seen for r in out["env_reward"]]
    assert [h["rewards/env_reward/mean"] for h in logged] == pytest.approx(
        [sum(returns[:2]) / 2, sum(returns[2:]) / 2], abs=1e-4)

    prompts, out = seen[0]
    assert len(out["prompt_ids"]) == len(prompts) == 2
    multi_turn = 0
    for k in range(2):
        ids, mask, logps = out["completion_ids"][k], out["env_mask"][k], out["logprobs"][k]
        assert len(ids) == len(mask) == len(logps)
        assert mask[0] == 1  # the completion starts with the first reply
        env_tokens = [t for t, m in zip(ids, mask) if m == 0]
        if env_tokens:  # the env's reply between turns: a user message, not trained on
            multi_turn += 1
            assert "user" in tokenizer.decode(env_tokens)
            assert all(lp == 0.0 for lp, m in zip(logps, mask) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(logps, mask) if m == 1) or not any(mask)
        assert isinstance(out["env_reward"][k], float)
    assert multi_turn > 0  # some episode went past its first turn
    # Group members share the prompt (one initial state); the trainer's reward is the env's return.
    assert out["prompt_ids"][0] == out["prompt_ids"][1] and prompts[0] == prompts[1]


def test_an_unknown_prompt_is_refused(tokenizer):
    rollout = EnvRollout(SMOKE)
    rollout.dataset(2)

    class Trainer:
        num_generations = 1
        model = torch.nn.Linear(1, 1)

    with pytest.raises(ValueError, match="dataset"):
        rollout([[{"role": "user", "content": "hi"}]], Trainer())


def test_tool_env_follows_trls_environment_interface():
    env = ToolEnv(SMOKE)
    first = env.reset(seed=2, prompt=[{"role": "user", "content": "x"}])
    assert "frozen lake" in first.lower() and "P" in first
    schema = get_json_schema(env.act)  # what TRL shows the model as the tool
    assert schema["function"]["name"] == "act" and "action" in schema["function"]["parameters"]["properties"]
    reply = env.act("Sideways")
    assert "not a valid action" in reply and env.get_reward() == 0.0
    while not env.done:
        reply = env.act(env.env.get_wrapper_attr("oracle_action")())
    assert env.get_reward() == 1.0 and "over" in reply
