# Drape: two commands set everything up on a fresh machine with Python 3.13:
#   make demo    bake the built-in scene and save it (creates .venv first)
#   make test    run the test suite inside the embedded Blender (bpy module), all
#                but the long scenarios marked slow (make test-slow) and the portable
#                pass (make test-portable); CI runs all three
PYTHON ?=
VENV_PY := .venv/bin/python
# With BLENDER=/path/to/blender the same suite runs inside that Blender via pytest-blender.
BLENDER ?=
PYTEST_ARGS ?=

.PHONY: venv test test-portable test-slow test-blenders demo bench extension clean
.DEFAULT_GOAL := test

venv:
	@PYTHON="$(PYTHON)" tools/venv.sh

test: venv
ifeq ($(BLENDER),)
	$(VENV_PY) -m pytest -p no:pytest-blender -m "not slow" $(PYTEST_ARGS)
else
	$(VENV_PY) -m pytest --blender-executable "$(BLENDER)" -m "not slow" $(PYTEST_ARGS)
endif

# The fast solver tests once more with the portable switch (solver/hardware.py:
# a generic CPU, every portable twin), in their own numba cache, so both
# branches of each CPU-specific choice run (CI runs it after make test; the
# slow scenarios run on the host build in make test-slow). NUMBA_CPU_NAME
# too: test helpers declare kernels before the solver's hardware module can
# set numba's CPU.
test-portable: venv
	DRAPE_PORTABLE=1 NUMBA_CPU_NAME=generic NUMBA_CACHE_DIR="$(CURDIR)/.numba_cache/portable" \
		$(VENV_PY) -m pytest -p no:pytest-blender tests/solver -m "not slow" $(PYTEST_ARGS)

# The tests marked slow: long scenarios, cold compiles in child processes,
# the extension build and install (CI runs them after make test).
test-slow: venv
ifeq ($(BLENDER),)
	$(VENV_PY) -m pytest -p no:pytest-blender -m slow $(PYTEST_ARGS)
else
	$(VENV_PY) -m pytest --blender-executable "$(BLENDER)" -m slow $(PYTEST_ARGS)
endif

# The linux-x64 zip installed through Blender's own installer into every supported
# Blender (requirements/blender-*.txt, one venv each under .venvs/), where
# tests/installed/scenario.py uses it end to end. `make test-blenders LINES=4.2,5.3`
# picks some lines.
test-blenders: venv
	$(VENV_PY) tools/test_blenders.py $(if $(LINES),--lines $(LINES))

demo: venv
	$(VENV_PY) tools/demo.py

# One JSON line per case, also appended to benchmarks/results/results.jsonl with
# the commit, the CPU and the time; `make bench-solver` runs benchmarks/bench_solver.py.
# `tools/plot_bench.py` draws docs/benchmarks.md and docs/benchmarks.png from it.
BENCHES := $(patsubst benchmarks/bench_%.py,%,$(wildcard benchmarks/bench_*.py))
bench: venv
	@for b in $(BENCHES); do $(VENV_PY) benchmarks/results.py benchmarks/bench_$$b.py || exit 1; done

bench-%: venv
	$(VENV_PY) benchmarks/results.py benchmarks/bench_$*.py

# One zip per platform, built and validated by Blender's own extension tool.
extension: venv
	$(VENV_PY) tools/build_extension.py

clean:
	rm -rf dist wheels out .pytest_cache
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +
