"""Running untrusted programs: every test of one submission in one sandbox start.

Model code is hostile. The default backend, ``Bubblewrap``, starts ``runner.py`` under bubblewrap
(``bwrap``, Debian package ``bubblewrap``) with:
- no network (a new network namespace holds only its own loopback), new pid, ipc and uts namespaces,
  ``--die-with-parent`` and ``--new-session``;
- read-only binds of ``/usr`` and of the Python installation only (no ``/etc``, no home), a private
  tmpfs for ``/tmp`` and the work folder, a cleared environment, no new privileges;
- capabilities dropped to the three the runner needs to drop each test to an unprivileged uid
  (``nobody``) and to kill what the test leaves behind.
Inside, each test is a forked child with resource limits (address space, CPU seconds, file size, open
files, processes), a wall-clock timeout and capped output; see ``runner.py``. Only test inputs enter
the sandbox; outputs are compared here, so a submission cannot read the expected answers.

Without bubblewrap, ``make_sandbox`` refuses (a ``SandboxUnavailable`` naming the package) unless the
user opts into ``RlimitOnly``: the same runner in a plain subprocess with the same limits but no
namespaces (the network and the file system stay visible), with a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

RUNNER = Path(__file__).with_name("runner.py")
NOBODY = 65534
INSIDE_PYTHON = "/sandbox/python"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
                "or pass sandbox='rlimit' to accept a weaker sandbox without namespaces")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 4  # CPU time per test
    wall_seconds: float = 6.0  # wall-clock time per test
    memory_mb: int = 512  # address space per test process
    file_mb: int = 16  # largest file a test may write (its stdout included)
    open_files: int = 64  # open file descriptors per test process
    processes: int = 32  # processes of the test's uid (fork bombs stop here)
    output_chars: int = 4096  # captured stdout / stderr per test

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {value!r}")


@dataclass(frozen=True)
class Run:
    """What one test did: status "ok" (ran to the end), "error" (raised), "timeout" or "killed"."""
    status: str
    value: object = None  # a call test's return value (JSON)
    error: str = ""
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


class SandboxUnavailable(RuntimeError):
    """No sandbox of the kind asked for can run here."""


class Sandbox:
    """Runs ``program`` against test inputs (``stdio``: stdin; ``call``: fn_name, args; ``assert``:
    prelude, code) and returns one ``Run`` per test. Never raises for what the program does."""

    name = "sandbox"

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits

    def run(self, program: str, tests: list[dict]) -> list[Run]:
        if not tests:
            return []
        with tempfile.TemporaryDirectory(prefix="ragen-sandbox-") as host_dir:
            command, work_dir, uid = self._command(Path(host_dir))
            job = {"program": program, "tests": tests, "uid": uid,
                   "limits": {**asdict(self.limits), "work_dir": work_dir}}
            budget = len(tests) * (self.limits.wall_seconds + 0.5) + 10
            try:
                process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, start_new_session=True, cwd=host_dir,
                                           env=self._environment())
            except OSError as error:
                raise SandboxUnavailable(f"{self.name} could not start: {error}") from None
            try:
                out, err = process.communicate(json.dumps(job).encode(), timeout=budget)
            except subprocess.TimeoutExpired:
                _kill(process)
                return [Run("timeout", error=f"the sandbox ran past {budget:.0f} s")] * len(tests)
            finally:
                _kill(process)
        try:
            records = json.loads(out[:50_000_000])
            return [Run(**{k: r.get(k) for k in Run.__dataclass_fields__ if k in r}) for r in records] + \
                [Run("killed", error="the sandbox stopped before this test")] * (len(tests) - len(records))
        except (ValueError, TypeError):
            detail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {process.returncode}"]
            return [Run("killed", error=f"the sandbox failed: {detail[0][:300]}")] * len(tests)

    def _command(self, host_dir: Path) -> tuple[list[str], str, int | None]:
        raise NotImplementedError

    def _environment(self) -> dict:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class Bubblewrap(Sandbox):
    name = "bubblewrap"

    def __init__(self, limits: Limits = Limits(), bwrap: str | None = None):
        super().__init__(limits)
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailable(
                f"the code sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}")

    def _command(self, host_dir: Path):
        prefix = Path(sys.base_prefix)
        python = Path(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable).name
        root = os.geteuid() == 0
        command = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid",
                   "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if not root:
            command.append("--unshare-user")  # unprivileged: a user namespace with only this uid
        command += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
            link = Path("/") / name
            if link.is_symlink():
                command += ["--symlink", os.readlink(link), f"/{name}"]
            elif link.is_dir():
                command += ["--ro-bind", str(link), f"/{name}"]
        command += ["--perms", "0755", "--dir", "/sandbox", "--ro-bind", str(prefix), INSIDE_PYTHON,
                    "--ro-bind", str(RUNNER), "/sandbox/runner.py",
                    "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
                    "--perms", "0777", "--tmpfs", "/work", "--chdir", "/work", "--clearenv",
                    "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work",
                    "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
                    "--setenv", "LD_LIBRARY_PATH", f"{INSIDE_PYTHON}/lib", "--cap-drop", "ALL"]
        if root:
            command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL",
                        "--cap-add", "CAP_CHOWN"]
        command += [f"{INSIDE_PYTHON}/bin/{python}", "-I", "-S", "/sandbox/runner.py"]
        return command, "/work", NOBODY if root else None


class RlimitOnly(Sandbox):
    """The runner in a plain subprocess: the same limits, no namespaces. Weaker: opt in only."""

    name = "rlimit"

    def __init__(self, limits: Limits = Limits()):
        super().__init__(limits)
        warnings.warn("the rlimit-only code sandbox is weaker: it limits resources but not the network or the "
                      "file system; prefer bubblewrap (apt-get install bubblewrap)", stacklevel=3)

    def _command(self, host_dir: Path):
        work = host_dir / "work"
        work.mkdir()
        work.chmod(0o777)
        host_dir.chmod(0o755)
        python = getattr(sys, "_base_executable", sys.executable)
        # As root, tests drop to nobody, which must still be able to import the standard library.
        drop = os.geteuid() == 0 and _others_can_read(Path(os.__file__).parent) and _others_can_read(RUNNER)
        return [python, "-I", "-S", str(RUNNER)], str(work), NOBODY if drop else None


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
