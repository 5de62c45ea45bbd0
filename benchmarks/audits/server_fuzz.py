"""The env server's protocols under hostile clients (``fuzz_server``; needs the ``server`` extra): it
starts ``ragen serve``'s server on 127.0.0.1 at a free port, in this process, and checks that the session
cap holds across REST, MCP and OpenEnv's WebSocket, also after the reaper closed idle sessions (whose
WebSockets are then refused, not played); that a request trickled a byte at a time is cut at the read
deadline; that a huge body, declared or chunked, gets 413 before it is all sent; and that hostile
arguments on every route get a 4xx, a tool error or an error reply, never a 5xx. All of its traffic goes
to that loopback server, bounded in count and time. ``tests/benchmarks/test_benchmarks.py`` runs it small.

    python benchmarks/audits/server_fuzz.py [--examples 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.registry import env_for


# -- the env server's protocols ----------------------------------------------------------------------
class Served:
    """``ragen serve``'s server (its uvicorn settings) on 127.0.0.1 at a free port, in a thread of this
    process, for as long as the ``with`` block: ``.url``, ``.port``, ``.connections`` (those open)."""

    def __init__(self, **settings):
        import uvicorn

        from ragen_envs.remote.server import ServerConfig
        from ragen_envs.remote.server.app import server_config

        config = ServerConfig(**{"envs": [env_for("smoke")], **settings})
        self.server = uvicorn.Server(server_config(config, host="127.0.0.1", port=0))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.server.started:
            raise RuntimeError("the env server did not start")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = self.server.server_state.connections
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _wait_for(condition, seconds: float = 30.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def _rpc(http, name: str, **arguments) -> dict:
    """An MCP tool call's JSON-RPC reply."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return http.post("/mcp", json=body).json()


def _ws_send(ws, kind: str, data) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=30))


class WebSockets:
    """OpenEnv WebSockets to a served server (``.open``: those connected), closed when the ``with`` ends."""

    def __init__(self, port: int):
        self.port, self.stack, self.open = port, contextlib.ExitStack(), []

    def connect(self):
        from websockets.sync.client import connect

        ws = self.stack.enter_context(connect(f"ws://127.0.0.1:{self.port}/ws", open_timeout=30))
        self.open.append(ws)
        return ws

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stack.close()


def _open_session(http, protocol: str, sockets: WebSockets):
    """One session on ``protocol``: True if opened, False if refused for capacity, else what came back."""
    if protocol == "rest":
        response = http.post("/v1/sessions")
        return True if response.status_code == 201 else \
            False if response.status_code == 503 and "capacity" in response.text else response.text[:200]
    if protocol == "mcp":
        result = _rpc(http, "reset", seed=0).get("result", {})
        if not result.get("isError"):
            return True
        return False if "maximum" in str(result) else str(result)[:200]
    from websockets.exceptions import ConnectionClosed

    ws = sockets.connect()
    try:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
    except ConnectionClosed:
        pass  # refused: the server said why as it opened, and closed; the reason is still to be read
    reply = json.loads(ws.recv(timeout=30))
    if reply["type"] == "observation":
        return True
    return False if reply["data"]["code"] == "CAPACITY_REACHED" else str(reply)[:200]


def _fill(http, cap: int, sockets: WebSockets) -> list[str]:
    """Open sessions over REST, MCP and OpenEnv in turn until each protocol is refused; problems found."""
    problems, opened, refused = [], 0, set()
    for k in range(cap + 3):
        protocol = ("rest", "mcp", "openenv")[k % 3]
        outcome = _open_session(http, protocol, sockets)
        if outcome is True:
            opened += 1
        elif outcome is False:
            refused.add(protocol)
        else:
            problems.append(f"{protocol}: opening a session answered {outcome}")
    if opened != cap or refused != {"rest", "mcp", "openenv"}:
        problems.append(f"session cap {cap}: {opened} opened, refused on {sorted(refused)}")
    return problems


def check_session_cap(cap: int = 4, idle_s: float = 1.0) -> list[str]:
    """The session cap across REST, MCP and OpenEnv, before and after the reaper closed every session:
    the reaped WebSockets must get ``SESSION_CLOSED``, and ``/health`` count the envs alive."""
    import httpx

    with Served(max_sessions=cap, idle_timeout_s=idle_s) as served, WebSockets(served.port) as sockets:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            return _cap_rounds(http, cap, idle_s, sockets)


def _cap_rounds(http, cap: int, idle_s: float, sockets: WebSockets) -> list[str]:
    """Fill the server, let the reaper empty it, fill it again, and play the reaped WebSockets."""
    problems = _fill(http, cap, sockets)
    if not _wait_for(lambda: http.get("/health").json()["sessions"] == 0, 30 + 4 * idle_s):
        problems.append(f"idle sessions not reaped: /health says {http.get('/health').json()['sessions']}")
    reaped = list(sockets.open)
    problems += _fill(http, cap, sockets)  # the freed places, taken again
    for ws in reaped:
        try:
            reply = _ws_send(ws, "step", {"action": "Up"})
        except Exception:  # noqa: BLE001 - a refused or closed WebSocket: nothing stepped
            continue
        if reply["type"] != "error" or reply["data"]["code"] not in ("SESSION_CLOSED", "CAPACITY_REACHED"):
            problems.append(f"a reaped WebSocket session was still played: {str(reply)[:200]}")
    alive = http.get("/health").json()["sessions"]
    if alive != cap:
        problems.append(f"/health counts {alive} sessions, not the cap {cap}")
    return problems


def trickle(sock: socket.socket, start: bytes, gap_s: float, give_up_s: float) -> bool:
    """Send ``start`` on ``sock``, then a byte every ``gap_s`` until the server closes the connection (True)
    or ``give_up_s`` pass (False)."""
    sock.sendall(start)
    sock.settimeout(gap_s)
    end = time.monotonic() + give_up_s
    while time.monotonic() < end:
        try:
            if sock.recv(1024) == b"":
                return True
        except socket.timeout:
            pass
        except ConnectionResetError:
            return True
        try:
            sock.sendall(b"a")
        except (BrokenPipeError, ConnectionResetError):
            return True
    return False


def _trickle(port: int, start: bytes, gap_s: float, give_up_s: float) -> bool:
    """``trickle`` on a new connection to the loopback server at ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        return trickle(sock, start, gap_s, give_up_s)


def check_slow_requests(deadline_s: float = 2.0) -> list[str]:
    """Requests trickled a byte at a time (each gap a quarter of the read deadline), in the headers and
    in the body, are cut: within five deadlines (generous), not kept while they trickle."""
    problems = []
    with Served(read_timeout_s=deadline_s) as served:
        for where, start in (("headers", b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: "),
                             ("body", b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                      b"application/json\r\nContent-Length: 100000\r\n\r\n")):
            if not _trickle(served.port, start, deadline_s / 4, 5 * deadline_s):
                problems.append(f"a request trickling its {where} was not cut within {5 * deadline_s:g} s")
    return problems


def _first_reply(port: int, head: bytes, chunks, pause_s: float = 0.0) -> bytes:
    """Send ``head`` and then ``chunks`` until the server answers; its answer (b"": none, closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.settimeout(0.05)
        for chunk in chunks:
            try:
                reply = sock.recv(65536)
                return reply
            except socket.timeout:
                pass
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(30)
        try:
            return sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            return b""


def check_huge_bodies(limit: int = 65536) -> list[str]:
    """Bodies far over ``max_request_bytes``, declared (Content-Length) or chunked, get 413 while the
    client still sends: the server never takes one whole. 16x the limit is offered, in pieces."""
    problems = []
    piece = b"x" * 16384
    offered = 16 * limit // len(piece)
    head = b"POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    with Served(max_request_bytes=limit) as served:
        declared = _first_reply(served.port, head + b"Content-Length: %d\r\n\r\n" % (1 << 30), [piece] * offered)
        chunked = _first_reply(served.port, head + b"Transfer-Encoding: chunked\r\n\r\n",
                               [b"%x\r\n%s\r\n" % (len(piece), piece)] * offered)
        for kind, reply in (("declared", declared), ("chunked", chunked)):
            if not reply.startswith(b"HTTP/1.1 413"):
                problems.append(f"a huge {kind} body got {reply[:60]!r}, not 413")
    return problems


def _json_values():
    """A hypothesis strategy of JSON values, some of them hostile (huge integers, deep nesting, long text)."""
    from hypothesis import strategies as st

    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from([2**64, -1, 10**40, -2**63]),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
                       st.sampled_from(["Up", "", "x" * 5000, "\x00", "\u202e"]))

    def nested(inner):
        return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)

    return st.recursive(leaves, nested, max_leaves=6)


def _seed_everywhere(http, ws, sid: str, value) -> str | None:
    """``value`` as a reset's seed on REST, MCP and OpenEnv: one rule, so all accept it or all refuse it
    (REST with a 4xx), never a 5xx; None, or what differs."""
    rest = http.post(f"/v1/sessions/{sid}/reset", json={"seed": value})
    if rest.status_code >= 500:
        return f"seed {str(value)[:80]}: REST answered {rest.status_code}"
    mcp = _rpc(http, "reset", session_id=sid, seed=value).get("result", {})
    openenv = _ws_send(ws, "reset", {"seed": value})
    accepted = {"rest": rest.status_code < 400, "mcp": not mcp.get("isError"),
                "openenv": openenv["type"] == "observation"}
    if len(set(accepted.values())) > 1:
        return f"seed {str(value)[:80]}: accepted by {sorted(k for k, v in accepted.items() if v)} only"
    return None


def _hostile_request(http, ws, sid: str, route: str, value) -> str | None:
    """Send ``value`` where ``route`` takes an argument; None if the answer is a client error or a
    success, else what is wrong with it."""
    if route == "seed":
        return _seed_everywhere(http, ws, sid, value)
    if route == "openenv":
        reply = _ws_send(ws, "step", value)
        return None if reply.get("type") in ("observation", "error") else f"openenv replied {str(reply)[:200]}"
    if route == "mcp":
        reply = _rpc(http, "step", session_id=sid, action=value)
        return None if "result" in reply or "error" in reply else f"mcp replied {str(reply)[:200]}"
    path, body = {"create": ("/v1/sessions", {"env_id": value}),
                  "options": (f"/v1/sessions/{sid}/reset", {"options": value}),
                  "step": (f"/v1/sessions/{sid}/step", {"action": value}),
                  "call": (f"/v1/sessions/{sid}/call/parse_action", {"args": value}),
                  "body": (f"/v1/sessions/{sid}/reset", value)}[route]
    response = http.post(path, json=body)
    if response.status_code == 201:
        http.delete(f"/v1/sessions/{response.json()['session_id']}")  # a session it made: not kept
    return None if response.status_code < 500 else f"{route} {str(body)[:120]} got {response.status_code}"


ROUTES = ("create", "seed", "options", "step", "call", "body", "mcp", "openenv")


def check_bad_arguments(examples: int = 50) -> list[str]:
    """Hostile JSON values (``_json_values``) as the argument of each route: 4xx (REST), a tool error or
    JSON-RPC error (MCP), an error reply (OpenEnv), never a 5xx; a seed accepted or refused alike on
    every protocol. The first problem found, if any (the values that once broke it are tried first)."""
    import httpx
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st
    from websockets.sync.client import connect

    problems = []
    with Served(max_sessions=64) as served, httpx.Client(base_url=served.url, timeout=30) as http, \
            connect(f"ws://127.0.0.1:{served.port}/ws", open_timeout=30) as ws:
        sid = http.post("/v1/sessions").json()["session_id"]

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.sampled_from(ROUTES), _json_values())
        @example("call", [3]).via("parse_action of a number answered 500")
        @example("seed", 2**64).via("MCP took seeds REST refused")
        def request(route, value):
            problem = _hostile_request(http, ws, sid, route, value)
            assert problem is None, problem

        try:
            request()
        except Exception as error:  # noqa: BLE001 - hypothesis raises the failure (a group, for several)
            problems.append(str(error)[:400])
    return problems


def fuzz_server(examples: int = 50, cap: int = 4, deadline_s: float = 2.0) -> list[str]:
    """The env server's protocols under hostile clients (see the module docstring): what broke, empty
    when nothing did. Every connection goes to a server this call starts on 127.0.0.1 and stops."""
    problems = []
    for check in (lambda: check_session_cap(cap), lambda: check_slow_requests(deadline_s), check_huge_bodies,
                  lambda: check_bad_arguments(examples)):
        problems += check()
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="hostile requests per check")
    problems = fuzz_server(parser.parse_args(argv).examples)
    print("\n".join(problems) or "env server: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
