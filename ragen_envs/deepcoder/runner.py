"""Runs one submission's tests inside the sandbox (standard library only; started by ``sandbox.py``).

Reads a job from stdin: ``{"program": str, "tests": [...], "limits": {...}, "uid": int | null}``, where
each test holds only its input (``stdio``: ``stdin``; ``call``: ``fn_name`` and JSON ``args``;
``assert``: ``prelude`` and ``code``). Expected outputs never enter the sandbox: the host compares.

Each test runs in a forked child that, before any submitted code runs, makes a fresh work folder,
drops to ``uid`` (when the runner is root), sets its resource limits and points stdin, stdout and
stderr at files. The runner (still root, so the child cannot signal it) waits up to the wall-clock
limit, kills whatever the test left running, and writes one JSON record per test to stdout:
``{"status": "ok" | "error" | "timeout" | "killed", "value", "error", "stdout", "stderr", "seconds"}``.
"""

import json
import os
import resource
import signal
import sys
import time
import traceback


def _limit(name, value):
    try:
        resource.setrlimit(name, (value, value))
    except (ValueError, OSError):
        pass  # a limit the platform lacks or will not lower further


def _plain(value):
    """A JSON-safe copy of a return value (tuples as lists; anything else by its repr)."""
    return json.loads(json.dumps(value, default=repr))


def _child(program, test, limits, uid, folder, result_w):
    os.setsid()
    os.chdir(folder)
    if uid is not None and os.getuid() == 0:
        os.chown(folder, uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    stdin = os.open("stdin.txt", os.O_RDONLY)
    out = os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    mb = 1024 * 1024
    _limit(resource.RLIMIT_CPU, limits["cpu_seconds"])
    _limit(resource.RLIMIT_AS, limits["memory_mb"] * mb)
    _limit(resource.RLIMIT_FSIZE, limits["file_mb"] * mb)
    _limit(resource.RLIMIT_NOFILE, limits["open_files"])
    _limit(resource.RLIMIT_NPROC, limits["processes"])
    _limit(resource.RLIMIT_CORE, 0)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    record = {"status": "ok"}
    try:
        kind = test["kind"]
        scope = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": __builtins__}
        exec(compile(program, "<solution>", "exec"), scope)
        if kind == "call":
            holder = scope.get("Solution")
            fn = getattr(holder(), test["fn_name"]) if isinstance(holder, type) and hasattr(holder, test["fn_name"]) \
                else scope.get(test["fn_name"])
            if fn is None:
                raise NameError(f"the program defines no function {test['fn_name']!r}")
            record["value"] = _plain(fn(*test["args"]))
        elif kind == "assert":
            exec(compile(test["prelude"], "<test>", "exec"), scope)
            exec(compile(test["code"], "<test>", "exec"), scope)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            record = {"status": "error", "error": f"SystemExit: {stop.code}"}
    except BaseException as error:  # the submission's own failure, reported, never raised here
        frames = traceback.extract_tb(error.__traceback__)
        line = next((f.lineno for f in reversed(frames) if f.filename in ("<solution>", "<test>")), None)
        record = {"status": "error", "error": f"{type(error).__name__}: {error}"[:500]
                  + (f" (line {line})" if line else "")}
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os.write(result_w, json.dumps(record).encode()[:65536])
    os._exit(0)


def _kill_all_but(keep):
    """Kill every process of this pid namespace but ``keep`` (what a test forked and left behind)."""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def _read(path, limit):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def run_test(program, test, limits, uid, index, own_namespace):
    folder = os.path.join(limits["work_dir"], f"t{index}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "stdin.txt"), "w") as f:
        f.write(test.get("stdin", ""))
    result_r, result_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        try:
            _child(program, test, limits, uid, folder, result_w)
        finally:
            os._exit(1)
    os.close(result_w)
    status, deadline = None, start + limits["wall_seconds"]
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.002)
    else:
        status = None
    seconds = time.monotonic() - start
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if own_namespace:
        _kill_all_but({1, os.getpid()})
    if status is None:
        os.waitpid(pid, 0)
    report = b""
    os.set_blocking(result_r, False)
    try:
        report = os.read(result_r, 65536)
    except OSError:
        pass
    os.close(result_r)
    cap = limits["output_chars"]
    out = {"stdout": _read(os.path.join(folder, "stdout.txt"), cap),
           "stderr": _read(os.path.join(folder, "stderr.txt"), cap)[-cap:], "seconds": round(seconds, 4)}
    if status is None:
        return {**out, "status": "timeout", "error": f"no result within {limits['wall_seconds']} s"}
    try:
        record = json.loads(report)
    except ValueError:
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        why = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit",
               signal.SIGKILL: "killed (memory or CPU limit)", signal.SIGSEGV: "segmentation fault"}.get(
            signum, f"signal {signum}" if signum else f"exit status {os.WEXITSTATUS(status)}")
        return {**out, "status": "killed", "error": f"the test process ended without a result: {why}"}
    return {**out, **record}


def main():
    job = json.loads(sys.stdin.read())
    own_namespace = os.getpid() <= 3  # bubblewrap's fresh pid namespace: everything else here is the test's
    results = [run_test(job["program"], test, job["limits"], job.get("uid"), i, own_namespace)
               for i, test in enumerate(job["tests"])]
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
