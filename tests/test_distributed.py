"""Data-parallel training: two CPU processes on gloo, as torchrun would start them."""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp


def _worker(rank, world, port, out_dir, filter_kwargs, data_parallel="ddp"):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from pathlib import Path

    import torch.distributed as dist
    from test_trainer import SeededReplies, config, make_model
    from transformers import AutoTokenizer

    from ragen_envs.agent.default_model import default_model_path
    from trainers import Trainer

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    model = make_model(tokenizer)  # the same initial weights on every rank
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = config(Path(out_dir), algorithm="grpo", n_groups=2, data_parallel=data_parallel, **filter_kwargs)
    trainer = Trainer(model, "Ragen/FrozenLake-v0", cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    history = trainer.train()
    from trainers.distributed import full_state, gathered

    weights, _ = full_state(model, trainer.optimizer, trainer.sharded)  # a sharded model's, gathered
    with gathered(trainer.scorer, trainer.sharded):
        prompts = [t.messages[1]["content"] for t in trainer.runner.collect()]
    torch.save({"initial": initial, "final": weights or model.state_dict(), "metrics": history,
                "first_prompts": prompts},
               f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("filter_kwargs", [
    {"filter": "top_p", "filter_value": 0.9},
    {"filter": "top_k", "filter_value": 0.25},  # one group of four: one rank has nothing to train on
])
def test_two_ranks_stay_in_sync(filter_kwargs, tokenizer, tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), filter_kwargs), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for key, value in ranks[0]["final"].items():
        assert torch.equal(value, ranks[1]["final"][key]), key  # one model after the all-reduce
    assert any(not torch.equal(v, ranks[0]["initial"][k]) for k, v in ranks[0]["final"].items())
    assert ranks[0]["first_prompts"] != ranks[1]["first_prompts"]  # each rank rolls out its own groups
    m0, m1 = ranks[0]["metrics"][0], ranks[1]["metrics"][0]
    assert m0["filter/kept_groups"] == m1["filter/kept_groups"] >= 1  # one filter over all 4 groups
    assert m0["filter/rv_mean"] == m1["filter/rv_mean"]
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1  # rank 0 logs, once


def test_fsdp_trains_the_same_weights_as_ddp(tokenizer, tmp_path):
    """FSDP2 (fully_shard) over two ranks: after training, the gathered weights equal DDP's; the
    checkpoint it wrote holds them in full, and a run resumed from it goes on as DDP's does."""
    finals, resumed = {}, {}
    settings = {"filter": "top_p", "filter_value": 0.9, "save_steps": 1}
    for mode in ("ddp", "fsdp"):
        out = tmp_path / mode
        out.mkdir()
        mp.spawn(_worker, args=(2, _free_port(), str(out), settings, mode), nprocs=2, join=True)
        finals[mode] = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
        more = {**settings, "resume_from_checkpoint": "latest", "num_iterations": 2}
        mp.spawn(_worker, args=(2, _free_port(), str(out), more, mode), nprocs=2, join=True)
        resumed[mode] = torch.load(out / "rank0.pt", weights_only=False)["final"]
    for key in resumed["ddp"]:
        assert torch.allclose(resumed["ddp"][key], resumed["fsdp"][key], atol=1e-5), key
    ddp, fsdp = finals["ddp"][0]["final"], finals["fsdp"][0]["final"]
    assert ddp.keys() == fsdp.keys()
    for key in ddp:
        assert torch.allclose(ddp[key], fsdp[key], atol=1e-6), key
    assert any(not torch.equal(v, finals["fsdp"][0]["initial"][k]) for k, v in fsdp.items())  # it trained
    kept = [finals[mode][0]["metrics"][0]["filter/kept_groups"] for mode in ("ddp", "fsdp")]
    assert kept[0] == kept[1]
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "fsdp" / "run" / "checkpoint-1" / "model.safetensors"))
    for key, value in saved.items():
        assert torch.allclose(value, fsdp[key], atol=1e-6), key
