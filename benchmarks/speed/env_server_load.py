"""Load test of the env server (`ragen serve`) on 127.0.0.1: sessions/s, steps/s and request latency
at 1, 64 and 512 concurrent sessions; errors and lost steps must be 0.

The server runs in its own process (as in use); the load comes from one asyncio client with as many
connections as sessions. Each session opens, resets with its own seed, plays ``--steps`` actions
(the env's valid actions in turn, one invalid action among them; ``--oracle`` asks the server for
the oracle's move before each step instead, which for Sokoban runs its solver), checks with the
server that every step was counted, and closes. Each level is bounded: ``--sessions-per-level`` sessions
at most (default: 2 x the concurrency) and ``--level-timeout`` seconds.

    python benchmarks/speed/env_server_load.py [--env Ragen/Sokoban-v0 --levels 1 64 512 --steps 10]

``--vs-openenv`` runs OpenEnv's WebSocket protocol instead (reset, steps, state, close per session) at 1,
16 and 64 concurrent sessions, from client processes apart from the servers, against `ragen serve` and
against openenv-core's own ``create_app`` serving the same env through a thin ``Environment``
(``openenv_peer.py``), and prints the ratios:

    python benchmarks/speed/env_server_load.py --vs-openenv --env Ragen/FrozenLake-v0 [--steps 20 --rounds 3]

The table is a measurement of this machine; the test suite asserts no time (tests/remote/test_server.py
runs the same clients for correctness). "server CPU s" is the server process's CPU time during the
level: with client and server on the same cores, it tells how much of the wall time the server used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from ragen_envs.registry import ENVIRONMENTS, env_for

RESULTS = Path(__file__).resolve().parents[1] / "results"  # benchmarks/results/


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux), to tell the server's share of the load."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_session(client: httpx.AsyncClient, seed: int, steps: int, latencies: list, counts: dict,
                      oracle: bool) -> None:
    async def call(method, path, body=None):
        start = time.perf_counter()
        try:
            response = await client.request(method, path, json=body)
        except httpx.HTTPError as error:
            counts["errors"] += 1
            counts.setdefault("examples", []).append(f"{type(error).__name__}: {error}")
            return None
        latencies.append(time.perf_counter() - start)
        if response.status_code >= 400:
            counts["errors"] += 1
            counts.setdefault("examples", []).append(response.text[:200])
            return None
        return response.json() if response.content else {}

    opened = await call("POST", "/v1/sessions", {})
    if opened is None:
        return
    sid = opened["session_id"]
    actions = opened["valid_actions"] or ["1"]
    if await call("POST", f"/v1/sessions/{sid}/reset", {"seed": seed}) is not None:
        sent = 0
        for k in range(steps):
            if k == 1:
                action = "not an action"
            elif oracle:
                move = await call("POST", f"/v1/sessions/{sid}/call/oracle_action", {"args": []})
                action = (move or {}).get("result") or actions[0]
            else:
                action = actions[(seed + k) % len(actions)]
            sent += 1
            if await call("POST", f"/v1/sessions/{sid}/step", {"action": action}) is not None:
                counts["steps"] += 1
        state = await call("GET", f"/v1/sessions/{sid}")
        if state is not None:
            counts["lost"] += sent - state["step_count"]
    await call("DELETE", f"/v1/sessions/{sid}")
    counts["sessions"] += 1


async def level(url: str, concurrency: int, sessions: int, steps: int, timeout: float, oracle: bool) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    latencies: list[float] = []
    counts = {"sessions": 0, "steps": 0, "errors": 0, "lost": 0}
    gate = asyncio.Semaphore(concurrency)

    async def guarded(seed):
        async with gate:
            await one_session(client, seed, steps, latencies, counts, oracle)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:
        start = time.perf_counter()
        tasks = [asyncio.create_task(guarded(seed)) for seed in range(sessions)]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        seconds = time.perf_counter() - start
    lat = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {"concurrency": concurrency, "sessions": counts["sessions"], "unfinished": len(pending),
            "seconds": seconds, "sessions_per_s": counts["sessions"] / seconds,
            "steps_per_s": counts["steps"] / seconds, "requests": len(latencies),
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "errors": counts["errors"], "lost_steps": counts["lost"], "error_examples": counts.get("examples", [])[:3]}


# -- side by side with openenv-core's own server, over OpenEnv's WebSocket protocol (--vs-openenv) --------
async def ws_session(url: str, seed: int, steps: int, actions: list[str], latencies: list, counts: dict) -> None:
    """One OpenEnv session: reset with its seed, ``steps`` steps (timed), the state's step count, close."""
    import websockets

    def failed(what):
        counts["errors"] += 1
        counts.setdefault("examples", []).append(str(what)[:200])

    try:
        async with websockets.connect(url, max_size=None, open_timeout=60) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            reply = json.loads(await ws.recv())
            if reply.get("type") != "observation":
                return failed(reply)
            for k in range(steps):
                start = time.perf_counter()
                await ws.send(json.dumps({"type": "step", "data": {"action": actions[(seed + k) % len(actions)]}}))
                reply = json.loads(await ws.recv())
                latencies.append(time.perf_counter() - start)
                if reply.get("type") != "observation":
                    failed(reply)
                else:
                    counts["steps"] += 1
            await ws.send(json.dumps({"type": "state"}))
            state = json.loads(await ws.recv())
            counts["lost"] += steps - state.get("data", {}).get("step_count", 0)
            await ws.send(json.dumps({"type": "close"}))
            counts["sessions"] += 1
    except Exception as error:  # a refused or dropped connection: counted, the level goes on
        failed(f"{type(error).__name__}: {error}")


def ws_client(url: str, seeds: list[int], steps: int, actions: list[str], start_at: float) -> dict:
    """A client process: its sessions all at once, from the shared start time (so that no process's
    start-up counts); their latencies, counts and end time."""
    latencies, counts = [], {"sessions": 0, "steps": 0, "errors": 0, "lost": 0}

    async def run():
        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(*(ws_session(url, seed, steps, actions, latencies, counts) for seed in seeds))

    asyncio.run(run())
    return {"latencies": latencies, "end": time.time(), **counts}


def ws_level(url: str, concurrency: int, steps: int, actions: list[str], processes: int, pid: int) -> dict:
    """``concurrency`` sessions at once, from ``processes`` client processes."""
    from concurrent.futures import ProcessPoolExecutor

    shares = [list(range(i, concurrency, processes)) for i in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        start_at = time.time() + 2.0  # every client process is up by then
        futures = [pool.submit(ws_client, url, share, steps, actions, start_at) for share in shares]
        time.sleep(max(0.0, start_at - time.time()))
        before = cpu_seconds(pid)
        parts = [f.result() for f in futures]
    seconds, server_cpu = max(p["end"] for p in parts) - start_at, cpu_seconds(pid) - before
    lat = np.array([x for p in parts for x in p["latencies"]] or [0.0]) * 1000
    total = {k: sum(p[k] for p in parts) for k in ("sessions", "steps", "errors", "lost")}
    return {"concurrency": concurrency, **total, "seconds": seconds, "steps_per_s": total["steps"] / seconds,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "server_cpu_ms_per_step": 1000 * server_cpu / max(total["steps"], 1),
            "examples": [e for p in parts for e in p.get("examples", [])][:3]}


def start(command: list[str], url: str, log=None, wait_s: float = 60.0) -> subprocess.Popen:
    """The server ``command`` started, once its /health answers (at most ``wait_s``)."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(int(wait_s * 10)):
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.terminate()
    raise SystemExit(f"{' '.join(command)} did not start")


def vs_openenv(args) -> None:
    """The same WebSocket load against `ragen serve` and openenv-core's create_app, level by level."""
    import gymnasium as gym

    actions = gym.make(args.env).get_wrapper_attr("valid_actions") or ["1"]
    most = max(args.levels)
    servers = {
        "ragen serve": lambda port: [sys.executable, "-m", "ragen_envs.cli", "serve", "--env", args.env, "--port",
                                     str(port), "--max-sessions", str(2 * most), "--workers", str(args.workers)],
        "openenv create_app": lambda port: [sys.executable, str(Path(__file__).parent / "openenv_peer.py"), "--env",
                                            args.env, "--port", str(port), "--max-sessions", str(2 * most)],
    }
    print(f"{args.env}, OpenEnv WebSocket sessions of {args.steps} steps; client: {args.client_processes} "
          f"processes; each level {args.rounds} rounds")
    print(f"{'server':20s} {'sessions':>8s} {'steps/s':>8s} {'p50 ms':>7s} {'p99 ms':>7s} {'CPU ms/step':>12s} "
          f"{'errors':>6s} {'lost':>5s} {'tracebacks':>10s}")
    rows = []
    for concurrency in args.levels:
        for name, command in servers.items():
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            with tempfile.TemporaryFile("w+") as log:
                server = start(command(port), url, log)
                try:
                    runs = [ws_level(url.replace("http", "ws") + "/ws", concurrency, args.steps, actions,
                                     min(args.client_processes, concurrency), server.pid) for _ in range(args.rounds)]
                finally:
                    server.terminate()
                    server.wait(timeout=30)
                log.seek(0)
                tracebacks = log.read().count("Traceback")
            r = {"server": name, "concurrency": concurrency,
                 **{k: sum(x[k] for x in runs) for k in ("sessions", "steps", "errors", "lost")},
                 **{k: float(np.median([x[k] for x in runs]))
                    for k in ("steps_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_step")},
                 "server_tracebacks": tracebacks, "examples": [e for x in runs for e in x["examples"]][:3]}
            rows.append(r)
            print(f"{name:20s} {concurrency:8d} {r['steps_per_s']:8.0f} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} "
                  f"{r['server_cpu_ms_per_step']:12.2f} {r['errors']:6d} {r['lost']:5d} {tracebacks:10d}", flush=True)
            for example in r["examples"]:
                print(f"  error: {example}")
        ours, peer = rows[-2], rows[-1]
        print(f"{'ratio ragen/openenv':20s} {concurrency:8d} {ours['steps_per_s'] / peer['steps_per_s']:8.2f} "
              f"{ours['p50_ms'] / peer['p50_ms']:7.2f} {ours['p99_ms'] / peer['p99_ms']:7.2f} "
              f"{ours['server_cpu_ms_per_step'] / peer['server_cpu_ms_per_step']:12.2f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "env_server_vs_openenv.json"
    out.write_text(json.dumps({"env": args.env, "steps": args.steps, "rounds": args.rounds, "rows": rows}, indent=1))
    print(f"written: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=list(ENVIRONMENTS), default=env_for("default"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--steps", type=int, default=None, help="steps per session (default: 10; --vs-openenv 100)")
    parser.add_argument("--sessions-per-level", type=int, default=None, help="default: 2 x the concurrency (>= 20)")
    parser.add_argument("--level-timeout", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=64, help="the server's env threads per env")
    parser.add_argument("--oracle", action="store_true", help="ask for the oracle's move before each step")
    parser.add_argument("--vs-openenv", action="store_true",
                        help="OpenEnv's WebSocket sessions against ragen serve and openenv-core's create_app, side "
                             "by side (levels default to 1 16 64)")
    parser.add_argument("--client-processes", type=int, default=2, help="--vs-openenv: client processes")
    parser.add_argument("--rounds", type=int, default=3, help="--vs-openenv: runs per level and server (median)")
    args = parser.parse_args()
    if args.vs_openenv:
        if args.levels == [1, 64, 512]:
            args.levels = [1, 16, 64]
        args.steps = args.steps or 100
        return vs_openenv(args)
    args.steps = args.steps or 10

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start([sys.executable, "-m", "ragen_envs.cli", "serve", "--env", args.env, "--port", str(port),
                    "--max-sessions", str(max(args.levels) * 2), "--workers", str(args.workers)], url, wait_s=30)
    try:
        per_session = (2 if args.oracle else 1) * args.steps + 4
        asked = " (each after asking the oracle)" if args.oracle else ""
        print(f"{args.env} on {url}: {args.steps} steps per session{asked}, {per_session} requests per session")
        print(f"{'sessions':>8s} {'done':>6s} {'seconds':>8s} {'sessions/s':>11s} {'steps/s':>8s} {'p50 ms':>7s} "
              f"{'p99 ms':>7s} {'errors':>6s} {'lost':>5s} {'server CPU s':>13s}")
        rows = []
        for concurrency in args.levels:
            sessions = args.sessions_per_level or max(20, 2 * concurrency)
            before = cpu_seconds(server.pid)
            r = asyncio.run(level(url, concurrency, sessions, args.steps, args.level_timeout, args.oracle))
            r["server_cpu_s"] = cpu_seconds(server.pid) - before
            rows.append(r)
            print(f"{concurrency:8d} {r['sessions']:6d} {r['seconds']:8.1f} {r['sessions_per_s']:11.1f} "
                  f"{r['steps_per_s']:8.1f} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} {r['errors']:6d} "
                  f"{r['lost_steps']:5d} {r['server_cpu_s']:13.1f}", flush=True)
            for example in r["error_examples"]:
                print(f"  error: {example}")
        health = httpx.get(f"{url}/health").json()
        print(f"server still healthy after the load: {health['status']}, {health['sessions']} sessions open")
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "env_server_load.json"
        out.write_text(json.dumps({"env": args.env, "steps": args.steps, "rows": rows, "after": health}, indent=1))
        print(f"written: {out}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
