"""benchmarks/speed/gpu_smoke.sh cannot run here (no GPU), so what can be checked on a CPU is: it is valid bash,
every flag it gives `ragen train` is one `ragen train` parses, and without CUDA it stops at once with
one line saying so."""

import os
import re
import subprocess
import sys
from pathlib import Path

from ragen_envs.cli.commands import build_parser

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "speed" / "gpu_smoke.sh"


def test_it_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_flag_it_passes_is_a_ragen_train_flag():
    _, commands = build_parser()
    known = set(commands["train"]._option_string_actions)
    text = SCRIPT.read_text()
    train_lines = re.findall(r"SHAPE=\((.*?)\)|ragen_envs\.cli train (.*)", text, re.S)
    flags = set(re.findall(r"(?<![\w-])--[a-z][\w-]+", " ".join(a + b for a, b in train_lines)))
    flags -= {"--nproc_per_node", "--standalone"}  # torchrun's own
    assert {"--backend", "--data-parallel", "--device", "--iterations"} <= flags
    assert flags | {"--output-dir"} <= known, flags - known  # run_case adds --output-dir


def test_without_cuda_it_stops_at_once_saying_so(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", OUT=str(tmp_path)))
    assert done.returncode == 2 and "no CUDA device" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing was started
