"""Property-based fuzzing of every catalogue env: hostile text under a time and memory bound per step.

Each env (and the variants below) is driven by ``hypothesis``-generated episodes: hostile text (huge
numerals, exponents, unicode, control characters, nested brackets, repeated answers, the env's own
action formats filled with all of these, its oracle's action) and steps past the end. Every step must
keep the env contract (``ragen_envs/base.py``):
- ``step`` never raises, on any text;
- it returns within ``--step-seconds`` (a hang detector, not a speed test: the hangs found were
  20 s and more) and within ``--step-memory-mb`` of new address space (the bound is the process's
  ``RLIMIT_AS``, so a bomb fails as a MemoryError instead of taking the machine);
- the observation lies in its space, the reward is finite and within ``env.reward_range``;
- after the episode ended: nothing applied, reward 0, the same flags and observation, ``episode_over``.
Each env runs in a process of its own, so a step that hangs in C code (a huge integer) is caught by
the parent's deadline and named with the action it was stepping.

    python benchmarks/env_fuzz.py [--examples 200] [--envs Ragen/Countdown-v0 ...]

``make test`` runs it with a small budget (tests/contract/test_env_fuzz.py; RAGEN_FUZZ_EXAMPLES raises it).

``--server`` fuzzes the env server's protocols instead (``fuzz_server``; needs the ``server`` extra): it
starts ``ragen serve``'s server on 127.0.0.1 at a free port, in this process, and checks that the session
cap holds across REST, MCP and OpenEnv's WebSocket, also after the reaper closed idle sessions (whose
WebSockets are then refused, not played); that a request trickled a byte at a time is cut at the read
deadline; that a huge body, declared or chunked, gets 413 before it is all sent; and that hostile
arguments on every route get a 4xx, a tool error or an error reply, never a 5xx. All of its traffic goes
to that loopback server, bounded in count and time. ``tests/benchmarks/test_benchmarks.py`` runs it small.

    python benchmarks/env_fuzz.py --server [--examples 200]

``--viewer`` fuzzes ``ragen view``'s loading of rollouts files instead (``fuzz_viewer``): hostile files
(every field of the wrong type, markup and huge text in every string, unknown and client env ids, env
arguments that would run code, fetch or read a file) must be refused with the project's clear error or
shown as a page without ``<script``, and never make the viewer run, connect or read what they name.
``tests/contract/test_env_fuzz.py`` runs it small.

    python benchmarks/env_fuzz.py --viewer [--examples 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import re
import resource
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.base import observation_text
from ragen_envs.registry import ENVIRONMENTS, env_for, usable_ids

# Variants whose scoring differs from the default (keyed by env class: the catalogue alone names ids).
VARIANTS = {"MetaMathQAEnv": [{"answer_check": "normalized"}, {"max_attempts": 1100}],
            "CountdownEnv": [{"answer_check": "strict"}],
            "DeepCoderEnv": [{"max_attempts": 3}]}
ORACLE = "\x00oracle"  # stands for the env's oracle action, looked up when it is stepped
MUTANT = "\x00mutant:"  # + text: the oracle's action with each of its numbers replaced by the text
TEMPLATES = ("<answer>{}</answer>", "finish[{}]", "search[{}]", "click[{}]", "place {} at row 1 col 1",
             "1,1,{}", "```python\n{}\n```", "\\boxed{{{}}}", "The answer is: {}", "{} = 24", "({}) * 2")


@dataclass
class Bounds:
    step_seconds: float = 10.0  # a step slower than this is a hang
    step_memory_mb: int = 1024  # new address space a step may take


def hostile_text():
    """A hypothesis strategy of hostile action texts."""
    from hypothesis import strategies as st

    # lengths at the edges that broke envs (Python's 4,300-digit int limit) as well as any
    digits = st.one_of(st.sampled_from([1, 5, 20, 400, 4301, 6000]), st.integers(1, 6000)).map(lambda n: "9" * n)
    exponents = st.integers(0, 10 ** 9).map(lambda e: f"1e{e}")
    brackets = st.tuples(st.sampled_from("([{<"), st.integers(1, 3000)).map(
        lambda p: p[0] * p[1] + "1" + {"(": ")", "[": "]", "{": "}", "<": ">"}[p[0]] * p[1])
    tricks = st.sampled_from(["True", "False", "True<<True", "3_5", "2*3.5", "'%*s' % (99, '')", "9**9**9",
                              "\x00", "\u202e", "\ufeff", "𝟗", "٣", "NaN", "inf", "-0", "1/0", "", " ", "\n" * 50])
    unicode_text = st.text(max_size=200)
    mutants = st.one_of(digits, exponents, tricks).map(lambda text: MUTANT + text)
    piece = st.one_of(digits, exponents, brackets, tricks, unicode_text, st.just(ORACLE), mutants)
    repeated = st.tuples(piece, st.integers(2, 1000)).map(lambda p: p[0] * min(p[1], 200_000 // max(len(p[0]), 1)))
    templated = st.tuples(st.sampled_from(TEMPLATES), piece).map(lambda p: p[0].format(p[1]))
    joined = st.lists(piece, min_size=2, max_size=6).map(" ".join)
    return st.one_of(piece, repeated, templated, joined)


# What a fast-forward steps again and again up to two steps before the limit: nothing, a wrong answer,
# a move, the oracle (None: no fast-forward)
FAST_FORWARD = (None, "", "9", "Up", "1,1,1", "finish[x]", "click[Buy Now]", ORACLE)


def check_episode(env, actions: list[str], fast_forward: str | None, bounds: Bounds, progress: str | None) -> None:
    """Play ``actions`` (after stepping ``fast_forward`` up to two steps before the limit, unless None)
    and assert the contract at each step; an AssertionError names the step and action."""
    seed = len(actions) % 7
    obs, _ = env.reset(seed=seed)
    unwrapped = env.unwrapped
    low, high = unwrapped.reward_range
    ended = False
    if fast_forward is not None:
        for _ in range(max(unwrapped.max_steps - 2, 0)):
            if ended:
                break
            action = (unwrapped.oracle_action() or "") if fast_forward == ORACLE else fast_forward
            obs, _, terminated, truncated, _ = env.step(action)
            ended = terminated or truncated
    for k, action in enumerate(actions):
        if action == ORACLE or action.startswith(MUTANT):
            oracle = unwrapped.oracle_action() or ""
            action = oracle if action == ORACLE else re.sub(r"\d+", lambda m: action[len(MUTANT):], oracle)
        where = f"step {k} of seed {seed}, action {action[:120]!r} ({len(action)} chars)"
        if progress:
            with open(progress, "w") as f:
                f.write(where)
        before = observation_text(obs) if not hasattr(obs, "shape") else None
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 2 * bounds.step_seconds)
        try:
            result = env.step(action)
        except Exception as error:  # the contract: no step raises
            raise AssertionError(f"{where}: raised {type(error).__name__}: {str(error)[:300]}") from error
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.monotonic() - start
        obs, reward, terminated, truncated, info = result
        assert seconds <= bounds.step_seconds, f"{where}: took {seconds:.1f} s"
        assert unwrapped.observation_space.contains(obs), f"{where}: observation outside its space"
        assert math.isfinite(reward) and low - 1e-9 <= reward <= high + 1e-9, \
            f"{where}: reward {reward} outside {unwrapped.reward_range}"
        if ended:
            assert reward == 0.0 and info["episode_over"] and not info["action_is_effective"], \
                f"{where}: stepped past the end (reward {reward}, info {info})"
            assert before is None or observation_text(obs) == before, f"{where}: observation changed past the end"
        else:
            assert info["episode_over"] is False, f"{where}: episode_over before the end"
        ended = ended or terminated or truncated


def _on_alarm(signum, frame):
    raise TimeoutError("step past twice its time bound")


def fuzz_one(env_id: str, kwargs: dict, examples: int, bounds: Bounds, progress: str | None = None) -> str | None:
    """Fuzz one env in this process; None, or what broke (hypothesis's failing example)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    warnings.filterwarnings("ignore", "Generating overly large repr")  # hostile examples are large
    env = gym.make(env_id, **kwargs)
    alarm = signal.signal(signal.SIGALRM, _on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + bounds.step_memory_mb * 2 ** 20, hard))
    try:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],  # no shrinking: a hang shrinks for ever
                  suppress_health_check=list(HealthCheck))
        @given(st.lists(hostile_text(), min_size=1, max_size=6), st.sampled_from(FAST_FORWARD))
        def episode(actions, fast_forward):
            check_episode(env, actions, fast_forward, bounds, progress)

        episode()
    except Exception as error:  # hypothesis re-raises the first failure, with its example in the notes
        notes = "\n".join(getattr(error, "__notes__", []))
        return f"{str(error)[:600]}\n{notes[:600]}".strip()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, alarm)
        env.close()
    return None


def _child(env_id, kwargs, examples, bounds, progress, queue):
    queue.put(fuzz_one(env_id, kwargs, examples, bounds, progress))


def fuzz(env_id: str, kwargs: dict | None = None, examples: int = 20, bounds: Bounds | None = None,
         timeout: float = 600.0) -> str | None:
    """Fuzz one env in a process of its own: None when it kept the contract, else what broke (a hang
    past ``timeout`` is named with the action it was stepping)."""
    bounds = bounds or Bounds()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with tempfile.NamedTemporaryFile("r", suffix=".step") as progress:
        child = context.Process(target=_child, args=(env_id, kwargs or {}, examples, bounds, progress.name, queue))
        child.start()
        deadline = time.monotonic() + timeout
        while child.is_alive() and time.monotonic() < deadline and queue.empty():
            child.join(0.2)
        if not queue.empty():
            result = queue.get()
            child.join(10)
            return result
        where = open(progress.name).read()
        child.kill()
        child.join()
        if child.exitcode not in (None, 0) and time.monotonic() < deadline:
            return f"the process died (exit {child.exitcode}) at {where}"
        return f"no answer within {timeout:.0f} s: hung at {where}"


def targets(env_ids: list[str]) -> list[tuple[str, dict]]:
    """(env id, kwargs) of every env and its scoring variants."""
    out = []
    for env_id in env_ids:
        entry = ENVIRONMENTS[env_id]
        name = entry.entry_point.split(":")[1]
        out += [(env_id, {})] + [(env_id, v) for v in VARIANTS.get(name, [])]
    return out


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


def _trickle(port: int, start: bytes, gap_s: float, give_up_s: float) -> bool:
    """Send ``start`` then a byte every ``gap_s`` until the server closes the connection (True) or
    ``give_up_s`` pass (False)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
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


# -- the viewer's file loading (`ragen view`) ---------------------------------------------------------------
# A rollouts file is data: opening one must be as safe as opening an HTML page. ``fuzz_viewer`` writes hostile
# files (every field of the wrong type, markup and huge text in every string field, unknown and client env ids,
# env_kwargs that would run code, fetch or read a file, lines that are not JSON objects) and renders each with
# ``write_report``: it must stop with the project's clear error (a ValueError naming the file) or write a page
# with no ``<script`` in it, and never run a program, open a connection or read the canary files (an audit
# hook sees every attempt, in a process of its own since a hook cannot be removed).

SCRIPT = "<script>alert(1)</script>"
WRONG_TYPES = (None, True, 7, 1.5, "x", [], {}, [SCRIPT], {SCRIPT: SCRIPT})
SIDE_EFFECTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "socket.connect",
                "urllib.Request")


def viewer_base(env_id: str, canary: str) -> dict:
    """A saved episode of ``env_id`` as an agent would have played it (its true first prompt, so a viewer that
    replayed it would step its actions), whose actions would run code, fetch and read ``canary``'s files."""
    from ragen_envs.agent.chat_env import ChatEnv
    from ragen_envs.agent.trajectory import Trajectory, Turn
    from ragen_envs.registry import system_problem

    entry = ENVIRONMENTS[env_id]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DeepCoder's weaker sandbox, made here only for its first prompt
        env = gym.make(env_id, **(entry.without_system if system_problem(entry) else {}))
        messages = ChatEnv(env).reset(seed=0)
        env.close()
    program = (f"```python\nimport socket\nopen({canary + '/ran'!r}, 'w').write('x')\n"
               "socket.create_connection(('127.0.0.1', 9))\n```")
    # a search first (an env that takes a program as its answer ends there), then the program
    turns = [Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], response=action, reasoning=SCRIPT,
                  actions=[action, "Up"], reward=0.0, format_ok=True, finish_reason="stop")
             for action in (f"search[{SCRIPT}]", program)]
    return Trajectory(env_id=env_id, group=0, seed=0, messages=messages, turns=turns).to_dict()


def hostile_kwargs(canary: str) -> list[dict]:
    """env_kwargs that would make an env run a file's code, fetch, or read a file, were a viewer to use them."""
    return [{"sandbox": "rlimit"}, {"retriever_url": "http://127.0.0.1:9/retrieve"},
            {"dataset": canary + "/data.jsonl"}, {"corpus": canary + "/corpus.jsonl", "dataset": canary},
            {"render_mode": SCRIPT, SCRIPT: SCRIPT}]


def _paths(record: dict) -> list[tuple]:
    """Every field of a saved record, as a path of keys and indices (top level, the first turn's, the
    first user message's and its parts)."""
    out = [(key,) for key in record]
    out += [("turns", 0, key) for key in record["turns"][0]]
    content = record["messages"][1]["content"]
    out += [("messages", 1, "role"), ("messages", 1, "content")]
    if isinstance(content, list):
        out += [("messages", 1, "content", k, key) for k, part in enumerate(content) for key in part]
    return out


def _with(record: dict, path: tuple, value) -> dict:
    """A deep copy of ``record`` with the field at ``path`` set to ``value``."""
    import copy

    out = copy.deepcopy(record)
    place = out
    for key in path[:-1]:
        place = place[key]
    place[path[-1]] = value
    return out


def _get(record: dict, path: tuple):
    for key in path:
        record = record[key]
    return record


def hostile_files(bases: list[dict], canary: str, examples: int, seed: int = 0):
    """(label, text or bytes) of hostile rollouts files: the sweep of every field of the first record, the env ids
    and env_kwargs of every record, lines that are not records, then ``examples`` random mixes of these."""
    import random

    from ragen_envs.registry import CLIENTS

    first = bases[0]
    paths = _paths(first)
    cases = [(f"{path} = {value!r}", _with(first, path, value)) for path in paths for value in WRONG_TYPES]
    strings = [path for path in paths if isinstance(_get(first, path), str)]
    cases += [(f"{path} = script", _with(first, path, SCRIPT)) for path in strings]
    cases += [(f"{path} = huge", _with(first, path, SCRIPT * 20_000)) for path in strings]
    cases += [(f"without {path[0]}", {k: v for k, v in first.items() if k != path[0]}) for path in paths
              if len(path) == 1]
    ids = [*ENVIRONMENTS, *CLIENTS, "Evil/Thing-v0", SCRIPT, ""]
    for base in bases:
        cases += [(f"{env_id} with {kwargs}", {**base, "env_id": env_id, "env_kwargs": kwargs})
                  for env_id in ids for kwargs in hostile_kwargs(canary)[:2 if env_id != base["env_id"] else None]]
    lines = [(label, json.dumps(record)) for label, record in cases]
    lines += [(f"line {text[:20]!r}", text) for text in
              ("[]", "1", "null", json.dumps(SCRIPT), "{", "[" * 100_000, json.dumps({"turns": SCRIPT}),
               b"\xff\xfe" + json.dumps(first).encode())]  # the last: not UTF-8
    rng = random.Random(seed)
    for k in range(examples):  # a few fields at once, of several records
        record = rng.choice(bases)
        for _ in range(rng.randint(1, 4)):
            record = _with(record, rng.choice(_paths(record)), rng.choice([*WRONG_TYPES, SCRIPT, SCRIPT * 5000]))
        lines.append((f"mix {k}", json.dumps(record) + "\n" + json.dumps(rng.choice(bases))))
    return lines


def check_view(path, out, side_effects: list) -> str | None:
    """None when viewing ``path`` stops with the project's clear error or writes a page without ``<script``, and
    had no side effect; else what went wrong."""
    from ragen_envs.cli.report import write_report

    try:
        page = write_report(path, out).read_text(encoding="utf-8")
        problem = "a raw <script in the page" if "<script" in page.lower() else None
    except ValueError as error:  # the project's clear error names the file
        problem = None if str(path) in str(error) else f"a ValueError without the file's name: {str(error)[:200]}"
    except Exception as error:
        problem = f"raised {type(error).__name__}: {str(error)[:200]}"
    if side_effects:
        problem = f"side effects {side_effects[:3]}" + (f"; {problem}" if problem else "")
        side_effects.clear()
    return problem


def view_fuzz_one(examples: int, env_ids: list[str], work: str) -> str | None:
    """Fuzz the viewer's loading in this process (``fuzz_viewer``); None, or the cases that broke."""
    from pathlib import Path

    canary = os.path.join(work, "canary")
    os.makedirs(canary)
    os.chmod(canary, 0o777)  # writable by the sandbox's user: a program that ran would leave its file
    for name in ("data.jsonl", "corpus.jsonl"):  # there to be read, were an env given them
        with open(os.path.join(canary, name), "w") as f:
            f.write(json.dumps({"question": SCRIPT, "answer": "1", "target": 1, "nums": [1]}) + "\n")
    bases = [viewer_base(env_id, canary) for env_id in env_ids]
    path, out = Path(work) / "rollouts.jsonl", Path(work) / "page.html"
    lines = hostile_files(bases, canary, examples)
    path.write_text(lines[0][1] + "\n")
    check_view(path, out, [])  # a first page: imports done before the audit hook starts listening
    side_effects = []

    def hook(event, args):
        if event in SIDE_EFFECTS or event.startswith("os.exec") or (
                event == "open" and isinstance(args[0], str) and args[0].startswith(canary)):
            side_effects.append(event if event != "open" else f"open {args[0]}")

    sys.addaudithook(hook)
    broken = []
    for label, line in lines:
        path.write_bytes(line if isinstance(line, bytes) else (line + "\n").encode())
        problem = check_view(path, out, side_effects)
        if problem:
            broken.append(f"{label[:120]}: {problem}")
    if os.path.exists(os.path.join(canary, "ran")):
        broken.append("a file's program ran")
    return "\n".join(broken[:20]) or None


def _view_child(examples, env_ids, queue):
    with tempfile.TemporaryDirectory() as work:
        try:
            queue.put(view_fuzz_one(examples, env_ids, work))
        except Exception as error:  # the fuzzer's own set-up (an env that cannot be made here)
            queue.put(f"the viewer's fuzz could not run: {type(error).__name__}: {str(error)[:300]}")


def fuzz_viewer(examples: int = 20, env_ids: list[str] | None = None, timeout: float = 600.0) -> str | None:
    """Fuzz ``ragen view``'s loading of hostile rollouts files (see above) in a process of its own, over
    ``env_ids`` (default: one env of each package whose extra is installed) and ``examples`` random mixes
    on top of the sweep: None when every file was refused clearly or rendered safely, else what broke."""
    from ragen_envs.registry import missing_modules

    if env_ids is None:  # the smoke env first (the field sweep's record), then the first of each package
        first = {}
        for entry in ENVIRONMENTS.values():
            if not missing_modules(entry):
                first.setdefault(entry.package, entry.id)
        env_ids = [env_for("smoke"), *(i for i in first.values() if i != env_for("smoke"))]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_view_child, args=(examples, env_ids, queue))
    child.start()
    deadline = time.monotonic() + timeout
    while child.is_alive() and time.monotonic() < deadline and queue.empty():
        child.join(0.2)
    if not queue.empty():
        result = queue.get()
        child.join(10)
        return result
    child.kill()
    child.join()
    return f"the viewer's fuzz died (exit {child.exitcode}) or ran past {timeout:.0f} s"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="episodes per env (hypothesis examples)")
    parser.add_argument("--envs", nargs="*", help="env ids (default: every catalogue env this machine can make)")
    parser.add_argument("--step-seconds", type=float, default=Bounds.step_seconds)
    parser.add_argument("--step-memory-mb", type=int, default=Bounds.step_memory_mb)
    parser.add_argument("--server", action="store_true", help="fuzz the env server's protocols instead")
    parser.add_argument("--viewer", action="store_true", help="fuzz `ragen view`'s loading of rollouts files instead")
    args = parser.parse_args(argv)
    if args.viewer:
        problem = fuzz_viewer(args.examples)
        print(problem or "ragen view: ok")
        return 1 if problem else 0
    if args.server:
        problems = fuzz_server(args.examples)
        print("\n".join(problems) or "env server: ok")
        return 1 if problems else 0
    env_ids = args.envs or usable_ids()
    bounds = Bounds(args.step_seconds, args.step_memory_mb)
    broken = 0
    for env_id, kwargs in targets(env_ids):
        start = time.monotonic()
        problem = fuzz(env_id, kwargs, args.examples, bounds)
        label = env_id + (f" {kwargs}" if kwargs else "")
        print(f"{label:60s} {'ok' if problem is None else 'BROKEN'}  ({time.monotonic() - start:.0f} s)", flush=True)
        if problem:
            broken += 1
            print("    " + problem.replace("\n", "\n    "), file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
