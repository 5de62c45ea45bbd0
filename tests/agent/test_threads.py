"""torch's threads: a run takes the cores other processes leave free, or what --threads says."""

import multiprocessing
import time

import pytest
import torch

from ragen_envs.agent import threads
from ragen_envs.cli import main
from conftest import SMOKE


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("cores, busy, chosen", [(2, 0, 2), (2, 1, 1), (2, 9, 1), (16, 3, 13)])
def test_auto_takes_the_cores_no_other_process_is_busy_on(monkeypatch, cores, busy, chosen):
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads, "busy_cores", lambda: busy)
    assert threads.auto_threads() == chosen


def _spin(stop):
    while not stop.is_set():
        pass


def test_a_busy_process_is_seen_at_once():
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
    spinner.start()
    try:
        time.sleep(0.5)
        assert max(threads.busy_cores() for _ in range(20)) >= 1
    finally:
        stop.set()
        spinner.join()


def test_set_threads_sets_torch_and_an_omp_setting_stands(monkeypatch, torch_threads):
    assert threads.set_threads(1) == 1 == torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(2)
    assert threads.set_threads(None) == 2 == torch.get_num_threads()  # the user's variable: left alone
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads, "auto_threads", lambda: 1)
    assert threads.set_threads(None) == 1 == torch.get_num_threads()
    with pytest.raises(ValueError, match="positive integer"):
        threads.set_threads(0)


@pytest.mark.parametrize("command", [["eval"], ["train"], ["sft"]])
def test_a_bad_threads_value_is_one_line_before_any_model_loads(capsys, monkeypatch, command):
    import ragen_envs.agent.backends.transformers as backend

    monkeypatch.setattr(backend.TransformersPolicy, "__init__", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main([*command, "--env", SMOKE, "--threads", "0"]) == 2
    assert "--threads must be a positive integer, got 0" in capsys.readouterr().err
