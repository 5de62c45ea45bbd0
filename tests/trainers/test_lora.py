"""LoRA (``lora_rank`` > 0, trainers/lora.py) on the tiny model: only the adapters train, the KL reference
is the base model, other engines get the merged weights, and a checkpoint resumes the adapter exactly."""

import shutil
import sys
import types

import numpy as np
import pytest
import torch

from ragen_envs.agent.backends.transformers import TransformersPolicy
from ragen_envs.diagnose import mi
from trainers import Trainer, TrainerConfig, checkpoint, lora
from trainers.distributed import full_weights
from trainers.scoring import TokenScorer

from tests.trainers.test_trainer import SeededReplies, config, make_model
from conftest import SMOKE

RANK, ALPHA = 4, 8  # scale alpha / r = 2
IDS = torch.tensor([[1, 5, 9, 200, 31, 7, 4000, 12]])
# the scorer's inputs for IDS: every next token scored
SCORED = (IDS, torch.ones_like(IDS), torch.ones_like(IDS[:, 1:], dtype=torch.bool), IDS[:, 1:])


def trainer(tokenizer, tmp_path, model=None, **kw):
    # mi_every=0: not what these tests look at; 2 minibatches of 4: lora_A moves from the second step (B starts at 0)
    settings = dict(lora_rank=RANK, lora_alpha=ALPHA, mi_every=0, filter="none", n_groups=2, mini_batch_size=4)
    return Trainer(model or make_model(tokenizer), SMOKE, config(tmp_path, **{**settings, **kw}), tokenizer=tokenizer,
                   rollout_policy=SeededReplies(tokenizer))


def adapted(tokenizer, seed=0, **kw):
    model = make_model(tokenizer, seed)
    lora.add_adapters(model, TrainerConfig(lora_rank=RANK, lora_alpha=ALPHA, **kw))
    return model


def adapter_names(model):
    return {name for name, _ in model.named_parameters() if ".lora_" in name}


def random_adapters(model, seed=1):
    """lora_B away from its zero start, so the adapted model differs from the base one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_rank_0_leaves_the_model_alone_and_needs_no_peft(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` fails
    model = make_model(tokenizer)
    names = set(model.state_dict())
    trainer(tokenizer, tmp_path, model, lora_rank=0).train()
    assert not lora.adapted(model) and set(model.state_dict()) == names
    assert not (tmp_path / "run" / "checkpoint-1" / lora.ADAPTER_DIR).exists()
    with pytest.raises(ImportError, match=r'needs peft, which is not installed: pip install "ragen-envs\[lora\]"'):
        trainer(tokenizer, tmp_path / "x")


def test_only_the_adapters_train(tokenizer, tmp_path):
    from peft import LoraConfig, get_peft_model

    run = trainer(tokenizer, tmp_path)
    model = run.model
    base = {k: v.clone() for k, v in model.state_dict().items() if ".lora_" not in k}
    adapters = {k: v.clone() for k, v in model.state_dict().items() if ".lora_" in k}
    # 2 layers x (q, k, v, o, gate, up, down) x (A, B): every linear layer but the LM head
    assert len(adapter_names(model)) == 2 * 7 * 2 and not lora.adapted(model.lm_head)
    assert {name for name, p in model.named_parameters() if p.requires_grad} == adapter_names(model)
    trained = [p for group in run.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in trained} == {id(p) for name, p in model.named_parameters() if ".lora_" in name}
    # peft's own count for the same settings on a fresh model
    reference = get_peft_model(make_model(tokenizer), LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear"))
    assert sum(p.numel() for p in trained) == reference.get_nb_trainable_parameters()[0]
    assert run.train()[0]["loss/updates"] == 2
    assert all(torch.equal(v, base[k]) for k, v in model.state_dict().items() if k in base)
    changed = {k for k, v in model.state_dict().items() if k in adapters and not torch.equal(v, adapters[k])}
    assert {k for k in adapters if ".lora_B." in k} <= changed and any(".lora_A." in k for k in changed)


def test_the_adapted_model_starts_as_the_base_model(tokenizer):
    plain, model = make_model(tokenizer), make_model(tokenizer)
    rng = torch.random.get_rng_state()
    lora.add_adapters(model, TrainerConfig(lora_rank=RANK, lora_alpha=ALPHA))
    assert all(not p.any() for name, p in model.named_parameters() if ".lora_B." in name)
    assert torch.equal(logits(model), logits(plain))
    # lora_A is drawn from the run's seed, whatever torch's global RNG holds, and leaves that where it was
    assert torch.equal(torch.random.get_rng_state(), rng)
    again = make_model(tokenizer)
    torch.manual_seed(123)
    lora.add_adapters(again, TrainerConfig(lora_rank=RANK, lora_alpha=ALPHA))
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in model.state_dict().items())


def test_merged_weights_are_a_plain_model_that_scores_like_the_adapted_one(tokenizer, tmp_path):
    run = trainer(tokenizer, tmp_path)
    model = run.model
    random_adapters(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weights = full_weights(model, run.sharded)  # what a vLLM rollout policy's load_weights gets
    plain = make_model(tokenizer, seed=1)
    assert set(weights) == set(plain.state_dict())  # the base model's names: no lora_A / lora_B / base_layer
    layer = "model.layers.1.self_attn.q_proj"
    a, b = before[f"{layer}.lora_A.default.weight"], before[f"{layer}.lora_B.default.weight"]
    assert torch.equal(weights[f"{layer}.weight"], before[f"{layer}.base_layer.weight"] + (ALPHA / RANK) * b @ a)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the live model untouched
    plain.load_state_dict(weights, strict=True)
    torch.testing.assert_close(logits(plain), logits(model), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits(model), logits(make_model(tokenizer)), atol=1e-2)  # the adapters do matter
    # the MI scorer scores with the trainer's policy: the adapted model itself
    assert run.policy.model is model
    prompts = [[1, 5, 9, 200], [1, 5, 31]]
    reasonings = [[[7, 4000, 12], [8]], [[300, 301]]]
    ours, _ = mi.cross_loglik(run.policy, prompts, reasonings)
    theirs, _ = mi.cross_loglik(TransformersPolicy(plain, tokenizer, device="cpu"), prompts, reasonings)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)


def test_the_kl_reference_is_the_base_model_not_a_copy(tokenizer, tmp_path, monkeypatch):
    def no_copy(_):
        raise AssertionError("the reference copied the model")

    monkeypatch.setattr("trainers.scoring.copy", types.SimpleNamespace(deepcopy=no_copy))
    run = trainer(tokenizer, tmp_path, beta=0.1, freeze_layers=1)
    model = run.model
    assert run.ref_scorer.model is model
    random_adapters(model)
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    base = TokenScorer(make_model(tokenizer), None, run.config.rollout.sampling.temperature, banned=run.policy.banned)
    reference = run.ref_scorer(*SCORED)[0]
    assert torch.equal(reference, base(*SCORED)[0].detach()) and not reference.requires_grad
    assert not torch.equal(run.scorer(*SCORED)[0], reference)  # the adapters are back on
    # the adapters of the frozen bottom layer stay frozen after the switch
    assert {name: p.requires_grad for name, p in model.named_parameters()} == flags
    assert not any(flags[name] for name in adapter_names(model) if name.startswith("model.layers.0."))
    frozen = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("model.layers.0.")}
    assert run.train()[0]["loss/kl"] > 0
    assert all(torch.equal(v, frozen[k]) for k, v in model.state_dict().items() if k in frozen)


def test_a_checkpoint_holds_the_adapter_and_a_resumed_run_continues_exactly(tokenizer, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def run(directory, iterations, resume=None):  # PPO: its separate critic has adapters of its own
        return trainer(tokenizer, directory, algorithm="ppo", beta=0.01, num_iterations=iterations, save_steps=1,
                       resume_from_checkpoint=resume)

    def strip(records):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]

    full = run(tmp_path / "a", 2)
    assert {name for name, p in full.critic_trunk.named_parameters() if p.requires_grad} \
        == adapter_names(full.critic_trunk)
    history = full.train()
    first = run(tmp_path / "b", 1)
    first.train()
    saved = tmp_path / "b" / "run" / "checkpoint-1"
    assert {lora.CONFIG_FILE, lora.ADAPTER_FILE} == {p.name for p in (saved / lora.ADAPTER_DIR).iterdir()}
    # peft loads the adapter onto the base model; transformers loads the merged model as a plain one (an
    # adapter beside it would be applied over the merged weights a second time)
    adapter = saved / lora.ADAPTER_DIR
    assert torch.equal(logits(PeftModel.from_pretrained(make_model(tokenizer), str(adapter))), logits(first.model))
    torch.testing.assert_close(logits(AutoModelForCausalLM.from_pretrained(saved)), logits(first.model),
                               rtol=1e-5, atol=1e-5)
    resumed = run(tmp_path / "b", 2, resume="latest")
    assert strip(resumed.train()) == strip(history[1:])
    for ours, theirs in [(resumed.model, full.model), (resumed.critic_trunk, full.critic_trunk),
                         (resumed.value_head, full.value_head)]:
        assert all(torch.equal(v, theirs.state_dict()[k]) for k, v in ours.state_dict().items())
    # another base model, or a checkpoint without its adapter, is refused
    with pytest.raises(ValueError, match="another base model"):
        checkpoint.load(saved, adapted(tokenizer, seed=1))
    broken = shutil.copytree(saved, tmp_path / "broken")
    (broken / lora.ADAPTER_DIR / lora.ADAPTER_FILE).unlink()
    with pytest.raises(ValueError, match="adapter_model.safetensors missing"):
        checkpoint.validate(broken, "ppo", None)


@pytest.mark.parametrize("kwargs, match", [({"lora_rank": -1}, "lora_rank"), ({"lora_alpha": 0}, "lora_alpha"),
                                           ({"lora_target_modules": " , "}, "lora_target_modules")])
def test_bad_lora_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainerConfig(**kwargs)


def test_the_lm_head_is_no_target(tokenizer):
    model = make_model(tokenizer)
    with pytest.raises(ValueError, match="below the LM head"):
        lora.add_adapters(model, TrainerConfig(lora_rank=RANK, lora_target_modules="q_proj,lm_head"))
    assert not lora.adapted(model)  # refused before anything was injected
    with pytest.raises(ValueError, match="not found"):  # peft's own check
        adapted(tokenizer, lora_target_modules="no_such_proj")
    model = adapted(tokenizer, lora_target_modules="q_proj, v_proj")
    assert {name.split(".")[-4] for name in adapter_names(model)} == {"q_proj", "v_proj"}
