"""The env server against a hostile or careless client: every bad input gets the documented error shape
(JSON ``{"error": {"code", "message"}}`` on HTTP, an ``error`` reply on the WebSocket) and no traceback
in the log; one slow env does not starve the others; closed sessions give their memory back."""

import gc
import json
import logging
import socket
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import sys
from pathlib import Path

import httpx
import pytest

from ragen_envs.remote.server import ServerConfig
from ragen_envs.remote.server.app import Guard
from tests.remote.test_server import LiveServer, app_client, error
from conftest import DEFAULT, SMOKE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "audits"))
import server_fuzz  # noqa: E402


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def no_tracebacks(caplog):
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def watch_uvicorn(caplog):
    """uvicorn's loggers do not propagate to the root: the test's log handler goes on them directly."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
        logging.getLogger(name).addHandler(caplog.handler)


def raw_http(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and b'"error"' in out and out.rstrip().endswith(b"}}"):
                break
        return out


def test_chunked_and_nested_bodies_get_the_documented_errors(log):
    with LiveServer(ServerConfig(envs=[SMOKE], max_request_bytes=4096)) as live:
        watch_uvicorn(log)
        chunk = b"x" * 3000
        request = (b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" + (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * 3 + b"0\r\n\r\n")
        reply = raw_http(live.url, request)
        assert reply.startswith(b"HTTP/1.1 413") and b'"code":"too_large"' in reply.replace(b" ", b"")
        nested = b"[" * 1000 + b"]" * 1000
        for body in (nested, b'{"env_id": ' + nested + b"}"):
            response = httpx.post(f"{live.url}/v1/sessions", content=body, headers={"content-type": "application/json"})
            assert error(response) == (400, "malformed_json")
        sid = httpx.post(f"{live.url}/v1/sessions").json()["session_id"]
        response = httpx.post(f"{live.url}/v1/sessions/{sid}/reset", content=b'{"options": ' + nested + b"}",
                              headers={"content-type": "application/json"})
        assert error(response) == (400, "malformed_json")
    no_tracebacks(log)


@pytest.mark.parametrize("body, expected", [
    ({"env_id": ""}, (404, "unknown_env")),
    ({"env_id": "Ragen/Nope-v0"}, (404, "unknown_env")),
    ({"render_mode": "human"}, (400, "bad_render_mode")),
])
def test_what_a_session_cannot_be_is_refused(body, expected):
    with app_client() as c:
        assert error(c.post("/v1/sessions", json=body)) == expected
        assert c.post("/v1/sessions", json={"render_mode": "rgb_array"}).status_code == 201


def test_websocket_frames_that_are_wrong_get_error_replies(log):
    with app_client() as c, c.websocket_connect("/ws") as ws:
        for send, code in [(lambda: ws.send_bytes(b"\x00\x01binary"), "VALIDATION_ERROR"),
                           (lambda: ws.send_text("[" * 5000 + "]" * 5000), "INVALID_JSON"),
                           (lambda: ws.send_text(json.dumps({"type": "reset", "data": {"episode_id": "e" * 10**5}})),
                            "VALIDATION_ERROR")]:
            send()
            reply = json.loads(ws.receive_text())
            assert reply["type"] == "error" and reply["data"]["code"] == code
        ws.send_text(json.dumps({"type": "reset", "data": {"seed": 1, "episode_id": "mine"}}))
        assert json.loads(ws.receive_text())["type"] == "observation"
        ws.send_text(json.dumps({"type": "state"}))
        assert json.loads(ws.receive_text())["data"]["episode_id"] == "mine"
    no_tracebacks(log)


def test_abrupt_disconnects_are_one_line_each_and_no_traceback(log):
    from websockets.sync.client import connect

    with LiveServer(ServerConfig(envs=[SMOKE])) as live:
        watch_uvicorn(log)
        url = live.url.replace("http://", "ws://") + "/ws"
        for _ in range(20):
            ws = connect(url, legacy=True) if "legacy" in connect.__code__.co_varnames else connect(url)
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            ws.socket.shutdown(socket.SHUT_RDWR)  # gone without a close frame, a reply in flight
            ws.socket.close()
        deadline = time.monotonic() + 30  # a bound for a loaded machine, not a timing claim
        while httpx.get(f"{live.url}/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpx.get(f"{live.url}/health").json()["sessions"] == 0  # every session closed
    no_tracebacks(log)
    assert sum(r.name.startswith("uvicorn") for r in log.records) == 0  # at most our one line per session
    assert sum("ended by the client" in r.getMessage() for r in log.records) <= 20


def test_a_slow_env_does_not_starve_another_env():
    # Two workers a pool: four steps of DEFAULT that block (a sandboxed program sleeping) fill DEFAULT's
    # pool; a step of SMOKE must still be answered before any of them is let go.
    release, order = threading.Event(), []
    with LiveServer(ServerConfig(envs=[DEFAULT, SMOKE], workers=2)) as live:
        sessions = live.server.config.app.state.sessions
        slow = [httpx.post(f"{live.url}/v1/sessions", json={"env_id": DEFAULT}).json()["session_id"]
                for _ in range(4)]
        for sid in slow:
            httpx.post(f"{live.url}/v1/sessions/{sid}/reset", json={"seed": 0})
            sessions.open[sid].env.step = lambda action: (release.wait(60), order.append("slow"))[0] and None
        fast = httpx.post(f"{live.url}/v1/sessions", json={"env_id": SMOKE}).json()["session_id"]
        httpx.post(f"{live.url}/v1/sessions/{fast}/reset", json={"seed": 0})
        with ThreadPoolExecutor(4) as pool:
            blocked = [pool.submit(httpx.post, f"{live.url}/v1/sessions/{sid}/step", json={"action": "Up"},
                                   timeout=90) for sid in slow]
            while sum(not s.lock.locked() for s in (sessions.open[sid] for sid in slow)):
                pass  # every slow step has reached its session (two run, two wait for the pool)
            step = httpx.post(f"{live.url}/v1/sessions/{fast}/step", json={"action": "Up"}, timeout=30)
            order.append("fast")
            release.set()
            [f.result() for f in blocked]
        assert step.status_code == 200 and order[0] == "fast" and order.count("slow") == 4


def test_closed_sessions_give_their_memory_back():
    with app_client(max_request_bytes=1 << 20) as c:
        def rounds(n):
            for _ in range(n):
                with c.websocket_connect("/ws") as ws:
                    ws.send_text(json.dumps({"type": "reset", "data": {"seed": 0, "episode_id": "e" * 200}}))
                    ws.receive_text()
                    ws.send_text(json.dumps({"type": "step", "data": {"action": "Up" + " " * 500_000}}))
                    ws.receive_text()

        rounds(5)  # warm: caches, the env's first build
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        rounds(50)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert c.get("/health").json()["sessions"] == 0
        assert after - before < 2_000_000  # 50 sessions of 0.5 MB messages: nothing of them is kept


def test_a_client_that_sends_too_slowly_is_disconnected(log):
    # a read deadline of 2 s, not less: the good client's first bytes may come late on a loaded machine
    with LiveServer(ServerConfig(envs=[SMOKE], read_timeout_s=2.0)) as live:
        watch_uvicorn(log)
        host, port = live.url.removeprefix("http://").split(":")
        idle = socket.create_connection((host, int(port)), timeout=30)  # sends nothing
        partial = socket.create_connection((host, int(port)), timeout=30)
        partial.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\n")  # and never ends its headers
        body = socket.create_connection((host, int(port)), timeout=30)
        body.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{")  # cut short
        for sock in (idle, partial, body):
            assert sock.recv(1024) == b""  # closed by the server (the 30 s socket timeout would raise instead)
            sock.close()
        # A client that works, with a keep-alive pause longer than the read deadline, is not cut off.
        with httpx.Client(base_url=live.url) as client:
            sid = client.post("/v1/sessions").json()["session_id"]
            time.sleep(3.0)
            assert client.post(f"/v1/sessions/{sid}/reset", json={"seed": 0}).status_code == 200
    no_tracebacks(log)
    assert sum("no whole request within" in r.getMessage() for r in log.records) == 3


def test_a_request_trickled_a_byte_at_a_time_is_cut_at_the_deadline(log):
    # Each gap (0.5 s) is within the 2 s deadline; the request as a whole is not: cut, not kept for 20 s.
    with LiveServer(ServerConfig(envs=[SMOKE], read_timeout_s=2.0)) as live:
        watch_uvicorn(log)
        host, port = live.url.removeprefix("http://").split(":")
        for start in (b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",  # headers never ended
                      b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\n\r\n"):  # body
            with socket.create_connection((host, int(port)), timeout=30) as slow:
                # a byte every 0.5 s, each gap far inside the read deadline
                assert server_fuzz.trickle(slow, start, gap_s=0.5, give_up_s=20.0), start
        assert httpx.get(f"{live.url}/health", timeout=30).json()["status"] == "healthy"
    no_tracebacks(log)


def test_health_answers_beside_slow_clients_and_connections_over_the_cap_are_refused(log):
    with LiveServer(ServerConfig(envs=[SMOKE], max_connections=24)) as live:
        watch_uvicorn(log)
        host, port = live.url.removeprefix("http://").split(":")
        held = live.server.server_state.connections

        def slow_clients(n):
            socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]
            for sock in socks:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # and never the end of its headers
            return socks

        def wait_for(condition):
            deadline = time.monotonic() + 30  # a bound for a loaded machine, not a timing claim
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.01)
            return condition()

        slow = slow_clients(20)
        assert wait_for(lambda: len(held) == 20)
        assert httpx.get(f"{live.url}/health", timeout=30).json()["status"] == "healthy"  # many slow, one answer
        slow += slow_clients(4)
        assert wait_for(lambda: len(held) == 24)  # the cap, held by slow clients
        with socket.create_connection((host, int(port)), timeout=10) as over:
            reply = b""
            while chunk := over.recv(4096):  # answered and closed at once, not queued
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 503") and b"too_many_connections" in reply
        for sock in slow:
            sock.close()
        assert wait_for(lambda: not held)
        assert httpx.get(f"{live.url}/health", timeout=30).json()["sessions"] == 0
    no_tracebacks(log)
    from ragen_envs.remote.server.app import connection_cap

    assert connection_cap(2048, 256) == 192 and connection_cap(10, None) == 10  # descriptors kept for the rest


EVIL = "http://evil.example"


def ws_reset(live, path: str = "/ws", host: str = "127.0.0.1", origin: str | None = None):
    """An OpenEnv reset over a WebSocket as a page in a browser opens it: the name in its URL is the Host
    (a DNS-rebound evil.example reaches this server), its page's Origin. The reply's type, or the status."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    port = int(live.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        with connect(f"ws://{host}:{port}{path}", sock=sock, origin=origin) as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            return json.loads(ws.recv(timeout=30))["type"]
    except InvalidStatus as refused:
        return refused.response.status_code


def test_pages_of_other_sites_cannot_drive_the_server(log):
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    with LiveServer(ServerConfig(envs=[SMOKE])) as live:
        assert ws_reset(live, origin=EVIL) == 403
        assert ws_reset(live, path=f"/envs/{SMOKE}/ws", origin="null") == 403  # file:// and sandboxed pages
        assert ws_reset(live, host="evil.example") == 403  # DNS rebinding
        for headers, code in [({"Origin": EVIL}, "forbidden_origin"), ({"Host": "evil.example"}, "forbidden_host"),
                              ({"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}, "forbidden_host")]:
            assert error(httpx.post(f"{live.url}/v1/sessions", headers=headers)) == (403, code)
            assert error(httpx.post(f"{live.url}/mcp", content=rpc, headers={**headers, "Content-Type":
                                                                             "application/json"})) == (403, code)
        # what a page may POST anywhere without asking (no CORS preflight): text/plain, forms
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            for path in ("/mcp", "/v1/sessions"):
                response = httpx.post(f"{live.url}{path}", content=rpc, headers={"Content-Type": kind})
                assert error(response) == (415, "unsupported_media_type")
        assert httpx.get(f"{live.url}/health").json()["sessions"] == 0  # nothing refused opened a session
        # Clients that are no browser send no Origin; pages of this machine and IP addresses pass.
        assert ws_reset(live) == ws_reset(live, host="localhost", origin="http://localhost:3000") == "observation"
        assert httpx.post(f"{live.url}/mcp", content=rpc, headers={"Content-Type": "application/json; charset=utf-8",
                                                                   "Host": "10.1.2.3:80"}).json()["result"]["tools"]
    no_tracebacks(log)


def test_allow_flags_let_named_hosts_and_origins_in(monkeypatch):
    import ragen_envs.remote.server.app as app
    from ragen_envs.cli import main

    seen = []
    monkeypatch.setattr(app, "serve", seen.append)
    assert main(["serve", "--env", SMOKE, "--allow-host", "Evil.Example:8000", "--allow-origin", EVIL,
                 "--allow-origin", "https://app.example:3000/"]) == 0
    assert seen[0].allowed_hosts == ("evil.example",)
    assert seen[0].allowed_origins == (EVIL, "https://app.example:3000")
    with LiveServer(seen[0]) as live:
        assert ws_reset(live, host="evil.example", origin=EVIL) == "observation"
        assert ws_reset(live, origin="https://app.example:3000") == "observation"
        assert ws_reset(live, origin="https://app.example:4000") == 403  # an origin is scheme, name and port
        assert httpx.post(f"{live.url}/v1/sessions", headers={"Host": "evil.example", "Origin": EVIL}).status_code \
            == 201
    with app_client(allowed_hosts=("*",), allowed_origins=("*",)) as c:
        assert c.get("/health", headers={"Host": "any.example", "Origin": EVIL}).status_code == 200
    # Bound to every interface, the machine's own name is answered too (remote users add theirs).
    assert Guard(None, ServerConfig(host="0.0.0.0")).host_ok(socket.gethostname())
    assert not Guard(None, ServerConfig()).host_ok("evil.example")
