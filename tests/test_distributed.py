"""Data-parallel training: two CPU processes on gloo, as torchrun would start them."""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp


def _worker(rank, world, port, out_dir, filter_kwargs):
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
    cfg = config(Path(out_dir), algorithm="grpo", n_groups=2, **filter_kwargs)
    trainer = Trainer(model, "Ragen/FrozenLake-v0", cfg, tokenizer=tokenizer, rollout_policy=SeededReplies(tokenizer))
    history = trainer.train()
    torch.save({"initial": initial, "final": model.state_dict(), "metrics": history,
                "first_prompts": [t.messages[1]["content"] for t in trainer.runner.collect()]},
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
