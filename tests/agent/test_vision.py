"""Images through the agent loop: the visual envs' chats, a tiny vision-language model (Idefics3, random
weights) on the transformers backend, the trainer's masks and log-probs, MI with image prompts, the
OpenAI backend's data URIs."""

import base64
import json

import numpy as np
import pytest
import torch

from ragen_envs.agent import ChatEnv, ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig, prompts, vision
from ragen_envs.agent.backends.base import Generation, Policy, TokenPrompt
from ragen_envs.agent.backends.openai import OpenAIPolicy
from ragen_envs.agent.trajectory import load_jsonl, save_jsonl
from ragen_envs.registry import ENVIRONMENTS

from conftest import VISUAL_IDS
from tests.agent.test_backends import FakeServer

SOKOBAN = next(i for i in VISUAL_IDS if "Sokoban" in i)


def _config(turns=2, tokens=8, **chat):
    return RolloutConfig(n_groups=2, group_size=2, seed=3, chat=ChatEnvConfig(max_turns=turns, **chat),
                         env_kwargs=dict(ENVIRONMENTS[SOKOBAN].test_kwargs),
                         sampling=SamplingConfig(temperature=1.0, max_new_tokens=tokens, seed=1))


@pytest.mark.parametrize("env_id", VISUAL_IDS)
def test_a_visual_env_shows_the_board_as_an_image_with_a_caption(env_id):
    chat = ChatEnv(env_id, ChatEnvConfig(max_turns=3), **ENVIRONMENTS[env_id].test_kwargs)
    messages = chat.reset(seed=0)
    image, text = messages[1]["content"]
    board = chat.env.unwrapped.text_observation()
    assert image["type"] == "image" and image["image"].dtype == np.uint8 and image["image"].shape[2] == 3
    assert np.array_equal(image["image"], chat.env.unwrapped.image_observation())
    # the caption: turn, actions left, the format; the board only in the image
    assert text["text"].startswith("Turn 1:") and "actions left" in text["text"] and board not in text["text"]
    for action in chat.valid_actions:  # a move that does not end the episode
        chat.reset(seed=0)
        chat.step(f"<think>go</think><answer>{action}</answer>")
        if not chat.done:
            break
    image2, text2 = chat.messages[-1]["content"]
    assert "Reward:" in text2["text"] and "Turn 2:" in text2["text"] and len(chat.images) == 2


def test_max_images_keeps_only_the_latest():
    chat = ChatEnv(SOKOBAN, ChatEnvConfig(max_turns=4, max_images=1))
    chat.reset(seed=0)
    assert not chat.history_rewritten
    chat.step("<think>go</think><answer>Up</answer>")
    assert len(chat.images) == 1 and chat.history_rewritten
    assert chat.messages[1]["content"][0] == {"type": "text", "text": prompts.IMAGE_DROPPED}
    assert chat.messages[-1]["content"][0]["type"] == "image"


def test_a_text_model_on_a_visual_env_says_what_is_wrong(tiny_policy):
    with pytest.raises(ValueError, match="no image processor"):
        RolloutRunner(SOKOBAN, tiny_policy, _config()).collect()


def test_the_prompt_holds_the_images_placeholders_and_the_pixels_reach_the_model(tiny_vlm):
    ids = tiny_vlm.encode_chat([{"role": "user", "content": [
        {"type": "image", "image": np.zeros((32, 32, 3), np.uint8)}, {"type": "text", "text": "hi"}]}])
    assert tiny_vlm.image_tokens.count(ids) == 1 and tiny_vlm.image_tokens.image_id in ids
    black, white = np.zeros((32, 32, 3), np.uint8), np.full((32, 32, 3), 255, np.uint8)
    greedy = SamplingConfig(temperature=0, max_new_tokens=3)
    a, b, a2 = tiny_vlm.generate([TokenPrompt(ids, [black]), TokenPrompt(ids, [white]), TokenPrompt(ids, [black])],
                                 greedy)
    # the same ids with another image: another distribution (pixels were used, prompts not merged)
    assert a.logprobs == pytest.approx(a2.logprobs) and a.logprobs != pytest.approx(b.logprobs)
    alone = tiny_vlm.generate([TokenPrompt(ids, [white])], greedy)[0]
    assert alone.token_ids == b.token_ids and alone.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_scores_reuse_no_prefix_across_a_different_image(tiny_vlm):
    ids = tiny_vlm.encode_chat([{"role": "user", "content": [
        {"type": "image", "image": np.zeros((32, 32, 3), np.uint8)}, {"type": "text", "text": "hi"}]}])
    images = [np.zeros((32, 32, 3), np.uint8), np.full((32, 32, 3), 200, np.uint8)]
    cont = [[28, 29, 30], [31]]
    fresh = []
    for image in images:
        tiny_vlm.reset_cache()
        fresh.append(tiny_vlm.score(TokenPrompt(ids, [image]), cont))
    tiny_vlm.score(TokenPrompt(ids, [images[0]]), cont)
    reused = tiny_vlm.score(TokenPrompt(ids, [images[1]]), cont)  # right after the other image's prompt
    for x, y in zip(fresh[1], reused):
        np.testing.assert_allclose(x, y, atol=1e-5)
    assert not np.allclose(fresh[0][0], fresh[1][0])


def test_kept_caches_give_the_same_visual_episodes(tiny_vlm):
    runs = []
    for reuse in (False, True):
        tiny_vlm.reuse_cache = reuse
        runs.append(RolloutRunner(SOKOBAN, tiny_vlm, _config(turns=3)).collect())
    for a, b in zip(*runs):
        assert a.num_turns == b.num_turns == 3
        for x, y in zip(a.turns, b.turns):
            assert x.prompt_ids == y.prompt_ids and x.response_ids == y.response_ids
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)


def test_max_images_in_a_rollout_prompts_only_the_latest_image(tiny_vlm):
    trajs = RolloutRunner(SOKOBAN, tiny_vlm, _config(turns=3, max_images=1)).collect()
    for t in trajs:
        for turn in t.turns:
            assert len(turn.images) == 1 == tiny_vlm.image_tokens.count(turn.prompt_ids)


def test_trainer_log_probs_and_masks_match_the_rollout(tiny_vlm):
    """Teacher forcing the stored sequences, images included, reproduces each sampled token's log-prob;
    the mask holds exactly the generated tokens (never an image token)."""
    from trainers.batch import collate, trajectory_samples
    from trainers.scoring import TokenScorer

    trajs = RolloutRunner(SOKOBAN, tiny_vlm, _config(turns=2, tokens=6)).collect()
    samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, i)]
    assert all(len(s.images) == t.num_turns for s, t in zip(samples, trajs))  # one segment each, every image
    batch = collate(samples, tiny_vlm.tokenizer.pad_token_id)
    pixels = vision.pixel_inputs(tiny_vlm.processor, batch.images)
    logp, _, _ = TokenScorer(tiny_vlm.model)(batch.ids, batch.attention, batch.mask.bool(), batch.targets, **pixels)
    image_positions = torch.isin(batch.targets, torch.tensor(sorted(tiny_vlm.image_tokens.ids)))
    assert image_positions.any() and not (batch.mask.bool() & image_positions).any()
    for row, t in enumerate(trajs):
        expected = [lp for turn in t.turns for lp in turn.logprobs]
        got = logp[row][batch.mask[row].bool()].tolist()
        assert len(got) == sum(len(turn.response_ids) for turn in t.turns)
        np.testing.assert_allclose(got, expected, atol=1e-4)
    # without the pixels the same sequences score differently: the images count
    blind = TokenScorer(tiny_vlm.model)(batch.ids, batch.attention, batch.mask.bool(), batch.targets)[0]
    assert not torch.allclose(blind[batch.mask.bool()], logp[batch.mask.bool()], atol=1e-3)


def test_trajectories_keep_their_images_in_jsonl(tiny_vlm, tmp_path):
    trajs = RolloutRunner(SOKOBAN, tiny_vlm, _config(turns=2, tokens=4)).collect()
    save_jsonl(trajs, tmp_path / "t.jsonl")
    line = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    # each image once, under its digest, which the turns and messages name
    assert len(line["images"]) == len(set(vision.digests(trajs[0].turns[-1].images)))
    assert all(uri.startswith(vision.DATA_URI) for uri in line["images"].values())
    assert line["turns"][-1]["images"] == list(vision.digests(trajs[0].turns[-1].images))
    back = load_jsonl(tmp_path / "t.jsonl")
    for a, b in zip(trajs, back):
        for x, y in zip(a.turns, b.turns):
            assert len(x.images) == len(y.images) and all(np.array_equal(i, j) for i, j in zip(x.images, y.images))
        assert np.array_equal(vision.message_images(a.messages)[0], vision.message_images(b.messages)[0])


class VisualReplies(Policy):
    """Rollout policy for the trainer test: replies that differ within a group (so advantages do), with
    the vision-language model's processor, so prompts are encoded as the model reads them."""

    REPLIES = ["<think>push it</think><answer>Right</answer>", "<think>down</think><answer>Down || Left</answer>",
               "<think>up</think><answer>Up</answer>", "no idea"]

    def __init__(self, policy):
        self.tokenizer, self.processor, self.max_context = policy.tokenizer, policy.processor, 4096

    def generate(self, prompts, sampling):
        out = []
        for i, prompt in enumerate(prompts):
            text = self.REPLIES[(sampling.seed + i) % len(self.REPLIES)]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(text, self.prompt_ids(prompt), ids, [-1.0] * len(ids), "stop"))
        return out

    def score(self, prompt_ids, continuations):
        raise NotImplementedError


def test_one_iteration_trains_the_vlm_vision_tower_included(tiny_vlm_path, tiny_vlm, tmp_path):
    from trainers import Trainer, TrainerConfig

    cfg = TrainerConfig(num_iterations=1, learning_rate=1e-2, output_dir=str(tmp_path / "run"), plot=False,
                        mixed_precision="no", micro_batch_size=4, rollout=_config(turns=2, tokens=8))
    trainer = Trainer(str(tiny_vlm_path), SOKOBAN, cfg, rollout_policy=VisualReplies(tiny_vlm))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    metrics = trainer.train()[0]
    changed = {k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])}
    assert any("vision_model" in k for k in changed) and any("text_model" in k for k in changed)
    # MI scored every reasoning under other episodes' image prompts (two groups: chance 1/2)
    assert metrics["mi/retrieval_chance"] == 0.5 and np.isfinite(metrics["mi/mi_est"])


def test_openai_backend_sends_each_image_as_a_data_uri(tiny_vlm_path):
    reply = {"choices": [{"message": {"content": "go</think><answer>Up</answer>"}, "finish_reason": "stop",
                          "logprobs": None}]}
    server = FakeServer([(200, reply, 0)])
    try:
        policy = OpenAIPolicy(server.url, "m", tokenizer=str(tiny_vlm_path), backoff=0.01)
        trajs = RolloutRunner(SOKOBAN, policy, _config(turns=2)).collect()
    finally:
        server.close()
    assert all(t.num_turns == 2 for t in trajs)
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["continue_final_message"] is True
    assert body["messages"][-1] == {"role": "assistant", "content": "<think>"}
    parts = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    base64.b64decode(urls[0].split(",", 1)[1], validate=True)
    # requests run concurrently, so the last one may be any episode's second turn: each episode's two boards
    # went out as one request's two images
    sent = [[vision.from_data_uri(p["image_url"]["url"]) for m in b["messages"] if isinstance(m["content"], list)
             for p in m["content"] if p["type"] == "image_url"] for _, b in server.requests]
    for t in trajs:
        shown = vision.message_images(t.messages)
        assert any(len(s) == 2 and all(np.array_equal(a, b) for a, b in zip(s, shown)) for s in sent)
    # the stored prompt is the model's own encoding, placeholders included
    assert policy.processor is not None and trajs[-1].turns[-1].prompt_ids and \
        vision.ImageTokens(policy.processor).count(trajs[-1].turns[-1].prompt_ids) == 2


def test_ragen_eval_plays_a_visual_env_on_both_backends(tiny_vlm_path, tmp_path, capsys):
    from ragen_envs.cli import main

    model = str(tiny_vlm_path)
    common = ["eval", "--env", SOKOBAN, "--groups", "2", "--group-size", "1", "--max-turns", "2",
              "--max-new-tokens", "6"]
    assert main([*common, "--model", model, "--save", str(tmp_path / "t.jsonl")]) == 0
    assert all(len(t.turns[-1].images) == t.num_turns for t in load_jsonl(tmp_path / "t.jsonl"))
    reply = {"choices": [{"message": {"content": "up</think><answer>Up</answer>"}, "finish_reason": "stop"}]}
    server = FakeServer([(200, reply, 0)])
    try:
        assert main([*common, "--backend", "openai", "--base-url", server.url, "--model", "served",
                     "--tokenizer", model, "--save", str(tmp_path / "o.jsonl")]) == 0
    finally:
        server.close()
    assert len(server.requests) == 4 and all(body["model"] == "served" for _, body in server.requests)
    played = load_jsonl(tmp_path / "o.jsonl")
    assert all(t.turns[0].actions == ["Up"] for t in played)
    assert SOKOBAN in capsys.readouterr().out


def test_a_model_with_multimodal_rotary_positions_is_refused_on_transformers(tokenizer):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    from ragen_envs.agent.backends.transformers import TransformersPolicy

    config = Qwen2VLConfig(text_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                                        "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]}},
                           vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2})
    with pytest.raises(ValueError, match="M-RoPE.*--backend openai"):
        TransformersPolicy(Qwen2VLForConditionalGeneration(config), tokenizer, device="cpu")


def test_mi_scores_each_reasoning_under_each_image_prompt(tiny_vlm):
    """Prompts alike in ids but showing different boards are different X: two columns, not one."""
    from ragen_envs.diagnose import cross_loglik

    ids = tiny_vlm.encode_chat([{"role": "user", "content": [
        {"type": "image", "image": np.zeros((32, 32, 3), np.uint8)}, {"type": "text", "text": "hi"}]}])
    boards = [np.zeros((32, 32, 3), np.uint8), np.full((32, 32, 3), 255, np.uint8)]
    reasonings = [[[28, 29, 30]], [[31, 32]]]
    loglik, lengths = cross_loglik(tiny_vlm, [TokenPrompt(ids, [b]) for b in boards], reasonings)
    assert loglik.shape == (2, 1, 2) and lengths.tolist() == [[3], [2]]
    for i, z in enumerate(reasonings):
        for j, board in enumerate(boards):  # each entry is the reasoning's log-prob under that prompt
            tiny_vlm.reset_cache()
            expected = tiny_vlm.score(TokenPrompt(ids, [board]), z)[0].sum()
            assert loglik[i, 0, j] == pytest.approx(expected, abs=1e-4)
    assert loglik[0, 0, 0] != pytest.approx(loglik[0, 0, 1], abs=1e-4)


def test_ragen_train_runs_an_iteration_on_the_tiny_vlm(tiny_vlm_path, tmp_path):
    from ragen_envs.cli import main

    run = tmp_path / "run"
    assert main(["train", "--env", SOKOBAN, "--model", str(tiny_vlm_path), "--iterations", "1", "--groups", "2",
                 "--group-size", "2", "--max-turns", "2", "--max-new-tokens", "6", "--max-images", "1",
                 "--output-dir", str(run), "--mixed-precision", "no", "--no-plot"]) == 0
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert record["iteration"] == 1 and record["rollout/episodes"] == 4
    # the checkpoint is a vision-language model folder again: it plays the visual env
    assert main(["eval", "--env", SOKOBAN, "--model", str(run / "checkpoint-1"), "--groups", "1", "--group-size",
                 "1", "--max-turns", "1", "--max-new-tokens", "4"]) == 0


def test_a_placeholder_token_is_never_sampled_and_the_trainer_masks_it_alike(tiny_vlm):
    """A model that favours <image> would write a "picture" with no pixels into the next prompt."""
    from trainers.batch import collate, trajectory_samples
    from trainers.scoring import TokenScorer

    image_id = tiny_vlm.image_tokens.image_id
    hook = tiny_vlm.model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: out.index_add(-1, torch.tensor([image_id]), torch.full((*out.shape[:-1], 1), 50.0)))
    try:
        trajs = RolloutRunner(SOKOBAN, tiny_vlm, _config(turns=2, tokens=6)).collect()
        generated = {i for t in trajs for turn in t.turns for i in turn.response_ids}
        assert not generated & tiny_vlm.image_tokens.ids
        samples = [s for i, t in enumerate(trajs) for s in trajectory_samples(t, i)]
        batch = collate(samples, tiny_vlm.tokenizer.pad_token_id)
        scorer = TokenScorer(tiny_vlm.model, banned=tiny_vlm.banned)
        logp = scorer(batch.ids, batch.attention, batch.mask.bool(), batch.targets,
                      **vision.pixel_inputs(tiny_vlm.processor, batch.images))[0]
        for row, t in enumerate(trajs):
            np.testing.assert_allclose(logp[row][batch.mask[row].bool()].tolist(),
                                       [lp for turn in t.turns for lp in turn.logprobs], atol=1e-4)
    finally:
        hook.remove()


def test_text_spelling_a_placeholder_is_not_read_as_an_image(tiny_vlm):
    board = np.zeros((32, 32, 3), np.uint8)
    messages = [{"role": "user", "content": [{"type": "image", "image": board}, {"type": "text", "text": "go"}]},
                {"role": "assistant", "content": "<image><global-img> Up"},
                {"role": "user", "content": "the <image> token, typed"}]
    ids = tiny_vlm.encode_chat(messages)
    assert tiny_vlm.image_tokens.count(ids) == 1 and ids.count(tiny_vlm.image_tokens.image_id) == \
        tiny_vlm.encode_chat(messages[:1]).count(tiny_vlm.image_tokens.image_id)


def test_what_cannot_take_images_says_so(tiny_vlm_path, tokenizer, tiny_model, tmp_path):
    from ragen_envs.agent.default_model import default_model_path, is_vision_model
    from trainers.config import SFTConfig
    from trainers.sft import warm_start

    assert is_vision_model(tiny_vlm_path) and not is_vision_model(default_model_path())
    with pytest.raises(ValueError, match="SFT warm starts are made on text envs"):
        warm_start(tiny_model, [SOKOBAN], SFTConfig(output_dir=str(tmp_path / "w")), tokenizer=tokenizer)
    with pytest.raises(ValueError, match="no image processor here"):  # an OpenAI client without the processor
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", tokenizer=tokenizer).encode_chat(
            [{"role": "user", "content": [{"type": "image", "image": np.zeros((8, 8, 3), np.uint8)}]}])
    with pytest.raises(ValueError, match="cannot be scored there"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", tokenizer=str(tiny_vlm_path)).score(
            TokenPrompt([1, 2], [np.zeros((8, 8, 3), np.uint8)]), [[3]])
