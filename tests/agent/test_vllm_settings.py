"""vLLM's engine settings (VLLMConfig, the --vllm-* flags) and its sleep mode around the update, on a CPU
machine without vLLM: a stand-in ``vllm`` module records what the backend asks of the engine. Whether a
real engine honours them on a GPU is not tested here."""

import importlib.machinery
import re
import sys
import types
from types import SimpleNamespace

import pytest

from ragen_envs.agent import SamplingConfig
from ragen_envs.agent.backends import PolicyConfig, VLLMConfig
from ragen_envs.agent.backends import vllm as backend
from ragen_envs.cli import main, parse
from ragen_envs.cli import args as cli_args
from conftest import SMOKE

CHAT = [{"role": "user", "content": "Which way?"}]


class FakeLLM:
    """Records the engine's arguments and every call the backend makes of it."""

    made = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        FakeLLM.made.append(self)

    def get_tokenizer(self):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.kwargs["model"])

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def collective_rpc(self, method, kwargs):
        self.calls.append((method, len(kwargs["weights_iterator"])))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append(("generate", len(prompts)))
        step = {7: SimpleNamespace(logprob=-0.5)}
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[7], logprobs=[step], finish_reason="stop")])
                for _ in prompts]


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = FakeLLM, lambda **kwargs: kwargs
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    vllm.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    FakeLLM.made = []
    return FakeLLM


def test_the_defaults_leave_the_trainer_room_and_match_the_flags():
    config = VLLMConfig()
    assert (config.gpu_memory_utilization, config.tensor_parallel_size, config.max_model_len,
            config.sleep_level, config.engine_args) == (0.3, 1, 4096, 1, {})
    kwargs = backend.engine_kwargs("/m", config, cuda=False, world=1)
    assert kwargs == {"model": "/m", "dtype": "float32", "enable_prefix_caching": True,
                      "logprobs_mode": "processed_logprobs", "gpu_memory_utilization": 0.3,
                      "tensor_parallel_size": 1, "max_model_len": 4096, "enable_sleep_mode": False}
    args = parse(["train", "--env", SMOKE])
    assert cli_args.build(PolicyConfig, args).vllm == config  # no flag: the dataclass's defaults


def test_the_engine_gets_the_flags_and_json_arguments_under_torchrun_on_a_gpu(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    config = VLLMConfig(gpu_memory_utilization=0.5, max_model_len=8192, sleep_level=2,
                        engine_args={"enforce_eager": True, "dtype": "float16"})
    kwargs = backend.engine_kwargs("/m", config, cuda=True, world=4)
    assert kwargs["gpu_memory_utilization"] == 0.5 and kwargs["max_model_len"] == 8192
    assert kwargs["enable_sleep_mode"] is True and kwargs["enforce_eager"] is True
    assert kwargs["dtype"] == "float16"  # the JSON over the backend's own defaults
    # each torchrun rank its own engine, in the trainer's process group, on its own GPU, with its own seed
    assert kwargs["distributed_executor_backend"] == "external_launcher" and kwargs["seed"] == 3
    assert backend.engine_kwargs("/m", config, cuda=True, world=4, seed=7)["seed"] == 7  # a Python caller's
    assert "distributed_executor_backend" not in backend.engine_kwargs("/m", config, cuda=True, world=1)
    assert backend.engine_kwargs("/m", VLLMConfig(sleep_level=0), cuda=True, world=1)["enable_sleep_mode"] is False


def test_ragen_train_builds_the_engine_with_the_flags(fake_vllm, monkeypatch, tmp_path):
    import trainers

    built = []

    class Recorder:  # the Trainer, up to building its rollout policy
        rank, plot_path = 0, None

        def __init__(self, model, mix, config, device=None, rollout_policy=None):
            built.append(rollout_policy())

        def train(self):
            return []

    monkeypatch.setattr(trainers, "Trainer", Recorder)
    assert main(["train", "--env", SMOKE, "--output-dir", str(tmp_path / "run"), "--backend", "vllm",
                 "--vllm-gpu-memory-utilization", "0.45", "--vllm-tensor-parallel-size", "2",
                 "--vllm-max-model-len", "2048", "--vllm-sleep-level", "2",
                 "--vllm-engine-args", '{"enforce_eager": true}']) == 0
    (engine,) = fake_vllm.made
    assert {k: engine.kwargs[k] for k in ("gpu_memory_utilization", "tensor_parallel_size", "max_model_len",
                                          "enforce_eager")} == {"gpu_memory_utilization": 0.45,
                                                                "tensor_parallel_size": 2, "max_model_len": 2048,
                                                                "enforce_eager": True}
    assert built[0].config.sleep_level == 2 and built[0].max_context == 2048


def test_python_callers_keep_their_keywords(fake_vllm):
    policy = backend.VLLMPolicy(max_model_len=2048, dtype="float32", seed=0)  # tests/test_vllm.py's call
    assert policy.max_context == 2048 and policy.config.gpu_memory_utilization == 0.3
    assert fake_vllm.made[0].kwargs["seed"] == 0 and fake_vllm.made[0].kwargs["max_model_len"] == 2048
    with pytest.raises(ValueError, match="gpu_memory_utilization must be"):
        backend.VLLMPolicy(gpu_memory_utilization=0)
    assert len(fake_vllm.made) == 1  # refused before the engine was built


def sleepy_policy(monkeypatch, level):
    monkeypatch.setattr(backend, "_has_cuda", lambda: True)  # sleep mode is CUDA's
    return backend.VLLMPolicy(sleep_level=level)


def test_sleep_frees_the_engine_and_loading_weights_wakes_it_in_order(fake_vllm, monkeypatch):
    policy = sleepy_policy(monkeypatch, 2)
    engine = fake_vllm.made[0]
    assert engine.kwargs["enable_sleep_mode"] is True
    policy.sleep()
    policy.sleep()  # already asleep: once
    policy.load_weights({"a": 1, "b": 2})
    assert engine.calls == [("sleep", 2), ("wake_up", ["weights"]), ("reload_weights", 2), ("wake_up", ["kv_cache"]),
                            ("reset_prefix_cache",)]
    policy.generate([CHAT], SamplingConfig(max_new_tokens=4, seed=0))
    assert engine.calls[-1] == ("generate", 1)  # awake: no further wake_up


def test_level_one_wakes_by_itself_and_level_two_refuses_without_new_weights(fake_vllm, monkeypatch):
    policy = sleepy_policy(monkeypatch, 1)
    policy.sleep()
    policy.generate([CHAT], SamplingConfig(max_new_tokens=4, seed=0))
    assert fake_vllm.made[0].calls == [("sleep", 1), ("wake_up", None), ("generate", 1)]
    policy = sleepy_policy(monkeypatch, 2)
    policy.sleep()
    with pytest.raises(RuntimeError, match="discards its weights"):
        policy.generate([CHAT], SamplingConfig(max_new_tokens=4, seed=0))


def test_without_cuda_or_at_level_zero_sleep_does_nothing(fake_vllm, monkeypatch):
    for policy in (backend.VLLMPolicy(), sleepy_policy(monkeypatch, 0)):
        policy.sleep()
        policy.load_weights({"a": 1})
    for engine in fake_vllm.made:
        assert engine.calls == [("reload_weights", 1), ("reset_prefix_cache",)]


def test_the_trainer_puts_the_engine_to_sleep_for_the_update_only(tokenizer, tmp_path):
    from trainers import Trainer
    from tests.trainers.test_trainer import SeededReplies, config, make_model

    events = []

    class Engine(SeededReplies):
        def sleep(self):
            events.append("sleep")

        def load_weights(self, weights):
            events.append("load_weights")

    trainer = Trainer(make_model(tokenizer), SMOKE, config(tmp_path, filter="top_p", num_iterations=2,
                                                           save_strategy="no"),
                      tokenizer=tokenizer, rollout_policy=Engine(tokenizer))
    trainer.optimizer.register_step_pre_hook(lambda *args: events.append("step"))
    trainer.train()
    letters = "".join({"sleep": "z", "step": "s", "load_weights": "l"}[e] for e in events)
    assert re.fullmatch(r"(zs+l){2}", letters), events  # asleep for every optimizer step, woken by the new weights


@pytest.mark.parametrize("argv, message", [
    (["--vllm-gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be > 0 and <= 1, got 1.5"),
    (["--vllm-gpu-memory-utilization", "0"], "gpu_memory_utilization must be > 0 and <= 1, got 0.0"),
    (["--vllm-tensor-parallel-size", "0"], "tensor_parallel_size must be >= 1, got 0"),
    (["--vllm-max-model-len", "0"], "max_model_len must be >= 1, got 0"),
    (["--vllm-sleep-level", "3"], "sleep_level must be in [0, 2], got 3"),
    (["--vllm-tensor-parallel-size", "1.5"], "argument --vllm-tensor-parallel-size: invalid int value: '1.5'"),
    (["--vllm-engine-args", '{"gpu_memory_utilization": 0.9}'],
     "give 'gpu_memory_utilization' with --vllm-gpu-memory-utilization"),
    (["--vllm-engine-args", '{"enable_sleep_mode": true}'], "give 'enable_sleep_mode' with --vllm-sleep-level"),
    (["--vllm-engine-args", "enforce_eager"], "argument --vllm-engine-args: not JSON"),
])
def test_bad_engine_settings_are_one_line_before_any_model_loads(argv, message, tmp_path, capsys, monkeypatch,
                                                                 fake_vllm):
    import transformers

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    assert main(["train", "--env", SMOKE, "--output-dir", str(tmp_path / "run"), "--backend", "vllm", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not fake_vllm.made


def test_tensor_parallel_engines_are_refused_under_torchrun(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="under torchrun"):
        VLLMConfig(tensor_parallel_size=2)
    assert VLLMConfig(tensor_parallel_size=1).tensor_parallel_size == 1
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert VLLMConfig(tensor_parallel_size=2).tensor_parallel_size == 2  # one process may span GPUs


def test_a_missing_vllm_is_one_line_before_any_model_loads(tmp_path, capsys, monkeypatch):
    import transformers

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails, as where it is not installed

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before vLLM was looked for")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    assert main(["train", "--env", SMOKE, "--output-dir", str(tmp_path / "run"), "--backend", "vllm"]) == 2
    assert "--backend vllm needs vLLM" in capsys.readouterr().err
