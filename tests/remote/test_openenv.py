"""`ragen serve` against OpenEnv's own runtime validator, and its MCP tools driven through an episode."""

import json
import subprocess
import sys

import gymnasium as gym
import httpx
import pytest

from ragen_envs.remote.server import ServerConfig
from tests.remote.test_server import LiveServer
from conftest import DEFAULT, SMOKE

pytest.importorskip("openenv", reason="the 'openenv' extra")


@pytest.fixture(scope="module")
def live():
    with LiveServer(ServerConfig(envs=[SMOKE, DEFAULT])) as server:
        yield server


def test_openenvs_validator_passes_every_criterion(live):
    done = subprocess.run([sys.executable, "-m", "openenv.cli", "validate", "--url", live.url, "--json"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert not failed, failed
    assert report["passed"] and report["summary"]["required_passed_count"] == report["summary"]["required_total_count"]
    assert {c["id"] for c in report["criteria"]} >= {"health_endpoint", "metadata_endpoint", "schema_endpoint",
                                                     "mcp_endpoint", "mode_endpoint_consistency"}


def test_metadata_and_schema_describe_each_served_env(live):
    meta = httpx.get(f"{live.url}/metadata").json()
    assert meta["name"] == "ragen-envs" and SMOKE in meta["description"] and list(meta["envs"]) == [SMOKE, DEFAULT]
    local = gym.make(DEFAULT)
    one = httpx.get(f"{live.url}/envs/{DEFAULT}/metadata").json()
    assert one == meta["envs"][DEFAULT]
    assert one["instructions"] == local.get_wrapper_attr("instructions")
    assert one["valid_actions"] == local.get_wrapper_attr("valid_actions")
    assert all(a in one["action_grammar"] for a in one["valid_actions"])
    schema = httpx.get(f"{live.url}/schema").json()
    assert schema["action"]["required"] == ["action"] and set(schema["envs"]) == {SMOKE, DEFAULT}
    assert schema["state"]["properties"]["step_count"]["type"] == "integer"
    assert httpx.get(f"{live.url}/envs/Ragen/Nope-v0/metadata").status_code == 404


def rpc(live, method, params=None, request_id=1):
    body = {"jsonrpc": "2.0", "method": method, **({"id": request_id} if request_id is not None else {})}
    if params is not None:
        body["params"] = params
    response = httpx.post(f"{live.url}/mcp", json=body)
    return response.json() if response.content else response.status_code


def tool(live, name, **arguments):
    reply = rpc(live, "tools/call", {"name": name, "arguments": arguments})
    return reply["result"]


def test_a_tool_calling_agent_plays_the_local_episode_through_mcp(live):
    init = rpc(live, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "test", "version": "0"}})
    assert init["result"]["serverInfo"]["name"] == "ragen-envs" and "tools" in init["result"]["capabilities"]
    assert rpc(live, "notifications/initialized", request_id=None) == 202  # a notification: no reply
    names = [t["name"] for t in rpc(live, "tools/list")["result"]["tools"]]
    assert names == ["list_envs", "reset", "step", "state", "close"]
    assert set(tool(live, "list_envs")["structuredContent"]["envs"]) == {SMOKE, DEFAULT}

    local = gym.make(DEFAULT)
    obs, _ = local.reset(seed=5)
    started = tool(live, "reset", env_id=DEFAULT, seed=5)
    sid = started["structuredContent"]["session_id"]
    assert started["structuredContent"]["observation"] == obs and obs in started["content"][0]["text"]
    for _ in range(30):
        action = local.get_wrapper_attr("oracle_action")()
        stepped = tool(live, "step", session_id=sid, action=action)["structuredContent"]
        obs, reward, terminated, truncated, info = local.step(action)
        assert (stepped["observation"], stepped["reward"], stepped["terminated"], stepped["truncated"]) == \
            (obs, reward, terminated, truncated)
        if terminated or truncated:
            break
    assert stepped["info"]["success"] and tool(live, "state", session_id=sid)["structuredContent"]["step_count"] >= 1
    assert tool(live, "close", session_id=sid)["structuredContent"] == {"closed": sid}
    gone = tool(live, "step", session_id=sid, action="Up")
    assert gone["isError"] and "no session" in gone["content"][0]["text"]


@pytest.mark.parametrize("body, code", [
    ({}, -32600), ([1, 2], -32600), ({"jsonrpc": "2.0", "id": 3, "method": "nope"}, -32601),
    ({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "fly"}}, -32602),
    ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": []}, -32602),
])
def test_bad_mcp_requests_get_json_rpc_errors(live, body, code):
    response = httpx.post(f"{live.url}/mcp", json=body)
    assert response.status_code == 200 and response.json()["jsonrpc"] == "2.0"
    assert response.json()["error"]["code"] == code
    assert httpx.post(f"{live.url}/mcp", content=b"{not json").json()["error"]["code"] == -32700
    bad = tool(live, "reset", seed=-1)
    assert bad["isError"] and "seed: Input should be greater than or equal to 0" in bad["content"][0]["text"]
