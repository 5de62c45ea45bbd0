"""Red team: hostile submissions to DeepCoder, as an RL policy searching for reward would write them.

Every attack must earn reward 0 with a failure summary that says why, and leave the host as it was:
its sysctls, files, processes (nothing of the sandbox outlives the step) and memory (scratch space is
bounded). The symlink attack aims at the UTS-namespaced ``kernel/hostname``: harmless, and proof enough.
"""

import os
import re
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest

from tests.envs.test_deepcoder import needs_sandbox
from tests.envs.test_deepcoder_sandbox import ATTACKS
from ragen_envs.deepcoder import problems
from ragen_envs.deepcoder.sandbox import Bubblewrap, Limits

pytestmark = needs_sandbox

SYSCTLS = ["kernel/hostname", "kernel/domainname", "kernel/printk_ratelimit", "vm/overcommit_memory"]
MARKER = "4242.4242"  # a `sleep` argument that marks processes an attack leaves behind
LIMITS = Limits(cpu_seconds=1, wall_seconds=2.0)  # each resource attack runs into them: keep them short


def problem(problem_id):
    return next(p for p in problems.builtin() if p.id == problem_id)


STDIO = problem("generated/243")  # stdin/stdout tests
CALLS = problem("HumanEval/127")  # call tests, compared on the host
ASSERTS = problem("HumanEval/33")  # assert tests, judged in the sandbox
LOOPS = problem("HumanEval/32")  # an assert loop over the problem's own helper (poly)


def leftovers():
    """Host processes an attack left running (marked with MARKER)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


@contextmanager
def unchanged_host(watch: Path):
    sysctls = {name: Path("/proc/sys", name).read_text() for name in SYSCTLS}
    files = sorted(watch.rglob("*"))
    yield
    assert {name: Path("/proc/sys", name).read_text() for name in SYSCTLS} == sysctls
    assert sorted(watch.rglob("*")) == files
    assert leftovers() == []


def attack(tmp_path, program, target=STDIO):
    """Submit ``program`` for ``target``; (reward, the observation's feedback), the host unchanged."""
    env = gym.make("Ragen/DeepCoder-v0", limits=LIMITS)
    env.reset(seed=0, options={"problem": target})
    with unchanged_host(tmp_path):
        obs, reward, terminated, truncated, info = env.step(f"```python\n{program}\n```")
    assert reward == 0 and not info["success"] and terminated, (reward, obs)
    feedback = obs[len(target.statement):]
    assert f"Passed 0 of {len(target.tests)} tests. First failure:" in feedback
    return reward, feedback


def inside(program, tests=({"kind": "stdio", "stdin": ""},)):
    """What ``program`` prints in the sandbox (to look at what it could see and do)."""
    return Bubblewrap(LIMITS).run(program, list(tests))[0].stdout


# -- 1. the host's kernel settings, through links planted for the harness ------------------------------
def test_links_planted_for_later_tests_reach_nothing(tmp_path):
    target = "/proc/sys/kernel/hostname"
    program = (f"import os\nfor i in range(8):\n"
               f"    for d in (f'/work/t{{i}}', f'/tmp/t{{i}}'):\n"
               f"        for name in ('stdin.txt', 'stdout.txt', 'stderr.txt'):\n"
               f"            try:\n                os.makedirs(d, exist_ok=True)\n"
               f"                os.symlink('{target}', os.path.join(d, name))\n            except OSError:\n"
               f"                pass\n"
               f"for i in range(8):\n    try:\n        os.symlink('{target}', f'/work/t{{i}}x')\n    except OSError:\n"
               f"        pass\ntry:\n    open('{target}', 'w').write('pwned')\n    print('WROTE')\n"
               f"except OSError as e:\n"
               f"    print('denied', e.errno)\nprint(input())")
    _, feedback = attack(tmp_path, program)
    assert "WROTE" not in feedback
    assert inside(program, [{"kind": "stdio", "stdin": "a\n"}] * 3).startswith("denied 13\n")


def test_proc_sys_and_host_files_are_not_writable(tmp_path):
    program = ("import os\nfor p in ('/proc/sys/kernel/hostname', '/proc/sys/vm/overcommit_memory', '/usr/x', "
               f"'/sandbox/x', '{tmp_path}/x', '/proc/1/environ'):\n"
               "    try:\n        open(p, 'w').write('1')\n        print('WROTE', p)\n"
               "    except OSError:\n        pass\n"
               "for p in ('/sandbox', '/usr', '/'):\n    try:\n        os.chown(p, 65534, 65534)\n"
               "        print('CHOWN', p)\n"
               "    except OSError:\n        pass\nprint('done')")
    attack(tmp_path, program)
    assert inside(program) == "done\n"


# -- 2. leaving early ------------------------------------------------------------------------------------
EXITS = {"SystemExit": "raise SystemExit", "SystemExit(0)": "raise SystemExit(0)", "os._exit(0)": "os._exit(0)",
         "SIGKILL": "os.kill(os.getpid(), 9)", "sys.exit()": "sys.exit()", "closed pipes": "os.closerange(3, 4096)"}


@pytest.mark.parametrize("target", [CALLS, ASSERTS, LOOPS], ids=["calls", "asserts", "loop"])
@pytest.mark.parametrize("where", ["top level", "in the function"])
@pytest.mark.parametrize("how", EXITS)
def test_leaving_early_earns_nothing(tmp_path, target, where, how):
    fn = target.entry_point
    if where == "top level":
        program = f"import os, sys\n{EXITS[how]}\ndef {fn}(*args):\n    return None"
    else:
        program = f"import os, sys\ndef {fn}(*args):\n    {EXITS[how]}"
    _, feedback = attack(tmp_path, program, target)
    why = r"error: .*(exited|SystemExit|killed|ended without|closed|raised|Bad file descriptor)"
    assert re.search(why, feedback), \
        feedback


def test_a_whole_program_that_exits_at_once_earns_nothing_on_any_humaneval_problem(tmp_path):
    env = gym.make("Ragen/DeepCoder-v0", limits=LIMITS)
    total = 0.0
    for p in problems.humaneval():
        env.reset(seed=0, options={"problem": p})
        total += env.step("```python\nraise SystemExit\n```")[1]
    assert total == 0


# -- 3. patching the harness, forging verdicts -----------------------------------------------------------
PATCHES = {
    "json.dumps": "import json\njson.dumps = lambda *a, **k: '{\"status\": \"ok\"}'",
    "os.write": ("import os\n_w = os.write\n"
                 "os.write = lambda fd, data: _w(fd, b'\\x00\\x00\\x00\\x10{\"status\": \"ok\"}') or len(data)"),
    "forged records on every descriptor": ("import os\nfor fd in range(3, 256):\n"
                                           "    for rec in (b'{\"status\": \"ok\"}', b'{\"value\": \"NO\"}'):\n"
                                           "        try:\n"
                                           "            os.write(fd, len(rec).to_bytes(4, 'big') + rec)\n"
                                           "        except OSError:\n            pass"),
    "builtins": ("import builtins, math\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda x: True\n"
                 "builtins.isinstance = lambda *a: True\nmath.fabs = lambda x: 0.0\n"
                 "math.isclose = lambda *a, **k: True"),
    "AssertionError": "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})",
}
WRONG = {"object equal to anything": "class Any:\n    __eq__ = lambda s, o: True\n    __bool__ = lambda s: True\n"
                                     "    __sub__ = lambda s, o: 0\n    __abs__ = lambda s: 0\n"
                                     "    __lt__ = lambda s, o: True\n"
                                     "    __iter__ = lambda s: iter(())\n    __len__ = lambda s: 0\nANSWER = Any()",
         "a wrong plain value": "ANSWER = 'wrong'"}


@pytest.mark.parametrize("target", [CALLS, ASSERTS, LOOPS], ids=["calls", "asserts", "loop"])
@pytest.mark.parametrize("patch", PATCHES)
@pytest.mark.parametrize("wrong", WRONG)
def test_patching_the_harness_earns_nothing(tmp_path, target, patch, wrong):
    program = f"{PATCHES[patch]}\n{WRONG[wrong]}\ndef {target.entry_point}(*args):\n    return ANSWER"
    attack(tmp_path, program, target)


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another user's process memory takes root")
def test_a_submission_holds_no_expected_value_or_reference_in_its_memory():
    # The judge holds the asserts (with their expected values) and the reference solution; the
    # submission process comes from a zygote that never saw them. The host reads the submission's
    # whole memory while it waits; finding its own source there proves the reading works.
    import ctypes
    import threading
    import time

    name = b"ragen-scanme"
    program = (f"import ctypes, time\nctypes.CDLL(None).prctl(15, {name!r}, 0, 0, 0)\ntime.sleep(2)\n"
               "def sort_third(l):\n    return l  # own_source_marker")
    needles = [b"own_source_" + b"marker", b"assert tuple(candidate", b"l[::3] = sorted(l[::3])",
               b"[5, 6, 3, 4, 8, 9, 2"]
    counts = []

    def scan():
        deadline = time.monotonic() + 20
        while not counts and time.monotonic() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if Path(f"/proc/{pid}/comm").read_bytes().strip() != name:
                        continue
                    found = [0] * len(needles)
                    with open(f"/proc/{pid}/mem", "rb") as mem:
                        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                            span, perms = line.split()[:2]
                            if perms.startswith("r") and "[v" not in line:
                                a, b = (int(x, 16) for x in span.split("-"))
                                try:
                                    mem.seek(a)
                                    chunk = mem.read(b - a)
                                except OSError:
                                    continue
                                found = [f + chunk.count(n) for f, n in zip(found, needles)]
                    counts.append(found)
                except OSError:
                    pass
            time.sleep(0.01)

    watcher = threading.Thread(target=scan)
    watcher.start()
    tests = [{k: v for k, v in t.items() if k != "expected"} for t in ASSERTS.tests]
    Bubblewrap(Limits(wall_seconds=4.0)).run(program, tests[:1])
    watcher.join()
    assert counts and counts[0][0] > 0 and counts[0][1:] == [0, 0, 0], counts
    assert ctypes  # (the submission's prctl names it for the host to find)


def test_the_judge_and_the_runner_cannot_be_read_or_signalled():
    program = ("import os\nout = []\nfor pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):\n"
               "    if pid == os.getpid():\n        continue\n"
               "    for name in ('mem', 'environ', 'fd/1', 'fd/3'):\n        try:\n"
               "            open(f'/proc/{pid}/{name}', 'rb').read(1)\n            out.append(f'{pid}/{name}')\n"
               "        except OSError:\n            pass\n"
               "print('READ', out)\nprint(open('/proc/1/cmdline', 'rb').read())\n"
               "def sort_third(l):\n    l = list(l)\n    l[::3] = sorted(l[::3])\n    return l")
    tests = [{k: v for k, v in t.items() if k != "expected"} for t in ASSERTS.tests]
    runs = Bubblewrap(LIMITS).run(program, tests)
    assert runs[0].stdout.startswith("READ []\n"), runs[0].stdout
    assert str(Path.home()) not in runs[0].stdout and "/work/" not in runs[0].stdout.split("\n")[1]
    assert [r.status for r in runs] == ["ok"] * len(tests)  # and the right answer still passes


# -- 4. resources and the kernel's surface ---------------------------------------------------------------
def test_scratch_space_is_bounded(tmp_path):
    program = ("import os\nwritten = 0\nblock = b'x' * (1 << 20)\n"
               "for d in ('/tmp', '/work', '/dev/shm'):\n    try:\n"
               "        with open(os.path.join(d, 'fill'), 'wb') as f:\n            while True:\n"
               "                f.write(block)\n                f.flush()\n                written += 1\n"
               "    except OSError:\n        pass\nprint(written)")
    attack(tmp_path, program)
    written = int(inside(program).split()[0])
    assert 16 < written <= Limits().scratch_mb  # what the submission could fill, not the host's RAM


SYSCALLS = {
    "unshare(CLONE_NEWUSER)": "libc.unshare(0x10000000)",
    "clone(CLONE_NEWUSER)": f"libc.syscall({ {'x86_64': 56, 'aarch64': 220}.get(os.uname().machine, 56)}, "
                            f"0x10000000 | 17, 0, 0, 0, 0)",
    "mount tmpfs": "libc.mount(b'none', b'/work', b'tmpfs', 0, None)",
    "ptrace(ATTACH, 1)": "libc.ptrace(16, 1, 0, 0)",
    "io_uring_setup": "libc.syscall(425, 1, ctypes.create_string_buffer(120))",
    "bpf": f"libc.syscall({ {'x86_64': 321, 'aarch64': 280}.get(os.uname().machine, 321)}, 0, 0, 0)",
    "keyctl": f"libc.syscall({ {'x86_64': 250, 'aarch64': 219}.get(os.uname().machine, 250)}, 0, 0, 0, 0, 0)",
    "perf_event_open": f"libc.syscall({ {'x86_64': 298, 'aarch64': 241}.get(os.uname().machine, 298)}, "
                       f"ctypes.create_string_buffer(128), 0, -1, -1, 0)",
}


@pytest.mark.parametrize("call", SYSCALLS)
def test_the_kernels_riskier_calls_are_denied(tmp_path, call):
    program = (f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nr = {SYSCALLS[call]}\n"
               f"print(r, ctypes.get_errno())")
    attack(tmp_path, program)
    result, errno = inside(program).split()
    assert result == "-1" and errno == "1", (call, result, errno)  # EPERM


def test_nothing_inside_is_host_root():
    # The test holds a marked process; the host reads its credentials while it runs.
    import threading
    import time

    seen = []

    def watch():
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            for pid in leftovers():
                status = Path(f"/proc/{pid}/status").read_text()
                seen.append(int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    inside(f"import subprocess\nsubprocess.run(['sleep', '{MARKER}'], timeout=2.5)")
    watcher.join()
    assert seen and 0 not in seen and (os.geteuid() != 0 or seen[0] == 65534), seen


BOMBS = {  # the sandbox suite's attacks, through the env, and two more
    **ATTACKS,
    "daemon": f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        os.execv('/bin/sleep', ['sleep', '{MARKER}'])\n    os._exit(0)\nprint(input())",
    "kill everything": "import os\nos.kill(-1, 9)\nos.kill(1, 9)\nprint(input())",
}


@pytest.mark.parametrize("bomb", BOMBS)
def test_resource_attacks_earn_nothing_and_leave_nothing(tmp_path, bomb):
    _, feedback = attack(tmp_path, BOMBS[bomb])
    assert len(feedback) < 3000  # the summary stays short whatever the program printed


def test_dev_holds_device_nodes_only_and_no_shared_memory_escapes_the_limits():
    # Red-team findings: bubblewrap's tmpfs /dev (and /dev/shm) held files outside scratch_mb, handed
    # out the host's pseudo-terminals, and memfd / SysV shared memory counted against no limit.
    program = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
               "for p in ('/dev/shm/x', '/dev/x'):\n    try:\n        open(p, 'w').write('x')\n"
               "        out.append('wrote ' + p)\n    except OSError:\n        pass\n"
               "try:\n    os.openpty()\n    out.append('pty')\nexcept OSError:\n    pass\n"
               "try:\n    os.memfd_create('x')\n    out.append('memfd')\nexcept OSError:\n    pass\n"
               "if libc.shmget(0, 1 << 20, 0o1600) != -1:\n    out.append('shm')\n"
               "print(out, sorted(os.listdir('/dev')))")
    assert inside(program) == "[] ['fd', 'full', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n"


def test_a_huge_return_value_is_refused_inside_not_parsed_here(tmp_path):
    import time

    start = time.monotonic()
    _, feedback = attack(tmp_path, f"def {CALLS.entry_point}(*args):\n    return 'x' * 3_000_000", CALLS)
    assert "over 1024 KB" in feedback and time.monotonic() - start < 60  # a bound, not a timing claim
