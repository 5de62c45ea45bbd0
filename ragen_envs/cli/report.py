"""``ragen view``: one self-contained HTML page of saved episodes, to see what the agent did.

Episodes are shown by prompt group (the G samples of a group share one initial state) and, per turn,
the board (an image for envs that render one, replayed from the episode's seeds and actions; the text
observation otherwise), the reasoning, the actions and the reward. A table of every first-turn
reasoning, group by group, comes first: under template collapse the same reasoning recurs across
groups whose boards differ. Styles and images are inline, so the file opens anywhere, offline.

A rollouts file is data, so opening one is as safe as opening an HTML page: every field is type-checked
on load (``load_jsonl``), every string is escaped into the page, and a replay rebuilds only catalogue envs
marked free of side effects (``EnvEntry.replayable``: not one that runs code, fetches or reads files),
with the catalogue's arguments. The file's own ``env_kwargs`` (which could point an env at a file or a
URL) are used only when the user says so (``ReplayArguments``: ``--trust-env-kwargs``, ``--env-kwargs``).
A replay that stops showing what the record shows is dropped: its boards would be another episode's.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragen_envs.agent import vision
from ragen_envs.agent.trajectory import Trajectory, iteration_of, load_jsonl, rollouts_path, saved_iterations
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
.ended { font-size: 12px; color: #555; margin-bottom: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 10px; font-size: 12px; margin: 4px 0 8px; }
.tile { display: flex; align-items: center; gap: 4px; } .tile img { margin: 0; width: 20px; height: 20px; }
"""


def png_data_uri(rgb: np.ndarray) -> str:
    """An (H, W, 3) uint8 image as a data: URI holding a PNG."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


@dataclass
class Replay:
    """An episode played again from its seeds and actions."""
    frames: list[np.ndarray] | None  # the board before each turn and after the last (None: no images)
    ended: str  # why the episode ended, in words
    env: Any  # the rebuilt env (its legend: SYMBOLS, ATLAS, instructions)


@dataclass
class ReplayArguments:
    """The arguments a replay makes an env with: its catalogue presets, then the file's own ``env_kwargs``
    only with ``trust_file`` (``ragen view --trust-env-kwargs``: a file's arguments can point an env at a
    file, a dataset or a URL), then ``given`` (``--env-kwargs``), by env id."""
    given: dict[str, dict] = field(default_factory=dict)
    trust_file: bool = False

    def of(self, trajectory: Trajectory) -> dict:
        """The arguments, over the catalogue's presets, that ``trajectory``'s replay uses."""
        return {**(trajectory.env_kwargs if self.trust_file else {}), **self.given.get(trajectory.env_id, {})}

    def left_out(self, trajectory: Trajectory) -> list[str]:
        """The names of the file's env arguments that its replay does not use (render_mode aside: a replay
        sets its own)."""
        used = self.of(trajectory)
        return sorted(k for k, v in trajectory.env_kwargs.items()
                      if k != "render_mode" and (k not in used or used[k] != v))


def by_env(given: dict, env_ids) -> dict[str, dict]:
    """``--env-kwargs``'s JSON keyed by env id: keyed already ({"ID": {...}}, each key a catalogue id), else
    flat ({"size": 4}), for every env of ``env_ids``."""
    from ragen_envs.registry import ENVIRONMENTS

    keyed = [key for key in given if key in ENVIRONMENTS or "/" in key]
    if not keyed:
        return {env_id: dict(given) for env_id in env_ids}
    if len(keyed) < len(given):
        raise ValueError(f"--env-kwargs mixes env ids and arguments: {sorted(given)}")
    for env_id, kwargs in given.items():
        if env_id not in ENVIRONMENTS:
            raise ValueError(f"--env-kwargs: {env_id} is not a catalogue id (`ragen list`)")
        if not isinstance(kwargs, dict):
            raise ValueError(f"--env-kwargs: the arguments of {env_id} must be a JSON object, got {kwargs!r}")
    return {env_id: dict(kwargs) for env_id, kwargs in given.items()}


def replayable(env_id: str) -> bool:
    """Whether the viewer may rebuild env ``env_id`` to redraw its boards: a catalogue id whose entry is
    free of side effects (``EnvEntry.replayable``). Never an env client (Ragen/Remote-v0), an id outside
    the catalogue, or an env that runs code, fetches or reads files."""
    from ragen_envs.registry import ENVIRONMENTS

    entry = ENVIRONMENTS.get(env_id)
    return entry is not None and entry.replayable


def replay(trajectory: Trajectory, images: bool = True, env_kwargs: dict | None = None) -> Replay | None:
    """The episode replayed (images when ``images`` and the env draws them) on its env made with the
    catalogue's presets and ``env_kwargs`` (never the file's own: a caller passes them where the user trusts
    the file, ``ReplayArguments``). None when the env is not ``replayable``, cannot be rebuilt here, or the
    replay stops showing what the record shows."""
    import gymnasium as gym

    from ragen_envs.registry import ENVIRONMENTS, load_class

    if not replayable(trajectory.env_id) or len(trajectory.messages) < 2:
        return None
    try:
        draws = images and "rgb_array" in load_class(ENVIRONMENTS[trajectory.env_id]).metadata.get("render_modes", [])
        env = gym.make(trajectory.env_id, **{**(env_kwargs or {}), "render_mode": "rgb_array" if draws else None})
        try:
            return _play(env, trajectory, draws)
        finally:
            env.close()
    except Exception:  # an env that cannot be rebuilt here (missing extra, changed kwargs): text only
        return None


def _play(env, trajectory: Trajectory, draws: bool) -> Replay | None:
    """Step ``env`` through the recorded actions, checking each observation against the record."""
    options = None if trajectory.transition_seed is None else {"transition_seed": trajectory.transition_seed}
    obs, _ = env.reset(seed=trajectory.seed, options=options)
    users = [m for m in trajectory.messages if m["role"] == "user"]
    # the first turn's prompt as shown (its image may have left the history since: max_images)
    first = {"role": "user", "content": [{"type": "image", "image": i} for i in trajectory.turns[0].images]} \
        if trajectory.turns and trajectory.turns[0].images else trajectory.messages[1]
    if not _shows(first, obs):
        return None
    frames = [env.render()] if draws else None
    ended = None
    for k, turn in enumerate(trajectory.turns, start=1):
        for action in turn.actions:
            obs, _, terminated, truncated, _ = env.step(action)
            if ended is None and terminated:
                ended = f"{env.unwrapped.end_reason() or 'the env ended it'} on turn {k}"
            elif ended is None and truncated:
                ended = f"the env's step limit (max_steps) on turn {k}"
        # other arguments than the run's (a slip) make another episode: no boards for it then
        if k < len(users) and not _shows(users[k], obs, dropped_ok=True):
            return None
        if frames is not None:
            frames.append(env.render())
    if ended is None:
        ended = "the prompt outgrew the context" if trajectory.context_overflow else \
            f"not over after {trajectory.num_turns} turns (the turn limit)"
    return Replay(frames, ended, env.unwrapped)


def _shows(message: dict, obs, dropped_ok: bool = False) -> bool:
    """The recorded message shows observation ``obs`` (its image, else its text); with ``dropped_ok``, a
    message whose image the history has since dropped (max_images) cannot tell, so passes."""
    if isinstance(obs, np.ndarray):
        shown = vision.message_images([message])
        return (dropped_ok and not shown) or any(np.array_equal(image, obs) for image in shown)
    return observation_text(obs) in vision.message_text(message["content"])


def replay_note(env_id: str, trajs: list[Trajectory], played: list[Replay | None],
                arguments: ReplayArguments) -> str:
    """A group's note on its boards: why there are none, or which of the file's env arguments they leave
    out (HTML)."""
    from ragen_envs.registry import ENVIRONMENTS

    e = html.escape
    if env_id not in ENVIRONMENTS:
        return f"<p class=note>not replayed: {e(env_id)} is not in the catalogue (the recorded text only)</p>"
    if not replayable(env_id):
        return (f"<p class=note>not replayed: {e(env_id)} runs code, fetches or reads files, which a saved file "
                "must not make the viewer do (the recorded text only)</p>")
    notes = []
    left_out = sorted({name for t in trajs for name in arguments.left_out(t)})
    if left_out:
        notes.append(f"replayed with the catalogue's arguments, without this file's env_kwargs "
                     f"{e(', '.join(left_out))} (ragen view --trust-env-kwargs uses them, for a file you trust)")
    missing = sum(p is None for p in played)
    if missing:
        notes.append(f"{missing} of {len(played)} episodes without boards: a replay here did not show what "
                     "was recorded")
    return "".join(f"<p class=note>{note}</p>" for note in notes)


def tile_image(tile: np.ndarray, symbol: str) -> str:
    return f'<img alt="{html.escape(symbol)}" src="{png_data_uri(tile)}">'


def legend(env, images: bool = True) -> str:
    """How to read an env's boards: each tile (as drawn, with ``images``), its symbol and (from the
    instructions) meaning."""
    e = html.escape
    instructions = getattr(env, "instructions", "") or ""
    line = next((x for x in instructions.splitlines() if x.startswith("Symbols:")), "")
    meaning = {part.strip()[:1]: part.strip()[1:].strip() for part in line[len("Symbols:"):].rstrip(".").split(",")}
    symbols, atlas = getattr(env, "SYMBOLS", ""), getattr(env, "ATLAS", None)
    if not symbols or atlas is None:
        return f"<p class=note>{e(line)}</p>" if line else ""
    cells = [f'<span class=tile>{tile_image(atlas[code], symbol) if images else ""}<code>{e(symbol)}</code> '
             f"{e(meaning.get(symbol, ''))}</span>" for code, symbol in enumerate(symbols)]
    return f"<div class=legend>{''.join(cells)}</div>"


def _user_messages(trajectory: Trajectory) -> list[str]:
    return [vision.message_text(m["content"], images=True) for m in trajectory.messages if m["role"] == "user"]


def _first_reasoning(trajectory: Trajectory) -> str:
    if not trajectory.turns:
        return ""
    return (trajectory.turns[0].reasoning or "").strip()


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def _episode(t: Trajectory, index: int, played: Replay | None) -> str:
    e = html.escape
    frames = played.frames if played else None
    users = _user_messages(t)
    status = "success" if t.success else ""
    outcome = "<span class=good>solved</span>" if t.success else "<span class=bad>not solved</span>"
    ended = f"<div class=ended>ended: {e(played.ended)}</div>" if played else ""
    out = [f'<div class="episode {status}"><h3>sample {index} &middot; return {t.episode_return:.2f} &middot; '
           f'{outcome}</h3>{ended}']
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
    out.append("</div>")
    return "".join(out)


def render(trajectories: list[Trajectory], title: str, images: bool = True, header: str = "",
           arguments: ReplayArguments | None = None) -> str:
    """The report's HTML; ``header``: HTML under the title (a run's links and iterations); ``arguments``:
    what the replays make their envs with (default: the catalogue's presets alone)."""
    e = html.escape
    arguments = arguments or ReplayArguments()
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
             f"<style>{STYLE}</style></head><body><h1>{e(title)}</h1>{header}",
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
        parts.append(f"<tr><td>{e(str(group))}</td><td>{e(env_id)}, {e(str(trajs[0].seed))}</td>"
                     f"<td>{''.join(cells)}</td></tr>")
    parts.append("</table>")
    legends = set()
    for (env_id, group), trajs in groups.items():
        played = [replay(t, images, arguments.of(t)) for t in trajs]
        parts.append(f'<h2 id="group-{e(env_id)}-{e(str(group))}">group {e(str(group))} &middot; {e(env_id)} '
                     f"&middot; seed {e(str(trajs[0].seed))}</h2>")
        parts.append(replay_note(env_id, trajs, played, arguments))
        env = next((p.env for p in played if p), None)
        if env_id not in legends and env is not None:  # once per env, above its first group
            legends.add(env_id)
            parts.append(legend(env, images))
        parts.append("<div class=group>")
        parts += [_episode(t, k, p) for k, (t, p) in enumerate(zip(trajs, played))]
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def rollout_file(source: Path, iteration: int | None = None) -> Path:
    """The JSONL file of ``source``: itself, or a run folder's latest (or given) rollouts."""
    if source.is_file():
        return source
    if not source.is_dir():
        raise FileNotFoundError(f"no trajectory file or run folder at {source}")
    saved = saved_iterations(source)
    if not saved:
        raise FileNotFoundError(f"{source} has no rollouts/iteration-*.jsonl (the trainer writes them every "
                                "save_rollouts_steps iterations)")
    if iteration is None:
        return saved[-1]
    path = rollouts_path(source, iteration)
    if not path.is_file():
        raise FileNotFoundError(f"{path} was not saved; saved iterations: "
                                f"{', '.join(str(iteration_of(p)) for p in saved)}")
    return path


def run_header(run: Path, path: Path, saved: list[Path]) -> str:
    """A run folder's links (plot, config) and settings, and the saved iterations to pick from."""
    from trainers.metrics import run_settings

    e = html.escape
    links = [f'<a href="{name}">{label}</a>' for name, label in (("metrics.png", "plot"), ("config.json", "config"))
             if (run / name).is_file()]
    settings = run_settings(run)
    pages = [f"<b>{it}</b>" if p == path else f'<a href="{page_name(it)}">{it}</a>'
             for p in saved for it in [iteration_of(p)]]
    return (f"<p id=run>{e(' · '.join(settings))}{' · ' if settings and links else ''}{' · '.join(links)}</p>"
            f"<p id=iterations>iteration: {' '.join(pages)}</p>")


DIAGNOSIS = "diagnosis.json"  # what `ragen diagnose` writes beside a run or file
MAX_DIAGNOSIS_BYTES = 64 << 20  # a bigger diagnosis.json is not ours: not read
DIAGNOSIS_COLUMNS = (("Retrieval-Acc", "mi/retrieval_acc"), ("chance", "mi/retrieval_chance"), ("MI-Est", "mi/mi_est"),
                     ("H(Z|X)", "mi/conditional_entropy"), ("scorer lag", "scorer_lag"))


def diagnosis_section(folder: Path, source: Path, step: int | None = None) -> str:
    """The template-collapse diagnosis of ``source`` (a run folder or trajectory file), when ``ragen diagnose``
    left one in ``folder`` (its diagnosis.json names ``source``): the verdict, the scorer, a row per step
    (``step``'s row marked) and a link to diagnosis.png. The file is data from disk: checked, escaped, and
    said to be unreadable rather than trusted."""
    e = html.escape
    path = folder / DIAGNOSIS
    if not path.is_file():
        return ""
    title = "<h2 id=diagnosis>Template-collapse diagnosis</h2>"
    try:
        if path.stat().st_size > MAX_DIAGNOSIS_BYTES:
            raise ValueError(f"over {MAX_DIAGNOSIS_BYTES >> 20} MiB")
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
            raise ValueError("not a diagnosis (no rows)")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{title}<p>{e(DIAGNOSIS)} is not readable: {e(str(error).splitlines()[0] if str(error) else '')}</p>"
    if Path(str(record.get("source", ""))).name != source.name:
        return ""  # a diagnosis of another file in the same folder

    def cell(value) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "-" if value is None else e(str(value))
        return str(value) if isinstance(value, int) else f"{value:.3f}"

    head = "".join(f"<th>{e(name)}</th>" for name, _ in (("step", ""), *DIAGNOSIS_COLUMNS, ("warning", "")))
    rows = []
    for row in (r for r in record["rows"] if isinstance(r, dict)):
        mark = ' class="repeat"' if step is not None and row.get("step") == step else ""
        cells = [cell(row.get("step")), *(cell(row.get(key)) for _, key in DIAGNOSIS_COLUMNS),
                 e(str(row.get("warning") or ""))]
        rows.append(f"<tr{mark}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    plot = ' &middot; <a href="diagnosis.png">plot</a>' if (folder / "diagnosis.png").is_file() else ""
    return (f"{title}<p id=verdict><b>{e(str(record.get('verdict', '')))}</b></p>"
            f"<p>scored by {e(str(record.get('model', '?')))}: {e(str(record.get('model_note', '')))}{plot}</p>"
            f"<table id=diagnosis-steps><tr>{head}</tr>{''.join(rows)}</table>")


def page_name(iteration: int) -> str:
    return f"report-iteration-{iteration}.html"


def write_report(source: str | Path, out: str | Path | None = None, iteration: int | None = None,
                 images: bool = True, env_kwargs: dict | None = None, trust_env_kwargs: bool = False) -> Path:
    """The HTML report of a trajectory file or run folder; default: beside it (``NAME.html`` for
    ``NAME.jsonl``). A run folder gets a page per saved iteration (``report-iteration-N.html``), each
    linking to the others, and ``report.html``: the latest (or ``iteration``'s) page; each shows the diagnosis
    ``ragen diagnose`` left beside the source (``diagnosis_section``). Boards are replayed
    with the catalogue's env arguments, then the file's own with ``trust_env_kwargs``, then ``env_kwargs``
    (flat, or keyed by env id)."""
    source = Path(source)
    path = rollout_file(source, iteration)

    def page(trajectories: list[Trajectory], title: str, header: str = "") -> str:
        given = by_env(env_kwargs or {}, {t.env_id for t in trajectories})
        return render(trajectories, title, images, header, ReplayArguments(given, trust_env_kwargs))

    if not source.is_dir():
        out = Path(out) if out else path.with_suffix(".html")
        write_page(out, page(load(path), path.name, diagnosis_section(path.parent, path)))
        return out
    saved = saved_iterations(source)
    for each in saved:
        text = page(load(each), f"{source.resolve().name}: iteration {iteration_of(each)}",
                    run_header(source, each, saved) + diagnosis_section(source, source, iteration_of(each)))
        write_page(source / page_name(iteration_of(each)), text)
    out = Path(out) if out else source / "report.html"
    write_page(out, (source / page_name(iteration_of(path))).read_text(encoding="utf-8"))
    return out


def write_page(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a new file: a link already there (a run folder someone sent, with
    ``report.html`` pointing at a file of yours) is replaced, never written through."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:  # "x": not even this temporary name may be a link
            f.write(text)
        os.replace(tmp, path)  # replaces the directory entry: a link's target is left alone
    finally:
        tmp.unlink(missing_ok=True)


def load(path: Path) -> list[Trajectory]:
    """The trajectories of ``path``; a ValueError (``TrajectoryFileError``) names the line and field of
    one that is wrong, and says so of a file without any."""
    trajectories = load_jsonl(path)  # every field type-checked
    if not trajectories:
        raise ValueError(f"{path} holds no trajectories")
    return trajectories
