"""``ragen view``: one self-contained HTML page of saved episodes, to see what the agent did.

Episodes are shown by prompt group (the G samples of a group share one initial state) and, per turn,
the board (an image for envs that render one, replayed from the episode's seeds and actions; the text
observation otherwise), the reasoning, the actions and the reward. A table of every first-turn
reasoning, group by group, comes first: under template collapse the same reasoning recurs across
groups whose boards differ. Styles and images are inline, so the file opens anywhere, offline.
"""

from __future__ import annotations

import base64
import html
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ragen_envs.agent.trajectory import Trajectory, load_jsonl
from ragen_envs.base import observation_text
from ragen_envs.rendering import png_bytes

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ccc; padding: 3px 6px; }
th { background: #eee; } td { vertical-align: top; max-width: 28em; }
.repeat { background: #fde2e2; }
.group { display: flex; gap: 12px; overflow-x: auto; padding-bottom: 6px; }
.episode { flex: 0 0 auto; width: 23em; background: #fff; border: 1px solid #ccc; border-radius: 6px; padding: 8px; }
.episode.success { border-color: #2a8a3a; } .episode h3 { font-size: 1em; margin: 0 0 6px; }
.turn { border-top: 1px dashed #bbb; padding: 6px 0; }
.reasoning { font-style: italic; background: #f3f0ff; padding: 4px; white-space: pre-wrap; }
.reply { white-space: pre-wrap; background: #f4f4f4; padding: 4px; font-family: monospace; font-size: 12px; }
pre { white-space: pre-wrap; font-size: 12px; background: #f4f4f4; padding: 4px; margin: 4px 0; }
img { image-rendering: pixelated; display: block; margin: 4px 0; }
.bad { color: #b00; } .good { color: #2a8a3a; } .note { color: #777; font-size: 12px; }
"""


def png_data_uri(rgb: np.ndarray) -> str:
    """An (H, W, 3) uint8 image as a data: URI holding a PNG."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


def replay_frames(trajectory: Trajectory) -> list[np.ndarray] | None:
    """The board before each turn and after the last, replayed from the episode's seeds and actions;
    None when the env draws no images or the replay does not match the recorded first observation."""
    import gymnasium as gym

    try:
        spec = gym.spec(trajectory.env_id)
    except gym.error.Error:
        return None
    kwargs = {**spec.kwargs, **trajectory.env_kwargs, "render_mode": "rgb_array"}
    try:
        env = gym.make(trajectory.env_id, **kwargs)
        if "rgb_array" not in env.metadata.get("render_modes", []):
            return None
        options = None if trajectory.transition_seed is None else {"transition_seed": trajectory.transition_seed}
        obs, _ = env.reset(seed=trajectory.seed, options=options)
        text = observation_text(obs)
        if len(trajectory.messages) < 2 or text not in trajectory.messages[1]["content"]:
            return None
        frames = [env.render()]
        for turn in trajectory.turns:
            for action in turn.actions:
                env.step(action)
            frames.append(env.render())
        env.close()
        return frames
    except Exception:  # an env that cannot be rebuilt here (missing extra, changed kwargs): text only
        return None


def _user_messages(trajectory: Trajectory) -> list[str]:
    return [m["content"] for m in trajectory.messages if m["role"] == "user"]


def _first_reasoning(trajectory: Trajectory) -> str:
    if not trajectory.turns:
        return ""
    return (trajectory.turns[0].reasoning or "").strip()


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def _episode(t: Trajectory, index: int, images: bool) -> str:
    e = html.escape
    frames = replay_frames(t) if images else None
    users = _user_messages(t)
    status = "success" if t.success else ""
    out = [f'<div class="episode {status}"><h3>sample {index} &middot; return {t.episode_return:.2f} &middot; '
           f'{"<span class=good>solved</span>" if t.success else "<span class=bad>not solved</span>"}</h3>']
    for k, turn in enumerate(t.turns):
        out.append(f'<div class="turn"><b>turn {k + 1}</b>')
        if frames is not None:
            out.append(f'<img alt="board before turn {k + 1}" src="{png_data_uri(frames[k])}">')
        if k < len(users):
            out.append(f"<details><summary>observation</summary><pre>{e(users[k])}</pre></details>")
        if turn.reasoning:
            out.append(f'<div class="reasoning">{e(turn.reasoning.strip())}</div>')
        # Without reasoning to show, the reply itself is what there is to read: shown open.
        out.append(f'<details{"" if turn.reasoning else " open"}><summary>reply ({len(turn.response_ids)} tokens, '
                   f'{e(turn.finish_reason)})</summary>'
                   f'<div class="reply">{e(turn.response)}</div></details>')
        actions = ", ".join(e(a) for a in turn.actions) or '<span class="bad">none</span>'
        fmt = "" if turn.format_ok else ' <span class="bad">(format invalid)</span>'
        out.append(f"<div>actions: {actions}{fmt} &middot; reward {turn.reward:.2f}</div></div>")
    if frames is not None and len(frames) > len(t.turns):
        out.append(f'<div class="turn"><b>end</b><img alt="final board" src="{png_data_uri(frames[-1])}"></div>')
    if t.context_overflow:
        out.append('<div class="note">ended: the prompt outgrew the context</div>')
    out.append("</div>")
    return "".join(out)


def render(trajectories: list[Trajectory], title: str, images: bool = True) -> str:
    """The report's HTML."""
    e = html.escape
    groups: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[(t.env_id, t.group)].append(t)
    n = len(trajectories)
    success = sum(t.success for t in trajectories) / n if n else 0.0
    fmt = sum(t.format_valid for t in trajectories) / n if n else 0.0
    # A first-turn reasoning met in more than one group: the text of template collapse.
    seen_in = defaultdict(set)
    for (env_id, group), trajs in groups.items():
        for t in trajs:
            if _first_reasoning(t):
                seen_in[_normalise(_first_reasoning(t))].add((env_id, group))
    repeated = {text for text, where in seen_in.items() if len(where) > 1}
    counts = Counter(_normalise(_first_reasoning(t)) for t in trajectories if _first_reasoning(t))
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{e(title)}</h1>",
             f"<p id=summary>{n} episodes in {len(groups)} groups &middot; success {success:.2f} &middot; "
             f"format valid {fmt:.2f} &middot; {len(counts)} distinct first-turn reasonings, "
             f"{len(repeated)} of them in more than one group (shaded)</p>",
             "<h2>First-turn reasoning by group</h2><table id=reasoning><tr><th>group</th><th>env, seed</th>"
             "<th>reasonings of its samples</th></tr>"]
    for (env_id, group), trajs in groups.items():
        cells = []
        for t in trajs:
            text = _first_reasoning(t)
            cls = ' class="repeat"' if _normalise(text) in repeated else ""
            cells.append(f"<div{cls}>{e(text) if text else '<i>(none)</i>'}</div>")
        parts.append(f"<tr><td>{group}</td><td>{e(env_id)}, {trajs[0].seed}</td><td>{''.join(cells)}</td></tr>")
    parts.append("</table>")
    for (env_id, group), trajs in groups.items():
        parts.append(f'<h2 id="group-{e(env_id)}-{group}">group {group} &middot; {e(env_id)} &middot; '
                     f"seed {trajs[0].seed}</h2><div class=group>")
        parts += [_episode(t, k, images) for k, t in enumerate(trajs)]
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def rollout_file(source: Path, iteration: int | None = None) -> Path:
    """The JSONL file of ``source``: itself, or a run folder's latest (or given) rollouts."""
    if source.is_file():
        return source
    folder = source / "rollouts"
    if not source.is_dir():
        raise FileNotFoundError(f"no trajectory file or run folder at {source}")
    saved = sorted(folder.glob("iteration-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])) \
        if folder.is_dir() else []
    if not saved:
        raise FileNotFoundError(f"{source} has no rollouts/iteration-*.jsonl (the trainer writes them every "
                                "save_rollouts_steps iterations)")
    if iteration is None:
        return saved[-1]
    path = folder / f"iteration-{iteration}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} was not saved; saved iterations: "
                                f"{', '.join(p.stem.split('-')[1] for p in saved)}")
    return path


def write_report(source: str | Path, out: str | Path | None = None, iteration: int | None = None,
                 images: bool = True) -> Path:
    """The HTML report of a trajectory file or run folder; default: beside it (``report.html`` in a
    run folder, ``NAME.html`` for ``NAME.jsonl``)."""
    source = Path(source)
    path = rollout_file(source, iteration)
    try:
        trajectories = load_jsonl(path)
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{path} does not hold saved trajectories ({error})") from None
    if not trajectories:
        raise ValueError(f"{path} holds no trajectories")
    title = f"{source.resolve().name}: {path.name}" if source.is_dir() else path.name
    out = Path(out) if out else source / "report.html" if source.is_dir() else path.with_suffix(".html")
    out.write_text(render(trajectories, title, images), encoding="utf-8")
    return out
