"""Load test of the env server (`ragen serve`) on 127.0.0.1: sessions/s, steps/s and request latency
at 1, 64 and 512 concurrent sessions; errors and lost steps must be 0.

The server runs in its own process (as in use); the load comes from one asyncio client with as many
connections as sessions. Each session opens, resets with its own seed, plays ``--steps`` actions
(the env's valid actions in turn, one invalid action among them; ``--oracle`` asks the server for
the oracle's move before each step instead, which for Sokoban runs its solver), checks with the
server that every step was counted, and closes. Each level is bounded: ``--sessions-per-level`` sessions
at most (default: 2 x the concurrency) and ``--level-timeout`` seconds.

    python benchmarks/env_server_load.py [--env Ragen/Sokoban-v0 --levels 1 64 512 --steps 10]

The table is a measurement of this machine; the test suite asserts no time (tests/test_server.py
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
import time
from pathlib import Path

import httpx
import numpy as np

from ragen_envs.registry import ENVIRONMENTS, env_for

RESULTS = Path(__file__).parent / "results"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=list(ENVIRONMENTS), default=env_for("default"))
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 512])
    parser.add_argument("--steps", type=int, default=10, help="steps per session")
    parser.add_argument("--sessions-per-level", type=int, default=None, help="default: 2 x the concurrency (>= 20)")
    parser.add_argument("--level-timeout", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=32, help="the server's env threads")
    parser.add_argument("--oracle", action="store_true", help="ask for the oracle's move before each step")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "ragen_envs.cli", "serve", "--env", args.env, "--port", str(port),
                               "--max-sessions", str(max(args.levels) * 2), "--workers", str(args.workers)],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("the server did not start")
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
