"""The env server (`ragen serve`) and its client `RemoteEnv`: the same episodes as local envs, OpenEnv's
own client against it, and clear errors (never a crash) on bad input."""

import asyncio
import json
import threading
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from ragen_envs.agent import ChatEnv, RolloutConfig, RolloutRunner
from ragen_envs.registry import REMOTE_ID, ids_in
from ragen_envs.remote import RemoteEnv, RemoteEnvError
from ragen_envs.remote.server import ServerConfig
from ragen_envs.remote.server.app import create_app, server_config
from ragen_envs.remote.server.sessions import ServeError, Sessions
from conftest import DEFAULT, OPEN_TEXT, SMOKE, SMOKE_KWARGS, USABLE_IDS, ScriptedPolicy

SERVED = USABLE_IDS  # every catalogue env this machine can make


class LiveServer:
    """uvicorn on 127.0.0.1 at a free port, in a thread, for clients that open their own sockets."""

    def __init__(self, config: ServerConfig):
        self.server = uvicorn.Server(server_config(config, host="127.0.0.1", port=0))  # ragen serve's settings
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60  # a bound for a loaded machine, not a timing claim
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.server.started, "uvicorn did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def live():
    with LiveServer(ServerConfig(envs=[SMOKE, DEFAULT], oracle=True)) as server:
        yield server


class LocalClient(TestClient):
    """FastAPI's TestClient at localhost, WebSockets too: its own host, "testserver", is no name the
    server answers to."""

    def __init__(self, app):
        super().__init__(app, base_url="http://localhost")

    def websocket_connect(self, url: str, *args, **kwargs):
        return super().websocket_connect("ws://localhost" + url, *args, **kwargs)


def app_client(**overrides) -> TestClient:
    return LocalClient(create_app(ServerConfig(**{"envs": [SMOKE], "oracle": True, **overrides})))


def play(env, seed: int, steps: int = 12, shown=None) -> list:
    """An episode of oracle moves with an invalid action and a repeat of the last seen action mixed in;
    ``shown``: the env's ``agent_info``, for a local env played as a server's client sees it."""
    shown = shown or (lambda info: info)
    obs, info = env.reset(seed=seed)
    record = [obs, shown(info)]
    for k in range(steps):
        action = "not an action" if k == 2 else env.get_wrapper_attr("oracle_action")() or "1"
        obs, reward, terminated, truncated, info = env.step(action)
        record += [action, obs, reward, terminated, truncated, shown(info)]
        if terminated or truncated:
            break
    return record


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("env_id", SERVED)
def test_a_remote_env_plays_the_local_episode(env_id):
    with app_client(envs=[env_id]) as client:
        remote = RemoteEnv(client=client)
        local = gym.make(env_id)
        assert remote.observation_space == local.observation_space
        assert remote.valid_actions == local.get_wrapper_attr("valid_actions")
        for seed in (0, 7):
            assert same(play(remote, seed), play(local, seed, shown=local.unwrapped.agent_info))
        assert remote.oracle_reasoning() == local.get_wrapper_attr("oracle_reasoning")()
        parse = local.get_wrapper_attr("parse_action")
        assert (remote.parse_action("nonsense!") is None) == (parse("nonsense!") is None)
        remote.close()


def test_images_cross_the_wire_exactly():
    with app_client(envs=[DEFAULT], env_kwargs={DEFAULT: {"observation_type": "both"}}) as c:
        remote = RemoteEnv(client=c, render_mode="rgb_array")
        local = gym.make(DEFAULT, observation_type="both", render_mode="rgb_array")
        (obs, _), (expected, _) = remote.reset(seed=4), local.reset(seed=4)
        assert obs["image"].dtype == np.uint8 and np.array_equal(obs["image"], expected["image"])
        assert remote.observation_space.contains(obs)
        assert np.array_equal(remote.render(), local.render())


REPLIES = ["<think>go</think><answer>Down</answer>", "<think>hm</think><answer>Left || Up</answer>",
           "no format", "<think>x</think><answer>Right</answer>"]


def test_the_runner_and_chat_env_take_a_remote_env_by_id(live, tokenizer):
    # The same grouped rollouts, with the same scripted replies, from local and remote envs.
    kwargs = {"url": live.url, "env_id": SMOKE}
    config = RolloutConfig(n_groups=2, group_size=2, seed=5)
    remote = RolloutRunner(REMOTE_ID, ScriptedPolicy(tokenizer, REPLIES), replace(config, env_kwargs=kwargs))
    local = RolloutRunner(SMOKE, ScriptedPolicy(tokenizer, REPLIES), config)
    got, expected = remote.collect(), local.collect()
    assert [t.messages for t in got] == [t.messages for t in expected]
    assert [[turn.reward for turn in t.turns] for t in got] == [[turn.reward for turn in t.turns] for t in expected]
    assert [t.success for t in got] == [t.success for t in expected]
    assert any(turn.reward != 0 for t in got for turn in t.turns)  # the episodes did something
    chat = ChatEnv(REMOTE_ID, **kwargs)
    assert chat.instructions == ChatEnv(SMOKE).instructions
    chat.env.close()


def test_an_eval_table_names_the_served_env_not_the_client(live, tokenizer):
    from ragen_envs.cli.commands import per_env_metrics

    config = RolloutConfig(n_groups=1, group_size=2, seed=5, env_kwargs={"url": live.url, "env_id": DEFAULT})
    runner = RolloutRunner(REMOTE_ID, ScriptedPolicy(tokenizer, REPLIES), config)
    assert runner.labels() == {REMOTE_ID: f"{DEFAULT} (via {REMOTE_ID})"}
    assert list(per_env_metrics(runner.collect(), config.chat, runner.labels())) == [f"{DEFAULT} (via {REMOTE_ID})"]


def test_openenvs_own_client_drives_the_server(live):
    from openenv.core.generic_client import GenericEnvClient

    local = gym.make(DEFAULT)
    with GenericEnvClient(base_url=f"{live.url}/envs/{DEFAULT}").sync() as env:
        result = env.reset(seed=11)
        obs, _ = local.reset(seed=11)
        assert result.observation["text"] == obs and result.done is False
        for _ in range(30):
            action = local.get_wrapper_attr("oracle_action")()
            result = env.step({"action": action})
            obs, reward, terminated, truncated, info = local.step(action)
            assert (result.observation["text"], result.reward, result.done) == (obs, reward, terminated or truncated)
            assert result.observation["info"]["success"] == info["success"]
            if result.done:
                break
        assert result.done and result.observation["info"]["success"]
        assert env.state()["step_count"] >= 1
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"move": "Up"})  # an error reply; the session goes on
        assert env.step({"action": "Up"}).done  # terminal states are absorbing
    with GenericEnvClient(base_url=live.url).sync() as env:  # /ws serves the first env
        assert env.reset(seed=1).observation["text"] == gym.make(SMOKE).reset(seed=1)[0]
        assert env.state()["env_id"] == SMOKE


def test_many_concurrent_sessions_keep_their_own_episodes(live):
    def episode(seed):
        env = gym.make(REMOTE_ID, url=live.url, env_id=SMOKE)
        try:
            return play(env, seed)
        finally:
            env.close()

    with ThreadPoolExecutor(16) as pool:
        remote = list(pool.map(episode, range(32)))
    local = gym.make(SMOKE)
    assert all(same(r, play(local, seed, shown=local.unwrapped.agent_info)) for seed, r in enumerate(remote))


def error(response):
    return response.status_code, response.json()["error"]["code"]


def test_bad_requests_get_clear_4xx_errors_and_the_server_lives_on():
    with app_client(max_sessions=2, max_request_bytes=4096) as c:
        sid = c.post("/v1/sessions").json()["session_id"]
        assert error(c.post(f"/v1/sessions/{sid}/step", json={"action": "Up"})) == (409, "bad_state")
        assert error(c.post("/v1/sessions/nope/reset", json={})) == (404, "unknown_session")
        assert error(c.post("/v1/sessions", json={"env_id": "Ragen/Nope-v0"})) == (404, "unknown_env")
        bad_json = c.post(f"/v1/sessions/{sid}/reset", content=b'{"seed": ',
                          headers={"content-type": "application/json"})
        assert error(bad_json) == (400, "malformed_json")
        for seed in (-1, "3", 1.5, True):
            response = c.post(f"/v1/sessions/{sid}/reset", json={"seed": seed})
            assert error(response) == (422, "invalid_request") and "seed" in response.json()["error"]["message"]
        assert error(c.post(f"/v1/sessions/{sid}/reset", json={"options": {"transition_seed": -2}})) \
            == (400, "bad_value")
        assert error(c.post(f"/v1/sessions/{sid}/reset", json={"sed": 1})) == (422, "invalid_request")
        assert error(c.post(f"/v1/sessions/{sid}/call/close", json={})) == (404, "unknown_method")
        assert error(c.post(f"/v1/sessions/{sid}/step", json={"action": "x" * 5000})) == (413, "too_large")
        c.post(f"/v1/sessions/{sid}/reset", json={"seed": 1})
        step = c.post(f"/v1/sessions/{sid}/step", json={"action": 3}).json()  # not a string: an invalid action
        assert step["info"]["action_is_valid"] is False and step["reward"] == 0.0
        assert c.get(f"/v1/sessions/{sid}").json()["step_count"] == 1
        c.post("/v1/sessions")
        capacity = c.post("/v1/sessions")
        assert error(capacity) == (503, "capacity") and "maximum of 2" in capacity.json()["error"]["message"]
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert error(c.delete(f"/v1/sessions/{sid}")) == (404, "unknown_session")
        assert c.post("/v1/sessions").status_code == 201  # the freed slot is usable
        assert c.get("/health").json()["sessions"] == 2


def test_openenv_messages_that_are_wrong_get_error_replies():
    with app_client() as c, c.websocket_connect("/ws") as ws:
        for raw, code in [("{", "INVALID_JSON"), ('{"type": "jump"}', "UNKNOWN_TYPE"), ("[1]", "VALIDATION_ERROR"),
                          ('{"type": "step", "data": {"action": "Up"}}', "EXECUTION_ERROR"),
                          ('{"type": "reset", "data": {"seed": -4}}', "VALIDATION_ERROR")]:
            ws.send_text(raw)
            reply = json.loads(ws.receive_text())
            assert reply["type"] == "error" and reply["data"]["code"] == code, raw
        ws.send_text(json.dumps({"type": "reset", "data": {"seed": 2}}))
        assert json.loads(ws.receive_text())["type"] == "observation"


def test_a_step_past_the_end_pays_nothing_and_says_so_on_every_route():
    # A question answered with "" until truncated, then rightly: 0 and "the episode is over", on each route.
    local = gym.make(OPEN_TEXT)
    local.reset(seed=3)
    answer, max_steps = local.get_wrapper_attr("oracle_action")(), local.get_wrapper_attr("max_steps")
    assert local.step(answer)[1] > 0  # the answer pays in a running episode
    with app_client(envs=[OPEN_TEXT]) as c:
        sid = c.post("/v1/sessions").json()["session_id"]
        c.post(f"/v1/sessions/{sid}/reset", json={"seed": 3})
        assert c.post(f"/v1/sessions/{sid}/call/oracle_action", json={}).json()["result"] == answer
        actions = [""] * max_steps + [answer]
        steps = [c.post(f"/v1/sessions/{sid}/step", json={"action": a}).json() for a in actions]
        assert steps[-2]["truncated"] and not steps[-2]["info"]["episode_over"]
        assert (steps[-1]["reward"], steps[-1]["truncated"], steps[-1]["info"]["episode_over"]) == (0.0, True, True)
        assert c.get(f"/v1/sessions/{sid}").json()["step_count"] == max_steps  # the episode's steps only

        with c.websocket_connect("/ws") as ws:
            messages = [{"type": "reset", "data": {"seed": 3}}] + [{"type": "step", "data": {"action": a}}
                                                                   for a in actions]
            for message in messages:
                ws.send_text(json.dumps(message))
                reply = json.loads(ws.receive_text())["data"]
            ws.send_text(json.dumps({"type": "state"}))
            assert json.loads(ws.receive_text())["data"]["step_count"] == max_steps
        assert reply["reward"] == 0.0 and reply["done"] and reply["observation"]["info"]["episode_over"]

        def tool(name, **arguments):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
            return c.post("/mcp", json=body).json()["result"]

        sid = tool("reset", seed=3)["structuredContent"]["session_id"]
        for action in actions:
            stepped = tool("step", session_id=sid, action=action)
        data = stepped["structuredContent"]
        assert (data["reward"], data["truncated"], data["info"]["episode_over"]) == (0.0, True, True)
        assert "the episode is over" in stepped["content"][0]["text"]
        assert tool("state", session_id=sid)["structuredContent"]["step_count"] == max_steps


def test_a_token_guards_everything_but_health():
    with app_client(token="s3cret") as c:
        assert error(c.post("/v1/sessions")) == (401, "unauthorized")
        assert error(c.post("/v1/sessions", headers={"Authorization": "Bearer wrong"})) == (401, "unauthorized")
        assert c.get("/health").status_code == 200
        env = RemoteEnv(client=c, token="s3cret")
        assert env.reset(seed=0)[1]["action_is_valid"]
        with pytest.raises(WebSocketDisconnect):
            with c.websocket_connect("/ws") as ws:
                ws.receive_text()
        with c.websocket_connect("/ws", headers={"Authorization": "Bearer s3cret"}) as ws:
            ws.send_text('{"type": "reset", "data": {"seed": 0}}')
            assert json.loads(ws.receive_text())["type"] == "observation"


def test_idle_sessions_are_closed():
    # No race with the clock: the idle session is made an hour old, the busy one is used every few ms,
    # and the timeout (2 s) is hundreds of times longer than a request even on a loaded machine.
    with app_client(idle_timeout_s=2.0) as c:
        sessions = c.app.state.sessions
        env, busy = RemoteEnv(client=c), RemoteEnv(client=c)
        sessions.open[env.session_id].last_used -= 3600
        deadline = time.monotonic() + 60  # the reaper looks every idle_timeout_s / 2
        while env.session_id in sessions.open and time.monotonic() < deadline:
            busy.reset(seed=0)
            time.sleep(0.01)
        assert env.session_id not in sessions.open and sessions.closed_idle == 1
        assert busy.session_id in sessions.open
        with pytest.raises(RemoteEnvError, match="unknown_session"):
            env.reset(seed=0)


def test_an_unreachable_server_fails_fast():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="ragen serve"):
        RemoteEnv("http://127.0.0.1:9")  # the discard port: nothing listens
    assert time.monotonic() - start < 30  # no long retries (a bound, not a timing claim)


def test_server_config_is_checked():
    with pytest.raises(ValueError, match="unknown env"):
        ServerConfig(envs=["Ragen/Nope-v0"])
    with pytest.raises(ValueError, match="max_sessions"):
        ServerConfig(max_sessions=0)
    with pytest.raises(ValueError, match="not served"):
        ServerConfig(envs=[DEFAULT], env_kwargs={SMOKE: {}})


def test_ragen_serve_takes_its_settings_from_flags(monkeypatch):
    import ragen_envs.remote.server.app as app

    seen = []
    monkeypatch.setattr(app, "serve", seen.append)
    from ragen_envs.cli import main

    assert main(["serve", "--env", SMOKE, "--env", DEFAULT, "--port", "0",
                 "--max-sessions", "5", "--env-kwargs", json.dumps({SMOKE: SMOKE_KWARGS})]) == 0
    config = seen[0]
    assert config.envs == [SMOKE, DEFAULT] and config.max_sessions == 5
    assert config.host == "127.0.0.1" and config.env_kwargs == {SMOKE: SMOKE_KWARGS}
    assert main(["serve", "--env", SMOKE, "--idle-timeout-s", "0"]) == 2


def test_a_taken_port_is_one_line_before_serving(capsys):
    import socket

    from ragen_envs.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--env", SMOKE, "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert "serving" not in out
    assert err.strip() == (f"ragen: error: cannot serve on 127.0.0.1:{port}: Address already in use (another "
                           "program listens there: stop it or pick another --port)")


def test_no_page_needs_outside_assets(live):
    import httpx

    # Swagger's /docs and /redoc load scripts from a CDN, blank offline: they are off; the schema stays.
    for path in ("/docs", "/redoc"):
        assert httpx.get(f"{live.url}{path}").status_code == 404
    assert "/v1/sessions" in httpx.get(f"{live.url}/openapi.json").json()["paths"]


def mcp_tool(c, name, **arguments) -> dict:
    """An MCP tool call's result (``structuredContent``, or ``isError`` and the text)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return c.post("/mcp", json=body).json()["result"]


def ws_message(ws, kind: str, **data) -> dict:
    ws.send_text(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.receive_text())


# info keys that give the answer away: moves still needed, whether the gold passage was found
ANSWERS = {ids_in("rubikscube")[0]: ("distance", "optimal_solution_length"),
           ids_in("searchqa")[0]: ("gold_retrieved",)}


def oracle_infos(env_id: str, reset, step, seed: int = 3) -> list[dict]:
    """The infos a client gets over an episode of the oracle's actions (a local env plays in lockstep and
    names them); ``reset(seed)`` -> info and ``step(action)`` -> (info, done) speak one protocol."""
    local = gym.make(env_id)
    local.reset(seed=seed)
    infos = [reset(seed)]
    for _ in range(30):
        action = local.get_wrapper_attr("oracle_action")()
        local.step(action)
        info, done = step(action)
        infos.append(info)
        if done:
            break
    return infos


def protocol_infos(c, env_id: str) -> dict[str, list[dict]]:
    """Each protocol's infos over the same oracle episode."""
    remote = RemoteEnv(client=c, env_id=env_id)
    out = {"rest": oracle_infos(env_id, lambda seed: remote.reset(seed=seed)[1],
                                lambda a: (lambda r: (r[4], r[2] or r[3]))(remote.step(a)))}
    mcp = {}

    def mcp_reset(seed):
        mcp.update(mcp_tool(c, "reset", env_id=env_id, seed=seed)["structuredContent"])
        return mcp["info"]

    def mcp_step(action):
        data = mcp_tool(c, "step", session_id=mcp["session_id"], action=action)["structuredContent"]
        return data["info"], data["terminated"] or data["truncated"]

    out["mcp"] = oracle_infos(env_id, mcp_reset, mcp_step)
    with c.websocket_connect(f"/envs/{env_id}/ws") as ws:
        out["openenv"] = oracle_infos(
            env_id, lambda seed: ws_message(ws, "reset", seed=seed)["data"]["observation"]["info"],
            lambda a: (lambda r: (r["observation"]["info"], r["done"]))(ws_message(ws, "step", action=a)["data"]))
    return out


@pytest.mark.parametrize("env_id", [e for e in ANSWERS if e in USABLE_IDS])
def test_answers_in_info_never_reach_a_client_on_any_protocol(env_id):
    local = gym.make(env_id)
    assert set(ANSWERS[env_id]) <= set(local.reset(seed=3)[1])  # in this process the info is whole
    with app_client(envs=[env_id]) as c:
        for protocol, infos in protocol_infos(c, env_id).items():
            assert len(infos) >= 2 and infos[-1]["success"], protocol  # the oracle solved it, and said so
            for info in infos:
                assert "success" in info and not set(ANSWERS[env_id]) & set(info), (protocol, info)


def test_the_session_cap_holds_across_protocols_and_after_reaping():
    # Reaped sessions were still played by their WebSockets, so a capped server ran any number of envs.
    with app_client(max_sessions=2, idle_timeout_s=2.0) as c:
        sessions = c.app.state.sessions
        with c.websocket_connect("/ws") as old_ws:
            assert ws_message(old_ws, "reset", seed=0)["type"] == "observation"
            old_sid = mcp_tool(c, "reset", seed=0)["structuredContent"]["session_id"]
            assert error(c.post("/v1/sessions")) == (503, "capacity")
            with c.websocket_connect("/ws") as refused:
                assert json.loads(refused.receive_text())["data"]["code"] == "CAPACITY_REACHED"
            for session in sessions.open.values():  # both idle for an hour: the reaper closes them
                session.last_used -= 3600
            deadline = time.monotonic() + 60  # the reaper looks every second
            while c.get("/health").json()["sessions"] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert c.get("/health").json()["sessions"] == 0
            with c.websocket_connect("/ws") as new_ws:  # the two freed places, taken
                assert ws_message(new_ws, "reset", seed=0)["type"] == "observation"
                assert not mcp_tool(c, "reset", seed=0)["isError"]
                reply = ws_message(old_ws, "step", action="Up")  # the reaped session's env is not played
                assert reply["type"] == "error" and reply["data"]["code"] == "SESSION_CLOSED"
                with pytest.raises(WebSocketDisconnect):
                    old_ws.receive_text()  # and its connection ends
                assert mcp_tool(c, "step", session_id=old_sid, action="Up")["isError"]
                assert error(c.post("/v1/sessions")) == (503, "capacity")
                assert c.get("/health").json()["sessions"] == len(sessions.open) == 2
                assert ws_message(new_ws, "step", action="Up")["type"] == "observation"


def test_a_session_closed_mid_call_counts_until_its_env_is_closed():
    async def scenario(sessions, release):
        sid, session = await sessions.create(None)
        await sessions.reset(session, 0)
        step = session.env.step
        session.env.step = lambda action: (release.wait(60), step(action))[1]  # a slow step
        stepping = asyncio.create_task(sessions.step(session, "Up"))
        while not session.lock.locked():
            await asyncio.sleep(0.01)
        closing = asyncio.create_task(sessions.close(sid))
        await asyncio.sleep(0.05)
        with pytest.raises(ServeError, match="maximum"):  # the env still steps: alive, and counted
            await sessions.create(None)
        assert sessions.count() == 1
        with pytest.raises(ServeError, match="no session"):
            sessions.get(sid)  # but no new call may find it
        release.set()
        await stepping  # the call in flight finishes, then the env is closed
        await closing
        assert sessions.count() == 0
        with pytest.raises(ServeError) as gone:
            await sessions.step(session, "Up")  # whoever still holds it
        assert gone.value.code == "session_closed"

    sessions, release = Sessions(ServerConfig(envs=[SMOKE], max_sessions=1)), threading.Event()
    try:
        asyncio.run(scenario(sessions, release))
    finally:
        release.set()
        sessions.shutdown()


def test_call_and_seed_arguments_are_checked_alike_on_every_protocol():
    with app_client() as c, c.websocket_connect("/ws") as ws:
        sid = c.post("/v1/sessions").json()["session_id"]
        c.post(f"/v1/sessions/{sid}/reset", json={"seed": 0})
        for method, args in [("parse_action", [3]), ("parse_action", []), ("parse_action", ["Up", "Up"]),
                             ("parse_action", [None]), ("oracle_action", [1])]:
            response = c.post(f"/v1/sessions/{sid}/call/{method}", json={"args": args})
            assert error(response) == (422, "invalid_request") and method in response.json()["error"]["message"]
        assert c.post(f"/v1/sessions/{sid}/call/parse_action", json={"args": ["Up"]}).status_code == 200
        for seed in (2**64, 10**30, -1, True, "3", 1.5):
            assert error(c.post(f"/v1/sessions/{sid}/reset", json={"seed": seed})) == (422, "invalid_request")
            refused = mcp_tool(c, "reset", seed=seed)
            assert refused["isError"] and "seed" in refused["content"][0]["text"], seed
            assert ws_message(ws, "reset", seed=seed)["data"]["code"] == "VALIDATION_ERROR", seed
        largest = 2**64 - 1
        assert c.post(f"/v1/sessions/{sid}/reset", json={"seed": largest}).status_code == 200
        assert not mcp_tool(c, "reset", seed=largest)["isError"]
        assert ws_message(ws, "reset", seed=largest)["type"] == "observation"
        assert c.get("/health").json()["sessions"] == 3  # nothing refused opened a session


def test_the_oracle_is_handed_out_only_by_a_server_started_with_it():
    # a session id an agent sees (MCP prints it into the model's text) must not open the answers over REST
    with LocalClient(create_app(ServerConfig(envs=[OPEN_TEXT]))) as c:
        sid = c.post("/v1/sessions").json()["session_id"]
        c.post(f"/v1/sessions/{sid}/reset", json={"seed": 1})
        for method in ("oracle_action", "oracle_reasoning"):
            assert error(c.post(f"/v1/sessions/{sid}/call/{method}", json={})) == (403, "oracle_disabled")
        assert c.post(f"/v1/sessions/{sid}/call/parse_action", json={"args": ["x"]}).status_code == 200
    with app_client(envs=[OPEN_TEXT]) as c:  # --oracle: for trusted clients (a warm start, an audit)
        sid = c.post("/v1/sessions").json()["session_id"]
        c.post(f"/v1/sessions/{sid}/reset", json={"seed": 1})
        assert c.post(f"/v1/sessions/{sid}/call/oracle_action", json={}).status_code == 200


def test_a_websocket_that_sends_nothing_ends_with_its_idle_session():
    # idle WebSockets held every connection slot for good: the connection ends at the idle timeout
    with app_client(idle_timeout_s=1.0) as c:
        with c.websocket_connect("/ws") as ws:  # connects, then says nothing
            reply = json.loads(ws.receive_text())
            assert reply["type"] == "error" and reply["data"]["code"] == "SESSION_CLOSED"
            with pytest.raises(WebSocketDisconnect):
                ws.receive_text()
        assert c.get("/health").json()["sessions"] == 0
