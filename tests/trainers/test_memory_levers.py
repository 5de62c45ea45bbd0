"""The memory levers for large models, on CPU: gradient checkpointing (the same gradients, layers
recomputed), FSDP2's CPU offload and bf16 gathering (the policies reach fully_shard; a gloo run with
offload and checkpointing trains like DDP), and the checks on their settings."""

import pytest
import torch

from trainers import Trainer, TrainerConfig
from trainers.model import checkpointing, is_checkpointing
from tests.numerics import assert_same_gradients, record_gradients
from tests.trainers.test_trainer import SeededReplies, config, make_model
from conftest import SMOKE


def _update_forwards(model, calls):
    """Count the first decoder layer's MLP's training-mode forwards (the update's; rollouts run in eval mode).
    The MLP, not the layer: transformers 5 checkpoints a layer's forward, outside the layer's own hooks."""
    mlp = model.model.layers[0].mlp
    mlp.register_forward_pre_hook(lambda module, args: calls.append(1) if module.training else None)


def test_gradient_checkpointing_recomputes_the_layers_and_trains_the_same(tokenizer, tmp_path):
    grads, forwards = {}, {}
    for on in (False, True):
        model = make_model(tokenizer)
        forwards[on] = []
        _update_forwards(model, forwards[on])
        trainer = Trainer(model, SMOKE, config(tmp_path / str(on), filter="top_p", gradient_checkpointing=on,
                                               save_strategy="no"),
                          tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
        grads[on] = record_gradients(trainer.optimizer)
        trainer.train()
        assert is_checkpointing(model) == on and model.config.use_cache  # the cache setting as it was
    assert_same_gradients(grads[False], grads[True])
    # with it, each micro-batch's layer runs again in the backward pass
    assert len(forwards[False]) >= 1 and len(forwards[True]) == 2 * len(forwards[False])


def test_checkpointing_turns_the_cache_off_inside_and_refuses_a_model_without_it(tokenizer):
    model = make_model(tokenizer)
    with checkpointing(model, False):
        assert not is_checkpointing(model) and model.config.use_cache is True
    with checkpointing(model, True):
        assert is_checkpointing(model) and model.config.use_cache is False
    assert model.config.use_cache is True

    class Plain(torch.nn.Module):
        supports_gradient_checkpointing = False

    with pytest.raises(ValueError, match="does not support it"):
        with checkpointing(Plain(), True):
            pass


def test_fully_shard_gets_the_offload_and_bf16_policies(tokenizer, monkeypatch):
    import torch.distributed.fsdp as fsdp

    from trainers.distributed import shard

    calls = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda module, **kwargs: calls.append((module, kwargs)))
    model = make_model(tokenizer)
    root = torch.nn.Module()
    for offload, bf16 in ((False, False), (True, True)):
        calls.clear()
        shard(root, model, cpu_offload=offload, bf16=bf16)
        assert [m for m, _ in calls] == [*model.model.layers, root]  # each layer, then the root
        for _, kwargs in calls:
            assert isinstance(kwargs["offload_policy"], fsdp.CPUOffloadPolicy) == offload
            assert kwargs["mp_policy"].param_dtype == (torch.bfloat16 if bf16 else None)
            assert kwargs["mp_policy"].reduce_dtype == (torch.float32 if bf16 else None)


def test_the_trainer_passes_its_offload_and_precision_to_the_sharding(tokenizer, tmp_path, monkeypatch):
    import trainers.base

    seen = []
    original = trainers.base.distribute
    monkeypatch.setattr(trainers.base, "distribute", lambda *args, **kwargs: seen.append(kwargs) or original(
        *args, **kwargs))
    Trainer(make_model(tokenizer), SMOKE, config(tmp_path, data_parallel="fsdp", fsdp_cpu_offload=True,
                                                 mixed_precision="bf16"),
            tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    assert seen[0]["cpu_offload"] is True and seen[0]["bf16"] is True


@pytest.mark.parametrize("kwargs, message", [
    ({"fsdp_cpu_offload": True}, "needs data_parallel='fsdp'"),
    ({"report_to": "comet"}, "report_to must be one of"),
])
def test_bad_lever_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainerConfig(**kwargs)


def test_fsdp_with_cpu_offload_and_gradient_checkpointing_trains_like_ddp(tmp_path):
    """Two gloo ranks: FSDP2 with its shards offloaded (to the CPU they are on already: the policy's
    code path, not its memory saving) and its layers checkpointed gets DDP's gradients at every step."""
    from tests.trainers.test_distributed import _spawn

    settings = {"filter": "top_p", "filter_value": 0.9, "save_strategy": "no"}
    ddp = _spawn(tmp_path / "ddp", settings, "ddp")
    offloaded = _spawn(tmp_path / "offload", {**settings, "fsdp_cpu_offload": True, "gradient_checkpointing": True},
                       "fsdp")
    assert_same_gradients(ddp[0]["grads"], offloaded[0]["grads"])
    assert_same_gradients(ddp[0]["grads"], offloaded[1]["grads"])


def test_auto_precision_autocasts_on_a_cpu_only_for_a_wide_model(monkeypatch):
    from transformers import LlamaConfig

    from trainers import model as precision

    cpu, narrow, wide = torch.device("cpu"), LlamaConfig(hidden_size=128), LlamaConfig(hidden_size=576)
    for flags, native in (("fpu avx2 amx_bf16 amx_tile", True), ("fpu avx2", False)):
        monkeypatch.setattr(precision.Path, "read_text", lambda self, flags=flags: flags)
        assert precision.use_bf16("auto", cpu, narrow) is False  # autocasting costs a small model more than it saves
        assert precision.use_bf16("auto", cpu, wide) is native
        assert precision.use_bf16("bf16", cpu, narrow) and not precision.use_bf16("no", cpu, wide)
