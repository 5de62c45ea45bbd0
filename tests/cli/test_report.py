"""``ragen view``: a self-contained HTML page of episodes that a real browser renders."""

import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from ragen_envs.agent import ChatEnvConfig, RolloutConfig, RolloutRunner, SamplingConfig, save_jsonl
from ragen_envs.cli.report import png_data_uri, replay_frames, write_report
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
        frames = replay_frames(t)
        assert frames is not None and len(frames) == t.num_turns + 1
        np.testing.assert_array_equal(frames[-1], final)  # slip included: the transition seed is kept


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
    assert parser.refs and all(ref.startswith(("data:", "#")) for ref in parser.refs)
    assert "link" not in parser.tags and "script" not in parser.tags and "url(" not in text
    assert parser.tags.count("img") == sum(t.num_turns + 1 for t in trajs)  # every turn's board, and the end
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
    assert dom.stdout.count("<img") == sum(t.num_turns + 1 for t in trajs)
    shot = tmp_path / "shot.png"
    done = subprocess.run([*run, "--window-size=1200,900", f"--screenshot={shot}", report.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.stat().st_size > 10_000


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
