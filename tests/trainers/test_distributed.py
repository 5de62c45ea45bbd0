"""Data-parallel training: two CPU processes on gloo, as torchrun would start them."""

import copy
import os
import shutil
import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from tests.numerics import assert_same_gradients
from conftest import SMOKE

# the probe at the first iteration only (every 2): the resumed second iteration trains without it
TOP_P = {"filter": "top_p", "filter_value": 0.9, "save_steps": 1, "gradient_analysis_every": 2,
         "gradient_analysis_num_buckets": 1}


def _worker(rank, world, port, out_dir, settings, data_parallel, resume_from):
    """One iteration from scratch into ``out_dir/run``; then, with ``resume_from``, a second iteration
    resumed from that checkpoint into ``out_dir/resumed``. Each rank saves what it saw."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from pathlib import Path

    import torch.distributed as dist
    from transformers import AutoTokenizer

    from ragen_envs.agent.default_model import default_model_path
    from tests.numerics import record_gradients
    from tests.trainers.test_trainer import SeededReplies, config, make_model
    from trainers import Trainer
    from trainers.distributed import full_state, gathered

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())

    def trainer(output_dir, **kw):
        cfg = config(Path(out_dir), algorithm="grpo", n_groups=2, data_parallel=data_parallel,
                     output_dir=str(output_dir), **settings, **kw)
        # make_model: the same initial weights on every rank
        return Trainer(make_model(tokenizer), SMOKE, cfg, tokenizer=tokenizer,
                       rollout_policy=SeededReplies(tokenizer))

    first = trainer(Path(out_dir) / "run")
    initial = {k: v.clone() for k, v in first.model.state_dict().items()} if not first.sharded else None
    grads = record_gradients(first.optimizer)
    history = first.train()
    weights, _ = full_state(first.model, first.optimizer, first.sharded)  # a sharded model's, gathered
    with gathered(first.scorer, first.sharded):
        prompts = [t.messages[1]["content"] for t in first.runner.collect()]
    result = {"initial": initial, "final": weights or first.model.state_dict(), "metrics": history,
              "grads": grads, "first_prompts": prompts}
    if resume_from:
        dist.barrier()  # rank 0 has written the checkpoint
        # validated at its last iteration (a resume may turn validation on): the ranks share the episodes out
        resumed = trainer(Path(out_dir) / "resumed", resume_from_checkpoint=resume_from, num_iterations=2,
                          eval_steps=1, eval_episodes=3)
        weights, optimizer = full_state(resumed.model, resumed.optimizer, resumed.sharded)
        # copies: a state_dict holds the live tensors, which the next step changes in place
        result["resumed_start"] = copy.deepcopy({"weights": weights or resumed.model.state_dict(),
                                                 "optimizer": optimizer})
        result["resumed_grads"] = record_gradients(resumed.optimizer)
        result["resumed_metrics"] = resumed.train()
    torch.save(result, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(out_dir, settings, data_parallel="ddp", resume_from=None):
    out_dir.mkdir(exist_ok=True)
    for attempt in range(2):  # the free port may be taken by another test before rank 0 binds it: once more
        try:
            mp.spawn(_worker, args=(2, _free_port(), str(out_dir), settings, data_parallel,
                                    resume_from and str(resume_from)), nprocs=2, join=True)
            break
        except mp.ProcessRaisedException as error:
            if attempt or "Address already in use" not in str(error):
                raise
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def ddp(tokenizer, tmp_path_factory):
    """DDP over two ranks, top-p 0.9: one iteration, then one more resumed from its checkpoint."""
    out = tmp_path_factory.mktemp("ddp")
    return out, _spawn(out, TOP_P, "ddp", resume_from=out / "run" / "checkpoint-1")


def _assert_in_sync(ranks, tmp_path):
    # Exactness is the point here: after the all-reduce both ranks hold the same gradient bits and run
    # the same optimizer code on them, so their weights must be bitwise equal.
    for key, value in ranks[0]["final"].items():
        assert torch.equal(value, ranks[1]["final"][key]), key
    assert any(not torch.equal(v, ranks[0]["initial"][k]) for k, v in ranks[0]["final"].items())
    assert ranks[0]["first_prompts"] != ranks[1]["first_prompts"]  # each rank rolls out its own groups
    m0, m1 = ranks[0]["metrics"][0], ranks[1]["metrics"][0]
    assert m0["filter/kept_groups"] == m1["filter/kept_groups"] >= 1  # one filter over all 4 groups
    assert m0["filter/rv_mean"] == m1["filter/rv_mean"]
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1  # rank 0 logs, once
    if "resumed_metrics" in ranks[0]:  # the ranks share the 3 held-out episodes out (2 and 1); both report all 3
        v0, v1 = ranks[0]["resumed_metrics"][-1], ranks[1]["resumed_metrics"][-1]
        assert v0["val/episodes"] == v1["val/episodes"] == 3 and v0["val/success"] == v1["val/success"]


def test_two_ranks_stay_in_sync(ddp):
    out, ranks = ddp
    _assert_in_sync(ranks, out)


def _probe(metrics):
    return {k: v for k, v in metrics.items() if k.startswith("grad_norm/")}


def test_the_gradient_probe_sees_every_ranks_gradient(ddp):
    # The probe's norms are of the all-rank gradient: the same on both ranks, over all kept samples.
    _, ranks = ddp
    first = [_probe(r["metrics"][0]) for r in ranks]
    assert first[0] == first[1] and first[0]["grad_norm/all/task"] > 0
    assert first[0]["grad_norm/all/group_count"] == ranks[0]["metrics"][0]["filter/kept_groups"]


def test_two_ranks_stay_in_sync_when_one_has_nothing_to_train(tokenizer, tmp_path):
    # top-k keeps one group of four: one rank runs idle passes to join the other's all-reduce
    _assert_in_sync(_spawn(tmp_path / "top_k", {"filter": "top_k", "filter_value": 0.25}), tmp_path / "top_k")


def test_fsdp_trains_like_ddp_and_resumes_from_its_checkpoint(ddp, tmp_path):
    """FSDP2 (fully_shard) over two ranks: each step gets DDP's gradients; its checkpoint holds the
    gathered weights in full; resumed from DDP's checkpoint, it starts from exactly that state and its
    next step gets DDP's gradients again. Gradients, not weights after AdamW, are compared: see
    tests/numerics.py."""
    ddp_dir, ddp_ranks = ddp
    shutil.copytree(ddp_dir / "run" / "checkpoint-1", tmp_path / "from-ddp")
    ranks = _spawn(tmp_path / "fsdp", TOP_P, "fsdp", resume_from=tmp_path / "from-ddp")
    fsdp, reference = ranks[0], ddp_ranks[0]
    assert fsdp["metrics"][0]["filter/kept_groups"] == reference["metrics"][0]["filter/kept_groups"]
    # validation with sharded weights, gathered for it on every rank (the ranks play 2 and 1 episodes)
    assert [r["resumed_metrics"][-1]["val/episodes"] for r in ranks] == [3, 3]
    assert ranks[0]["resumed_metrics"][-1]["val/success"] == ranks[1]["resumed_metrics"][-1]["val/success"]
    assert_same_gradients(reference["grads"], fsdp["grads"])
    probed, probed_ddp = _probe(fsdp["metrics"][0]), _probe(reference["metrics"][0])  # the sharded probe's too
    assert probed.keys() == probed_ddp.keys() and all(
        probed[k] == pytest.approx(probed_ddp[k], rel=1e-4, abs=1e-9) for k in probed)
    assert_same_gradients(ranks[1]["grads"], reference["grads"])  # every rank sees the whole gradient
    # the checkpoint is a copy of the gathered weights: exact
    saved = load_file(str(tmp_path / "fsdp" / "run" / "checkpoint-1" / "model.safetensors"))
    assert saved.keys() <= fsdp["final"].keys() and len(saved) >= len(fsdp["final"]) - 1  # a tied lm_head
    for key, value in saved.items():
        assert torch.equal(value, fsdp["final"][key]), key
    # resumed: the loaded (and for FSDP, cut into shards and gathered back) state is the checkpoint's
    checkpoint = torch.load(tmp_path / "from-ddp" / "trainer.pt", weights_only=False)["optimizer"]["state"]
    weights = load_file(str(tmp_path / "from-ddp" / "model.safetensors"))
    for start in (fsdp["resumed_start"], reference["resumed_start"]):
        for key, value in weights.items():
            assert torch.equal(value, start["weights"][key]), key
        assert start["optimizer"]["state"].keys() == checkpoint.keys()
        for i, entry in checkpoint.items():
            for name, value in entry.items():
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(start["optimizer"]["state"][i][name])), \
                    (i, name)
    assert_same_gradients(reference["resumed_grads"], fsdp["resumed_grads"])
