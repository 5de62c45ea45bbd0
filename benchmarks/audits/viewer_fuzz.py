"""``ragen view``'s loading of rollouts files under hostile files (``fuzz_viewer``): hostile files
(every field of the wrong type, markup and huge text in every string, unknown and client env ids, env
arguments that would run code, fetch or read a file) must be refused with the project's clear error or
shown as a page without ``<script``, and never make the viewer run, connect or read what they name.
``tests/contract/test_env_fuzz.py`` runs it small.

    python benchmarks/audits/viewer_fuzz.py [--examples 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings

import gymnasium as gym

import ragen_envs  # noqa: F401  (registers the envs)
from ragen_envs.registry import ENVIRONMENTS, env_for

from env_fuzz import in_child  # a sibling script: benchmarks/audits/ is on the path of each


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
    answered, result, exitcode = in_child(_view_child, (examples, env_ids), timeout)
    if answered:
        return result
    return f"the viewer's fuzz died (exit {exitcode})" if exitcode is not None else \
        f"the viewer's fuzz gave no answer within {timeout:.0f} s"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="hostile files")
    problem = fuzz_viewer(parser.parse_args(argv).examples)
    print(problem or "ragen view: ok")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
