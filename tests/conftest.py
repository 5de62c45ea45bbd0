import os

# pygame windows in tests run headless.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import pytest  # noqa: E402

# Parallel test workers (pytest-xdist, `make test`) share the cores: one torch (OpenMP) thread each, in
# the worker and in every process a test starts, so two workers on two cores do not oversubscribe them
# (OpenMP threads spin while they wait).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

from ragen_envs.agent.backends.base import Policy  # noqa: E402
from ragen_envs.grid import GridEnv  # noqa: E402
from ragen_envs.registry import (ENVIRONMENTS, env_for, load_class, missing_modules,  # noqa: E402
                                 system_problem, usable_ids)

# The grid games themselves (presets only change their arguments): the grid suite's envs.
GRID_IDS = [e.id for e in ENVIRONMENTS.values()
            if not e.kwargs and not missing_modules(e) and issubclass(load_class(e), GridEnv)]

# Roles the catalogue gives its entries (``ragen_envs.registry.ROLES``): the shared tests read env ids
# from there, never write them.
SMOKE = env_for("smoke")  # the small, fast env with a finite action set the shared tests drive
SMOKE_KWARGS = ENVIRONMENTS[SMOKE].test_kwargs
DEFAULT = env_for("default")
# an env with open-text actions that needs nothing beyond the core install
OPEN_TEXT = next(e.id for e in ENVIRONMENTS.values() if not e.extra and not e.system
                 and not getattr(load_class(e), "valid_actions", None))


def env_params(ids):
    """Env ids as pytest params, each skipped (saying why) where the system program its entry names
    cannot run (``make test`` installs them where apt-get runs as root)."""
    problems = {i: system_problem(ENVIRONMENTS[i]) if i in ENVIRONMENTS else None for i in ids}
    return [pytest.param(i, marks=pytest.mark.skipif(problems[i] is not None, reason=str(problems[i]))) for i in ids]


# Every catalogue env this machine can make (its extra installed, its system program running).
USABLE_IDS = usable_ids()


@pytest.fixture(params=GRID_IDS)
def env_id(request):
    return request.param


@pytest.fixture(scope="session")
def tokenizer():
    """The default model's real tokenizer (chat template included), from the converted cache."""
    from transformers import AutoTokenizer

    from ragen_envs.agent.default_model import default_model_path

    return AutoTokenizer.from_pretrained(default_model_path())


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """A randomly initialised 2-layer Llama with the real vocabulary: fast, fp32, deterministic."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def model_dir(tiny_model, tokenizer, tmp_path):
    """The tiny model and the real tokenizer saved to a folder: a ``--model`` path for the CLI."""
    path = tmp_path / "tiny"
    tiny_model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def tiny_policy(tiny_model, tokenizer):
    from ragen_envs.agent.backends.transformers import TransformersPolicy

    return TransformersPolicy(tiny_model, tokenizer, device="cpu", batch_size=8)


@pytest.fixture(scope="session")
def tiny_vlm_path(tmp_path_factory):
    """A tiny randomly initialised vision-language model folder (``trainers.tiny_vlm``: Idefics3, the
    real tokenizer plus image tokens, a processor): built once per session, in about 2 s."""
    from trainers.tiny_vlm import build

    return build(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture
def tiny_vlm(tiny_vlm_path):
    from ragen_envs.agent.backends.transformers import TransformersPolicy

    return TransformersPolicy(str(tiny_vlm_path), device="cpu", batch_size=8)


# The catalogue's visual envs (image observations: a vision-language model's)
VISUAL_IDS = [e.id for e in ENVIRONMENTS.values() if e.visual]


class ScriptedPolicy(Policy):
    """A policy that replies with the given texts in turn (per call, per prompt): a test double with
    the real tokenizer, so the rollout machinery runs exactly as with a model."""

    def __init__(self, tokenizer, replies, max_context=4096):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.max_context = max_context
        self.calls = []

    def score(self, prompt_ids, continuations):
        raise NotImplementedError

    def generate(self, prompts, sampling):
        from ragen_envs.agent.backends.base import Generation

        self.calls.append([list(p) for p in prompts])
        out = []
        for i, prompt in enumerate(prompts):
            text = self.replies[(len(self.calls) - 1 + i) % len(self.replies)]
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]
            out.append(Generation(text=text, prompt_ids=self.prompt_ids(prompt), token_ids=ids,
                                  logprobs=[-1.0] * len(ids), finish_reason="stop"))
        return out


@pytest.fixture
def scripted(tokenizer):
    return lambda replies, **kw: ScriptedPolicy(tokenizer, replies, **kw)


# Scheduling under `--dist loadfile` (`make test`): a file is one unit of work, so its module fixtures (a
# live server, a Ray instance) are built once, and a unit runs on one worker. The README blocks share
# nothing (a fresh process each), so each is a unit of its own; the longest units go out first (measured
# with --durations): one sent last would finish the suite alone. A stale list costs time, never a result.
OWN_UNITS = "tests/test_readme.py::test_a_readme_block_runs_as_written"
LONGEST_FIRST = (OWN_UNITS, "tests/trainers/test_trainer.py", "tests/trainers/test_distributed.py",
                 "tests/trainers/test_runs.py", "tests/envs/test_deepcoder_attacks.py",
                 "tests/benchmarks/test_benchmarks.py")


@pytest.hookimpl(optionalhook=True)  # pytest without pytest-xdist runs the suite too
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduler(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return nodeid if nodeid.startswith(OWN_UNITS) else super()._split_scope(nodeid)

        def _assign_work_unit(self, node):
            def rank(scope):
                return next(i for i, prefix in enumerate(LONGEST_FIRST) if scope.startswith(prefix))

            for scope in sorted((s for s in self.workqueue if s.startswith(LONGEST_FIRST)), key=rank, reverse=True):
                self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return Scheduler(config, log)
