"""Runs one submission's tests inside the sandbox (standard library only; started by ``sandbox.py``).

Reads a job on stdin: ``{"program": str, "tests": [...], "limits": {...}}``. Each test holds only its
input (``stdio``: ``stdin``; ``call``: ``fn_name`` and encoded ``args``; ``assert``: ``trusted``,
``prelude``, ``code``, ``fn_name`` and ``candidate``, the name the asserts call it by). Expected
outputs of stdin/stdout and call tests never enter the sandbox: the host compares them.

Per test, a *zygote* started before the job was read forks the *submission* process, which holds
only its program and its test's input, and runs nothing of the harness's that matters: its stdin,
stdout and stderr are pipes the runner pumps; a ``call`` test's
return value comes back encoded as plain data (``encode``; an object cannot fake equality) and the
host compares it; an ``assert`` test is judged by a separate *judge* process, forked before the
submission runs, that executes the problem's own code and the asserts and reaches the submission
only through a pipe that carries plain values (``candidate(...)`` is a proxy). Verdicts are never
written by the process that ran submitted code. Any exit before a test completes (SystemExit,
``os._exit``, a signal, a closed pipe) fails that test; for stdin/stdout programs a normal exit or
``SystemExit(0)`` is their end, and their output is what is judged.

What the submission can still do, and why it gains nothing: return any plain value (so can a real
solution; expected values are hidden), print anything (stdout is compared on the host), exit or crash
(the test fails), fill its scratch space or spend its CPU and wall time (limits; the test fails), and
kill its own process group. It cannot reach the judge or the runner: every other descriptor is closed
before its code runs, both are non-dumpable (no ``/proc/PID/mem`` or ``/proc/PID/fd``), ``ptrace`` and
``process_vm_*`` are denied by the sandbox's seccomp filter, and the runner is PID 1 of the sandbox's
PID namespace, which ignores signals sent from inside. The runner's result channel (stdout) starts
with a per-run secret that reaches the runner on descriptor ``argv[1]`` and is read only after the
last submission process is gone, so no process that ran submitted code ever holds it.
"""

import builtins
import json
import os
import resource
import select
import selectors
import signal
import socket
import sys
import tempfile
import time

MAX_DEPTH = 100


# -- plain values across process boundaries (the host uses these too) ---------------------------------
def encode(value, depth=0):
    """A JSON-ready form of a plain value: None, bool, int, float, str, bytes, complex, and lists,
    tuples, dicts, sets and frozensets of them (exact types: a subclass could fake equality)."""
    if depth > MAX_DEPTH:
        raise ValueError("a value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if value == value and abs(value) != float("inf") else {"float": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [encode(value.real), encode(value.imag)]}
    raise TypeError(f"a {kind.__name__} object (only None, bool, int, float, str, bytes, complex, list, tuple, "
                    f"dict, set and frozenset values are passed)")


def decode(data, depth=0):
    """The value ``encode`` gave ``data`` for."""
    if depth > MAX_DEPTH:
        raise ValueError("a value nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is dict and len(data) == 1:
        (tag, body), = data.items()
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag in ("tuple", "set", "frozenset") and type(body) is list:
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(v, depth + 1) for v in body)
        if tag == "dict" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "complex" and type(body) is list and len(body) == 2:
            return complex(decode(body[0]), decode(body[1]))
    raise ValueError("not an encoded value")


# -- framing: a 4-byte length, then JSON ----------------------------------------------------------------
def _send(fd, record):
    data = json.dumps(record).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd, limit):
    """The next record on ``fd``; EOFError when the writer is gone, ValueError when it sends too much."""
    head = _read_exactly(fd, 4)
    size = int.from_bytes(head, "big")
    if size > limit:
        raise ValueError(f"a message of {size} bytes (at most {limit})")
    return json.loads(_read_exactly(fd, size))


def _read_exactly(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- the processes of one test ----------------------------------------------------------------------
def _limit(name, value):
    try:
        resource.setrlimit(name, (value, value))
    except (ValueError, OSError):
        pass  # a limit the platform lacks or will not lower further


def _set_limits(limits, processes=True):
    mb = 1024 * 1024
    _limit(resource.RLIMIT_CPU, limits["cpu_seconds"])
    _limit(resource.RLIMIT_AS, limits["memory_mb"] * mb)
    _limit(resource.RLIMIT_FSIZE, limits["file_mb"] * mb)
    _limit(resource.RLIMIT_NOFILE, limits["open_files"])
    _limit(resource.RLIMIT_CORE, 0)
    if processes:
        _limit(resource.RLIMIT_NPROC, limits["processes"])


def _keep_only(fds):
    """Close every descriptor but ``fds`` (what this process inherited from the runner)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _error_text(error):
    return f"{type(error).__name__}: {error}"[:500]


def _submission(program, test, limits, folder, stdio, channel):
    """The forked submission process: never returns."""
    try:
        os.setsid()
        os.chdir(folder)
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        _keep_only({0, 1, 2, *channel})
        _set_limits(limits)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
    except BaseException:
        os._exit(70)
    kind = test["kind"]
    scope = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    code = 0
    try:
        exec(compile(program, "<solution>", "exec"), scope)
        if kind == "call":
            value = _function(scope, test["fn_name"])(*decode(test["args"]))
            _flush()
            _send(channel[0], _capped({"value": encode(value)}, limits["value_kb"] << 10))
        elif kind == "assert":
            _serve(_function(scope, test["fn_name"]), channel, limits["value_kb"] << 10)
    except SystemExit as stop:
        if kind != "stdio" or stop.code not in (None, 0):
            code = 1
            _report(kind, channel, f"SystemExit: {stop.code} (the program exited before the test ended)")
    except BaseException as error:  # the submission's own failure, reported, never raised here
        code = 1
        _report(kind, channel, _error_text(error))
    _flush()
    os._exit(code)


def _function(scope, name):
    holder = scope.get("Solution")
    fn = getattr(holder(), name) if isinstance(holder, type) and hasattr(holder, name) else scope.get(name)
    if fn is None:
        raise NameError(f"the program defines no function {name!r}")
    return fn


def _serve(fn, channel, limit):
    """Answer the judge's calls until it hangs up."""
    requests, answers = channel
    while True:
        try:
            call = _receive(requests, limit)
        except EOFError:
            return
        try:
            record = {"value": encode(fn(*decode(call["args"])))}
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as error:
            record = {"error": _error_text(error)}
        _flush()
        _send(answers, _capped(record, limit))


def _capped(record, limit):
    """``record``, or an error in its place when it is larger than the runner reads."""
    if len(json.dumps(record)) > limit:
        return {"error": f"ValueError: the returned value is over {limit // 1024} KB"}
    return record


def _report(kind, channel, text):
    """A failure the runner may show; it can only ever fail the test."""
    try:
        print(text, file=sys.stderr)
        if kind == "call":
            _send(channel[0], {"error": text})
    except BaseException:
        pass


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


class Candidate:
    """The judge's stand-in for the submission's function: each call crosses the pipe as plain data."""

    def __init__(self, requests, answers, limit):
        self.requests, self.answers, self.limit = requests, answers, limit

    def __call__(self, *args):
        try:
            _send(self.requests, {"args": encode(list(args))})
            record = _receive(self.answers, self.limit)
        except (EOFError, OSError):
            raise RuntimeError("the program exited before the call returned") from None
        if "error" in record:
            raise RuntimeError(f"the call raised {record['error']}")
        return decode(record["value"])


def _judge(test, limits, channel, verdict):
    """The forked judge process: runs the problem's own code and the asserts; never returns."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        _keep_only({0, 1, 2, *channel, verdict})
        _set_limits(limits, processes=False)
        scope = {"__name__": "judge", "__builtins__": builtins}
        exec(compile(test.get("trusted", ""), "<problem>", "exec"), scope)
        scope[test.get("candidate", test["fn_name"])] = Candidate(*channel, limits["value_kb"] << 10)
        exec(compile(test.get("prelude", ""), "<test>", "exec"), scope)
        exec(compile(test["code"], "<test>", "exec"), scope)
        record = {"status": "ok"}
    except BaseException as error:
        record = {"status": "error", "error": _error_text(error)}
    try:
        _send(verdict, record)
    finally:
        os._exit(0)


def _fork(target, *args):
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(70)
    return pid


# -- the runner ------------------------------------------------------------------------------------
class Pump:
    """The runner's side of a test's pipes: stdin written; stdout, stderr and the record pipes read,
    each up to its cap (the rest is drained and dropped, so a writer never blocks on a full pipe)."""

    def __init__(self, stdin_data, writes, caps):
        self.selector = selectors.DefaultSelector()
        self.pending = memoryview(stdin_data)
        self.caps = caps
        self.buffers = {fd: bytearray() for fd in caps}
        for fd in (writes, *caps):
            os.set_blocking(fd, False)
        self.writes = writes
        if self.pending:
            self.selector.register(writes, selectors.EVENT_WRITE)
        else:
            os.close(writes)
        for fd in caps:
            self.selector.register(fd, selectors.EVENT_READ)

    def step(self, timeout):
        for key, _ in self.selector.select(timeout):
            fd = key.fd
            try:
                if fd == self.writes:
                    self.pending = self.pending[os.write(fd, self.pending[:65536]):]
                    done = not self.pending
                else:
                    chunk = os.read(fd, 65536)
                    room = self.caps[fd] - len(self.buffers[fd])
                    self.buffers[fd] += chunk[:max(room, 0)]
                    done = not chunk
            except BlockingIOError:
                continue
            except OSError:  # the reader of stdin is gone
                done = True
            if done:
                self.selector.unregister(fd)
                os.close(fd)

    def open(self):
        return bool(self.selector.get_map())

    def close(self):
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fd)
            os.close(key.fd)


def _record(data):
    """The first framed record in ``data``, or None."""
    if len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        return None
    try:
        return json.loads(bytes(data[4:4 + int.from_bytes(data[:4], "big")]))
    except ValueError:
        return None


class Zygote:
    """The process every submission process is forked from. It starts before the runner reads the
    job, so a submission's memory holds its own program and test input, never the job (the problem's
    reference code, the asserts with their expected values) nor the result channel's secret."""

    def __init__(self):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            self._serve(theirs)
        theirs.close()
        self.alive = True

    @staticmethod
    def _serve(sock):
        """Fork a submission process per request; report its pid, then its exit status."""
        try:
            while True:
                message, fds, _, _ = socket.recv_fds(sock, 16, 16)
                if not message:
                    break
                payload, *child_fds = fds
                with open(payload, "rb") as f:
                    request = json.loads(f.read())
                pid = _fork(_submission, request["program"], request["test"], request["limits"], request["folder"],
                            child_fds[:3], tuple(child_fds[3:]))
                for fd in child_fds:
                    os.close(fd)
                sock.send(str(pid).encode())
                sock.send(str(os.waitpid(pid, 0)[1]).encode())
        finally:
            os._exit(0)

    def start(self, request, fds):
        """A submission process for ``request`` with ``fds`` (stdin, stdout, stderr, then its channel);
        its pid, or None when the zygote is gone (a test killed it: the rest fail)."""
        if not self.alive:
            return None
        payload_r, payload_w = os.pipe()
        try:
            socket.send_fds(self.sock, [b"run"], [payload_r, *fds])
            os.close(payload_r)
            view = memoryview(json.dumps(request).encode())
            while view:
                view = view[os.write(payload_w, view):]
            os.close(payload_w)
            return int(self.sock.recv(32))
        except (OSError, ValueError):
            self.alive = False
            return None

    def status(self, timeout):
        """The submission's wait status once it has ended, else None (also when the zygote is gone)."""
        if not self.alive or not select.select([self.sock], [], [], timeout)[0]:
            return None
        try:
            return int(self.sock.recv(32))
        except (OSError, ValueError):  # closed: a test killed the zygote
            self.alive = False
            return None


def _end_all(own_namespace, pids, spare):
    """Kill whatever the test left running and reap what is the runner's to reap."""
    if own_namespace:
        # PID 1 of the namespace: every process but the runner and the zygote, until none is left
        # (a SIGKILLed process cannot fork again, so this ends however fast a test forks).
        for _ in range(2000):
            others = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, *spare)]
            if not others:
                break
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _reap()
            time.sleep(0.001)
        return
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    _reap()


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def run_test(program, test, limits, work, own_namespace, zygote, stop_at):
    folder = tempfile.mkdtemp(prefix="t", dir=work)  # a new name: never a path an earlier test planted
    cap = limits["output_chars"] * 4
    limit = limits["value_kb"] << 10  # the largest record: a return value, a judge's call or verdict
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    kind = test["kind"]
    start = time.monotonic()
    judge = verdict_r = result_r = None
    if kind == "assert":
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        verdict_r, verdict_w = os.pipe()
        judge = _fork(_judge, test, limits, (req_w, ans_r), verdict_w)
        channel = (req_r, ans_w)
        for fd in (req_w, ans_r, verdict_w):
            os.close(fd)
    else:
        result_r, result_w = os.pipe()
        channel = (result_w,)
    # the submission gets its own program and input only
    request = {"program": program, "limits": limits, "folder": folder,
               "test": {k: test[k] for k in ("kind", "fn_name", "args") if k in test}}
    pid = zygote.start(request, [stdin_r, out_w, err_w, *channel])
    for fd in (stdin_r, out_w, err_w, *channel):
        os.close(fd)
    caps = {out_r: cap, err_r: cap, **{fd: limit + 4 for fd in (result_r, verdict_r) if fd is not None}}
    pump = Pump(test.get("stdin", "").encode(), stdin_w, caps)
    deadline = min(start + limits["wall_seconds"], stop_at)
    status = None
    while pid is not None and zygote.alive and time.monotonic() < deadline:
        if judge is not None:  # an assert test ends with its judge
            done, code = os.waitpid(judge, os.WNOHANG)
            status = code if done else None
        else:
            status = zygote.status(0)
        if status is not None:
            break
        # select wakes on output and on the pipes' end; with none left open it is a short sleep
        pump.step(min(0.02 if pump.open() else 0.002, max(0.0, deadline - time.monotonic())))
    seconds = time.monotonic() - start
    _end_all(own_namespace, [p for p in (pid, judge) if p], (zygote.pid,))
    if pid is not None and (judge is not None or status is None):
        zygote.status(2.0)  # the killed submission's status: the zygote's next message
    drain_until = time.monotonic() + 1.0  # every writer is dead: what is left in the pipes arrives now
    while pump.open() and time.monotonic() < drain_until:
        pump.step(0.05)
    pump.close()
    out = {"stdout": bytes(pump.buffers[out_r][:cap]).decode("utf-8", "replace")[:limits["output_chars"]],
           "stderr": bytes(pump.buffers[err_r][-cap:]).decode("utf-8", "replace")[-limits["output_chars"]:],
           "seconds": round(seconds, 4)}
    if pid is None or (status is None and not zygote.alive):
        return {**out, "status": "killed", "error": "the test broke the sandbox (it killed the process tests start "
                                                    "from); this and later tests fail"}
    if status is None:
        why = (f"no result within {limits['wall_seconds']} s" if deadline < stop_at else
               f"the run's {limits['attempt_seconds']} s for all its tests ran out")
        return {**out, "status": "timeout", "error": why}
    if kind == "assert":
        verdict = _record(pump.buffers[verdict_r]) or {"status": "killed", "error": "the judge ended without a verdict"}
        return {**out, "status": verdict.get("status"), "error": verdict.get("error", "")}
    record = _record(pump.buffers[result_r]) if kind == "call" else None
    if record is not None and "error" in record:
        return {**out, "status": "error", "error": str(record["error"])[:500]}
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        if kind == "stdio":
            return {**out, "status": "ok"}
        if record is not None and "value" in record:
            return {**out, "status": "ok", "value": record["value"]}
        return {**out, "status": "error", "error": "the program exited before returning a value"}
    if os.WIFEXITED(status):
        why = out["stderr"].strip().splitlines()[-1:] or [f"exit status {os.WEXITSTATUS(status)}"]
        return {**out, "status": "error", "error": why[0][:500]}
    signum = os.WTERMSIG(status)
    why = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit",
           signal.SIGKILL: "killed (memory or CPU limit)", signal.SIGSEGV: "segmentation fault"}.get(
        signum, f"signal {signum}")
    return {**out, "status": "killed", "error": f"the test process ended without a result: {why}"}


def _not_dumpable():
    """Keep processes of the same uid out of this one's memory and descriptors (/proc/PID/mem, /fd)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass  # defence in depth only: seccomp already denies ptrace


def main():
    _not_dumpable()
    secret_fd = int(sys.argv[1])
    own_namespace = os.getpid() == 1  # bubblewrap's fresh pid namespace, with the runner as its init
    zygote = Zygote()  # before the job is read
    job = json.loads(sys.stdin.read())
    limits = job["limits"]
    stop_at = time.monotonic() + limits["attempt_seconds"]
    results = []
    for test in job["tests"]:
        if time.monotonic() >= stop_at:  # a slow or hanging program: the rest are not started
            results.append({"status": "timeout", "error": f"not run: the run's {limits['attempt_seconds']} s "
                                                          f"for all its tests ran out"})
        else:
            results.append(run_test(job["program"], test, limits, limits["work_dir"], own_namespace, zygote,
                                    stop_at))
    zygote.sock.close()
    secret = os.read(secret_fd, 256).decode()
    sys.stdout.write(secret + "\n" + json.dumps(results))


if __name__ == "__main__":
    main()
