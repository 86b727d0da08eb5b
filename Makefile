# The two commands of the README: `make demo` (set up, then run the main job) and `make test`
# (set up, then lint and run the whole suite). Both install what they need on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
SYSTEM_TOOLS := mksquashfs squashfuse fuse-overlayfs git bash tar2sqfs skopeo umoci docker-registry mmdebstrap \
	slirp4netns chromium chromedriver bwrap cc stress-ng
# chromium + chromium-driver: the headless browser of the viewer's tests (tests/scripts/test_view.py)
# gcc + libc6-dev: the sandbox builds its C shell supervisor once per host (envs/sandbox/native.py)
# stress-ng: the CPU hog of `make test-under-load` and of the seeded-run tests (tests/trainers/test_determinism.py)
APT_PACKAGES := squashfs-tools squashfuse fuse-overlayfs fuse3 git squashfs-tools-ng skopeo umoci docker-registry \
	mmdebstrap slirp4netns chromium chromium-driver bubblewrap gcc libc6-dev stress-ng
# pytest arguments; e.g. `make test PYTEST_ARGS='-m "not e2e"'` skips the heavy end-to-end tests.
PYTEST_ARGS ?=
# pytest-xdist workers (PYTEST_WORKERS=0 runs in one process). Two by default: much of the suite waits on
# sandboxes, Ray and subprocesses rather than computing, so a second process fills the idle core. --dist loadfile
# keeps each test file in one worker, so a module's fixtures (env layers, Ray clusters) are made once.
PYTEST_WORKERS ?= 2
# --durations: every run's log names its 30 slowest tests, the first place to look when the suite grows past its time
PYTEST := RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=30

.PHONY: setup system-deps venv lint test test-fast test-under-load test-py312 test-py313 test-pythons test-pythons-ci test-skyrl demo bench clean

setup: system-deps venv

system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian packages for:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	else \
	  echo "missing system tools:$$missing"; \
	  echo "run as root: apt-get install -y $(APT_PACKAGES)  (swebox falls back to slower backends without them)"; \
	fi

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# the CPU build of torch that lies on this machine's disk; a bare `torch` would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0 || $(PY) -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(PY) -m pip install -q -e '.[dev,train,skyrl,synth,view]'
	# the recipe tables of the SWE datasets (docs/datasets.md): swebox reads two data files of these packages,
	# so their heavy dependencies (docker, modal, datasets, GitHub clients) are left out
	$(PY) -m pip install -q --no-deps swebench==4.1.0 swesmith==0.0.9
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(PY) scripts/lint.py

test: setup lint
	$(PYTEST) $(PYTEST_ARGS)

# The whole suite while a CPU hog keeps both cores half busy: a test that passes only on an idle machine fails here.
test-under-load: setup lint
	stress-ng --cpu 2 --cpu-load 50 --quiet & hog=$$!; \
	$(PYTEST) $(PYTEST_ARGS); rc=$$?; \
	kill $$hog; wait $$hog 2>/dev/null; exit $$rc

# The quick local loop: everything but the heavy end-to-end tests.
test-fast: setup
	$(PYTEST) -m "not e2e" $(PYTEST_ARGS)

# The host side's env, sandbox and task tests on Python 3.12 and 3.13 (the suite's interpreter is 3.11), in
# torch-free venvs of their own (.venv-py312, .venv-py313; no `train` extra: torch has no CPU wheel on this
# machine's disk for them). Interpreters: pyenv's builds, else pythonX.Y on PATH; PY312=/path/python overrides.
# Left out: tests that import torch or Ray (search, the Ray budget of the cache) and the harbor test, which
# drives its own 3.12 venv from the 3.11 suite already. The whole set is long (`make test-py312
# PYTEST_ARGS='-m "not e2e"'` took 29 min on the loaded 2-core machine), so CI (.ci/run) runs `test-pythons-ci`:
# the sandbox, Gym/SkyRL/Harbor wrappers, episodes, gateway, graders and layout tests without the e2e ones, on both
# versions, in two processes (about 5 min a version on a loaded machine, 1071 tests).
PY312 ?= $(shell ls -d $$HOME/.pyenv/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -1 || command -v python3.12)
PY313 ?= $(shell ls -d $$HOME/.pyenv/versions/3.13.*/bin/python 2>/dev/null | sort -V | tail -1 || command -v python3.13)
HOST_TESTS := tests/envs tests/test_architecture.py
HOST_TESTS_IGNORED := --ignore=tests/envs/test_search.py --ignore=tests/envs/cache/test_ray_budget.py \
	--ignore=tests/envs/frameworks/test_harbor_env_py312.py

.venv-py%/.installed: setup.cfg pyproject.toml
	@test -n "$(PY$*)" || { echo "test-py$*: expected an interpreter for PY$* (pyenv's build or pythonX.Y on PATH); found none; set PY$*=/path/to/python"; exit 2; }
	test -x .venv-py$*/bin/python || $(PY$*) -m venv .venv-py$*
	.venv-py$*/bin/python -m pip install -q --upgrade pip setuptools wheel
	.venv-py$*/bin/python -m pip install -q -e '.[dev,skyrl,synth,logs]'
	.venv-py$*/bin/python -m pip install -q --no-deps swebench==4.1.0 swesmith==0.0.9
	touch $@

test-py312 test-py313: test-py%: .venv-py%/.installed
	RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv-py$*/bin/python -m pytest $(HOST_TESTS) $(HOST_TESTS_IGNORED) $(PYTEST_ARGS)

test-pythons: test-py312 test-py313

PY_CI_TESTS := tests/envs/sandbox tests/envs/frameworks tests/envs/episodes tests/envs/gateway tests/envs/tasks/graders \
	tests/test_architecture.py
test-pythons-ci: .venv-py312/.installed .venv-py313/.installed
	for v in 312 313; do RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv-py$$v/bin/python -m pytest -n 2 -m "not e2e" \
		$(PY_CI_TESTS) $(HOST_TESTS_IGNORED) $(PYTEST_ARGS) || exit 1; done

# swebox under the real SkyRL 0.4 on Python 3.12 (tests/trainers/test_skyrl04_py312.py). Its venv is ~6 GB and
# ~36 min to build here (pip finds only a CUDA torch for 3.12), so `make test` runs these only once it is built.
test-skyrl: setup
	SWEBOX_TEST_SKYRL=1 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 $(PY) -m pytest tests/trainers/test_skyrl04_py312.py $(PYTEST_ARGS)

demo: setup
	RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 $(VENV)/bin/swebox demo

bench: setup
	$(VENV)/bin/swebox bench sandbox

clean:
	rm -rf $(VENV) .venv-py312 .venv-py313 build *.egg-info runs
