"""What images cost a rollout: one model, the same game seen as an image and as text.

The tiny vision-language model (``trainers.tiny_vlm``: Idefics3 at a few million random weights, built
here in seconds) plays P x G episodes of Sokoban twice, with the same seeds, turns and reply budget:
as ``Ragen/SokobanVisual-v0`` (the board an image each turn, ``--image-size`` pixels a side after the
processor's resize, (image_size / 16)^2 / 4 placeholder tokens an image) and as ``Ragen/Sokoban-v0``
(the board as text). The random model writes to the reply budget every turn, so both runs generate the
same number of tokens; the difference is the prompt: image placeholders against board text, and the
vision encoder run on each new image. Prints, per run, prompt tokens prefilled, seconds, generated
tokens/s and episodes/s, and the visual/text ratios; the median of ``--repeats`` runs.

    python benchmarks/speed/visual_rollout.py [--image-size 64] [--groups 8 --group-size 4 --max-turns 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig
from ragen_envs.agent.backends.transformers import TransformersPolicy
from ragen_envs.registry import ENVIRONMENTS


def run(env_id: str, policy, config: RolloutConfig, repeats: int) -> dict:
    results = []
    for _ in range(repeats):
        policy.prefilled_tokens = 0
        start = time.perf_counter()
        trajs = RolloutRunner(env_id, policy, config).collect()
        wall = time.perf_counter() - start
        tokens = sum(len(t.response_ids) for traj in trajs for t in traj.turns)
        results.append({"prefilled": policy.prefilled_tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                        "episodes_per_s": len(trajs) / wall,
                        "images": sum(len(traj.turns[-1].images) for traj in trajs if traj.turns)})
    return {k: float(np.median([r[k] for r in results])) for k in results[0]}


def main() -> None:
    from trainers.tiny_vlm import TinyVLMConfig, build

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image-size", type=int, default=64, help="pixels a side (multiple of 16; 64: 4 image tokens)")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    visual = next(e for e in ENVIRONMENTS.values() if e.visual and e.package == "sokoban")
    text = next(e for e in ENVIRONMENTS.values() if e.package == "sokoban" and not e.kwargs)
    with tempfile.TemporaryDirectory() as folder:
        policy = TransformersPolicy(str(build(folder, TinyVLMConfig(image_size=args.image_size))), device="cpu")
    config = RolloutConfig(n_groups=args.groups, group_size=args.group_size, seed=0,
                           chat=ChatEnvConfig(max_turns=args.max_turns),
                           sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0))
    rows = {name: run(entry.id, policy, config, args.repeats) for name, entry in (("text", text), ("visual", visual))}
    per_image = len(policy.encode_chat([{"role": "user", "content": [
        {"type": "image", "image": np.zeros((args.image_size, args.image_size, 3), np.uint8)}]}])) - len(
        policy.encode_chat([{"role": "user", "content": [{"type": "text", "text": ""}]}]))
    print(f"tiny Idefics3, {args.groups} x {args.group_size} episodes, {args.max_turns} turns x "
          f"{args.max_new_tokens} tokens; images {args.image_size} px, {per_image} tokens each with their markers; "
          f"median of {args.repeats}")
    print(f"{'run':>8} {'env':>24} {'images':>7} {'prefilled':>10} {'seconds':>8} {'tokens/s':>9} {'episodes/s':>10}")
    for name, entry in (("text", text), ("visual", visual)):
        r = rows[name]
        print(f"{name:>8} {entry.id:>24} {r['images']:7.0f} {r['prefilled']:10.0f} {r['wall_s']:8.2f} "
              f"{r['tokens_per_s']:9.1f} {r['episodes_per_s']:10.2f}")
    v, t = rows["visual"], rows["text"]
    print(f"{'visual/text':>33} {v['prefilled'] / t['prefilled']:10.2f} {v['wall_s'] / t['wall_s']:8.2f} "
          f"{v['tokens_per_s'] / t['tokens_per_s']:9.2f} {v['episodes_per_s'] / t['episodes_per_s']:10.2f}")


if __name__ == "__main__":
    main()
