"""The collapse callback and the reward-variance filter inside a real GRPOTrainer (TRL), on CPU: a tiny
model, scripted completions (so each has a reasoning) through TRL's rollout_func."""

import pytest
import torch

pytest.importorskip("trl", reason="the 'trl' extra")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from ragen_envs.agent.backends.transformers import TransformersPolicy  # noqa: E402
from ragen_envs.diagnose import CollapseMonitor, FilterConfig  # noqa: E402
from ragen_envs.integrations.trl_diagnose import CollapseCallback, FilteredGRPOTrainer  # noqa: E402

MOVES = ["Left", "Right", "Up", "Down"]


def prompts(n=4):
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"Board {i}: the box is {MOVES[i % 4]}."}]}
                              for i in range(n)])


class Scripted:
    """TRL's rollout_func: per prompt (repeated per generation), a reply whose reasoning names its board."""

    def __init__(self, tokenizer):
        self.tokenizer, self.models, self.batches = tokenizer, [], []

    def __call__(self, batch, trainer):
        # the weights that sample this batch (a state dict: a deep copy of the model would keep the forward that
        # accelerate wrapped around the live one)
        self.models.append({n: p.detach().clone() for n, p in trainer.model.state_dict().items()})
        self.batches.append(([], []))  # (prompt texts, reasonings) as the model read and wrote them
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for k, messages in enumerate(batch):
            board = messages[-1]["content"].split(":")[0]
            move = MOVES[k % 4]
            text = f"<think>{board.lower()} wants {move.lower()}</think><answer>{move}</answer>"
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            self.batches[-1][0].append(prompt)
            self.batches[-1][1].append(f"{board.lower()} wants {move.lower()}")
            out["prompt_ids"].append(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
            out["completion_ids"].append(ids)
            out["logprobs"].append([-1.0] * len(ids))
        return out


def board_reward(completions, **kwargs):
    """Board 0's samples differ (1, 0, ...); every other board's are alike: zero reward variance."""
    return [float("board 0" in str(c) and k % 2 == 0) for k, c in enumerate(completions)]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def grpo_args(tmp_path, steps, **kw):
    return GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
                      max_steps=steps, learning_rate=1e-3, max_completion_length=64, logging_steps=1, report_to=[],
                      save_strategy="no", use_cpu=True, bf16=False, seed=0, disable_tqdm=True,
                      model_init_kwargs={"dtype": torch.float32}, **kw)


def test_the_callback_scores_each_due_generation_batch_once_with_the_weights_that_sampled_it(
        tmp_path, model_dir, tokenizer):
    collapse = CollapseCallback(every=2)
    rollout = Scripted(tokenizer)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=[board_reward, collapse.probe], args=grpo_args(tmp_path, 3),
                          train_dataset=prompts(), rollout_func=rollout, callbacks=[collapse])
    trainer.train()
    assert [h["step"] for h in collapse.history] == [0, 2] and len(rollout.models) == 3
    logged = [h for h in trainer.state.log_history if "collapse/mi/retrieval_acc" in h]
    assert len(logged) == 2 and all(0 <= h["collapse/mi/retrieval_acc"] <= 1 for h in logged)
    # the first scored batch, scored again offline by a copy of the weights that sampled it
    first = collapse.history[0]
    assert first["mi/retrieval_chance"] == pytest.approx(0.5)  # 2 prompts a batch
    sampler = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sampler.load_state_dict(rollout.models[0])
    monitor = CollapseMonitor(TransformersPolicy(sampler.eval(), tokenizer, device="cpu"), tokenizer)
    again = monitor.update(0, *rollout.batches[0])
    keys = ("mi/mi_est", "mi_code/mi_zscore_ema", "mi/retrieval_acc", "mi/conditional_entropy")
    assert {k: first[k] for k in keys} == pytest.approx({k: again[k] for k in keys}, rel=1e-5)


def test_the_probe_without_the_callback_says_what_is_missing(tmp_path, model_dir, tokenizer):
    collapse = CollapseCallback()
    trainer = GRPOTrainer(model=model_dir, reward_funcs=[board_reward, collapse.probe], args=grpo_args(tmp_path, 1),
                          train_dataset=prompts(), rollout_func=Scripted(tokenizer))
    with pytest.raises(ValueError, match="not in the trainer's callbacks"):
        trainer.train()


class Recording(FilteredGRPOTrainer):
    """Keeps what reaches the loss."""

    def _compute_loss(self, model, inputs):
        self.seen = getattr(self, "seen", []) + [{k: v for k, v in inputs.items() if torch.is_tensor(v)}]
        return super()._compute_loss(model, inputs)


def boards(tokenizer, inputs):
    return [tokenizer.decode(row).split("Board ")[1][0] for row in inputs["prompt_ids"]]


def test_unkept_groups_leave_the_loss_through_the_completion_mask(tmp_path, model_dir, tokenizer):
    trainer = Recording(model=model_dir, reward_funcs=board_reward, args=grpo_args(tmp_path, 2, loss_type="dapo"),
                        train_dataset=prompts(), rollout_func=Scripted(tokenizer))
    trainer.train()
    for inputs in trainer.seen:
        mask = inputs["completion_mask"]
        for board, row in zip(boards(tokenizer, inputs), mask):
            assert (row.sum() > 0) == (board == "0")  # only board 0's rewards vary: the rest is filtered out
        assert inputs["num_items_in_batch"] == mask.sum()
    assert [h["filter/kept_ratio"] for h in trainer.state.log_history if "filter/kept_ratio" in h] == [0.5, 0.0]


# kept ratio 0.5 (one of two groups); under grpo's row mean the masked rows already halve the kept ones' loss
@pytest.mark.parametrize("loss_type, scaling, factor", [
    ("dapo", "linear", 0.5), ("dapo", "sqrt", 0.5 ** 0.5), ("grpo", "none", 2.0), ("grpo", "linear", 1.0)])
def test_the_loss_scaling_is_ragens_whatever_the_loss_type_normalises(tmp_path, model_dir, tokenizer, loss_type,
                                                                      scaling, factor):
    runs = {}
    for name, (kind, how) in {"raw": ("dapo", "none"), "scaled": (loss_type, scaling)}.items():
        args = grpo_args(tmp_path / name, 1, loss_type="dapo")  # one batch; the scale reads the loss type below
        trainer = Recording(model=model_dir, reward_funcs=board_reward, args=args, train_dataset=prompts(),
                            rollout_func=Scripted(tokenizer), filter_loss_scaling=how)
        trainer.loss_type = kind
        trainer.train()
        runs[name] = trainer.seen[0]["advantages"]
    kept = runs["raw"] != 0
    assert kept.any()
    assert runs["scaled"][kept] == pytest.approx(runs["raw"][kept] * factor)


def test_a_zero_advantage_is_not_removal_the_entropy_term_acts_unless_filtered(tmp_path, model_dir, tokenizer):
    changed = {}
    for cls in (GRPOTrainer, FilteredGRPOTrainer):
        args = grpo_args(tmp_path / cls.__name__, 1, loss_type="dapo", entropy_coef=0.5)
        trainer = cls(model=model_dir, reward_funcs=constant_reward, args=args, train_dataset=prompts(),
                      rollout_func=Scripted(tokenizer))
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        trainer.train()
        changed[cls] = sum(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed[GRPOTrainer] > 0  # every advantage is 0, yet the entropy bonus moves the weights
    assert changed[FilteredGRPOTrainer] == 0  # no group varies: nothing is kept, nothing trains


def test_settings_the_filter_cannot_take_are_refused():
    with pytest.raises(ValueError, match="filter_loss_scaling"):
        FilteredGRPOTrainer(filter_loss_scaling="cubic")
    with pytest.raises(ValueError, match="reward metric"):
        FilteredGRPOTrainer(filtering=FilterConfig("top_p", 0.9, metric="entropy"))


def test_trls_completions_table_is_read_back_and_diagnosed(tmp_path, model_dir, tokenizer, tiny_policy):
    from ragen_envs.diagnose import read_trl
    from ragen_envs.diagnose.offline import diagnose_records

    rollout = Scripted(tokenizer)
    args = grpo_args(tmp_path, 2, log_completions=True)
    GRPOTrainer(model=model_dir, reward_funcs=[board_reward, constant_reward], args=args, train_dataset=prompts(),
                rollout_func=rollout).train()
    assert read_trl.matches(tmp_path / "out") and len(read_trl.files(tmp_path / "out")) == 2
    with pytest.raises(ValueError, match="chat template is needed"):
        read_trl.read(tmp_path / "out")
    records = read_trl.read(tmp_path / "out", tokenizer=tokenizer)
    assert sorted({r.step for r in records}) == [1, 2]
    first = [r for r in records if r.step == 1]
    assert [r.prompt for r in first] == rollout.batches[0][0]  # the text the model read, template re-applied
    assert [r.reasoning for r in first] == rollout.batches[0][1]
    board = [float("board 0" in r.reasoning and k % 2 == 0) for k, r in enumerate(first)]
    assert [r.reward for r in first] == [b + 1.0 for b in board]  # the reward functions' sum
    assert len({r.group for r in first}) == 2 and all(sum(r.group == g.group for g in first) == 2 for r in first)
    result = diagnose_records(tiny_policy, tokenizer, records)
    assert [row["step"] for row in result["rows"]] == [1, 2] and "mi/retrieval_acc" in result["rows"][0]
    only = read_trl.read(tmp_path / "out", tokenizer=tokenizer, reward="board_reward")
    assert [r.reward for r in only if r.step == 1] == board
