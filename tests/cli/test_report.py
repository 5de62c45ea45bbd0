"""``ragen view``: a self-contained HTML page of episodes that a real browser renders."""

import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig, save_jsonl
from ragen_envs.cli.report import png_data_uri, replay, write_report
from ragen_envs.cli import main
from conftest import DEFAULT, SMOKE

REPLIES = ["<think>I should move the box toward the target.</think><answer>Left || Down</answer>",
           "<think>I should move the box toward the target.</think><answer>Right || Up</answer>",
           "<think>down looks safe</think><answer>Down</answer>", "no idea"]


@pytest.fixture
def trajectories(scripted):
    config = RolloutConfig(n_groups=2, group_size=3, chat=ChatEnvConfig(max_turns=3), seed=4,
                           sampling=SamplingConfig(max_new_tokens=32),
                           env_kwargs={SMOKE: {"slip": 0.5, "render_mode": "rgb_array"},
                                       DEFAULT: {"render_mode": "rgb_array"}})
    runner = RolloutRunner({DEFAULT: 2, SMOKE: 2}, scripted(REPLIES), config)
    trajs = runner.collect()
    return trajs, [env.env.render() for env in runner._envs]


def test_a_replay_reproduces_every_episode(trajectories):
    trajs, final_frames = trajectories
    for t, final in zip(trajs, final_frames):
        frames = replay(t).frames
        assert frames is not None and len(frames) == t.num_turns + 1
        np.testing.assert_array_equal(frames[-1], final)  # slip included: the transition seed is kept


def test_a_replay_says_why_the_episode_ended(trajectories):
    import re

    import gymnasium as gym

    trajs, _ = trajectories
    reasons = {replay(t, images=False).ended for t in trajs}
    for t in trajs:
        ended = replay(t, images=False).ended
        if t.success:
            assert re.fullmatch(r"(solved|reached the goal at \(\d, \d\)) on turn \d", ended), ended
        elif "hole" in ended:  # FrozenLake's own words, at the cell the replayed env is in
            env = gym.make(t.env_id, **t.env_kwargs)
            assert re.fullmatch(r"fell into a hole at \(\d, \d\) on turn \d", ended)
            env.close()
        else:
            assert ended == f"not over after {t.num_turns} turns (the turn limit)"
    assert any("fell into a hole" in r for r in reasons) and any("not over" in r for r in reasons)


class Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [value for name, value in attrs if name in ("src", "href", "srcset", "data", "action")]


def test_the_report_is_self_contained_and_shows_each_turn(trajectories, tmp_path):
    trajs, _ = trajectories
    path = tmp_path / "out.jsonl"
    save_jsonl(trajs, path)
    report = write_report(path)
    assert report == tmp_path / "out.html"
    text = report.read_text()
    parser = Refs()
    parser.feed(text)
    assert parser.refs and all(ref.startswith(("data:", "#")) for ref in parser.refs)  # nothing outside
    assert "link" not in parser.tags and "script" not in parser.tags and "url(" not in text
    tiles = 6 + 7  # the legends: FrozenLake's and Sokoban's tiles
    assert parser.tags.count("img") == sum(t.num_turns + 1 for t in trajs) + tiles  # every turn's board, the end
    assert text.count("class=legend") == 2 and "<code>O</code> hole" in text and "<code>#</code> wall" in text
    assert text.count("<div class=ended>ended: ") == len(trajs)
    assert text.count('class="episode') == len(trajs)
    # The same reasoning in both Sokoban groups is flagged as a repeat across groups.
    assert 'class="repeat"' in text and "I should move the box toward the target." in text
    assert "12 episodes in 4 groups" in text
    assert write_report(path, tmp_path / "plain.html", images=False).read_text().count("<img") == 0


def test_png_data_uri_is_a_png():
    import base64
    import struct
    import zlib

    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    data = base64.b64decode(png_data_uri(image).split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (3, 2)
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4:idat])[0]
    rows = zlib.decompress(data[idat + 4:idat + 4 + length])
    assert rows == b"\x00" + image[0].tobytes() + b"\x00" + image[1].tobytes()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium here: `make test` installs Debian's chromium "
                                             "where it runs as root with apt-get")
def test_the_report_renders_in_a_headless_browser(trajectories, tmp_path):
    trajs, _ = trajectories
    save_jsonl(trajs, tmp_path / "out.jsonl")
    report = write_report(tmp_path / "out.jsonl")
    run = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*run, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<p id="summary">12 episodes in 4 groups' in dom.stdout
    assert dom.stdout.count("<img") == sum(t.num_turns + 1 for t in trajs) + 13
    assert painted(screenshot(run, report, tmp_path)) > 0.05
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body></body></html>")
    assert painted(screenshot(run, broken, tmp_path)) < 0.01  # the check fails on an empty page


def screenshot(run, page, tmp_path):
    shot = tmp_path / f"{page.stem}.png"
    done = subprocess.run([*run, "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return shot


def painted(png) -> float:
    """The share of a screenshot's pixels that differ from its most common colour (the background)."""
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
    _, counts = np.unique(pixels, axis=0, return_counts=True)
    return 1 - counts.max() / len(pixels)


def test_view_a_run_folder_from_the_cli(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert "no trajectory file or run folder" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    assert main(["view", str(tmp_path / "run")]) == 2
    assert "no rollouts/iteration-*.jsonl" in capsys.readouterr().err
    (tmp_path / "run" / "rollouts").mkdir()
    (tmp_path / "run" / "rollouts" / "iteration-3.jsonl").write_text('{"foo": 1}\n')
    assert main(["view", str(tmp_path / "run")]) == 2
    assert "does not hold saved trajectories" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "run"), "--iteration", "2"]) == 2
    assert "saved iterations: 3" in capsys.readouterr().err


def test_a_run_folder_gets_a_page_per_iteration_with_links_to_plot_and_config(trajectories, tmp_path):
    import json

    trajs, _ = trajectories
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    for it in (5, 10):
        save_jsonl(trajs, run / "rollouts" / f"iteration-{it}.jsonl")
    (run / "metrics.png").write_bytes(b"")
    (run / "config.json").write_text(json.dumps({"algorithm": "grpo", "env": {SMOKE: 2}, "model": None,
                                                 "rollout": {"n_groups": 2, "group_size": 3}, "filter": "top_p",
                                                 "filter_value": 0.9, "learning_rate": 1e-3}))
    report = write_report(run, images=False)
    latest, first = report.read_text(), (run / "report-iteration-5.html").read_text()
    assert latest == (run / "report-iteration-10.html").read_text()
    assert "<h1>run: iteration 10</h1>" in latest
    assert '<a href="report-iteration-5.html">5</a> <b>10</b>' in latest
    assert '<b>5</b> <a href="report-iteration-10.html">10</a>' in first
    assert '<a href="metrics.png">plot</a> · <a href="config.json">config</a>' in latest
    assert f"grpo on {SMOKE.split('/')[-1]} x2 · P x G = 2 x 3 · filter top_p 0.9 · lr 0.001 · model default" in latest
    parser = Refs()
    parser.feed(latest)
    assert all(ref.startswith(("data:", "#")) or (run / ref).is_file() for ref in parser.refs)
