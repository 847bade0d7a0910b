# kbroker — the two commands of the quick start are `make serve` and `make test`.
#
#   make serve   one broker on 127.0.0.1:9092, data in ./data (builds .venv on first use)
#   make test    the whole suite (installs what the tests need; system packages when root)
#   make bench   the quick benchmark set (pytest-benchmark)
#   make fuzz    a million fuzzed requests at a broker (bench/fuzz/run.py; not in CI)
#
# Everything lives in .venv; the project is installed editable (meson-python), so
# editing a .pyx rebuilds the native core on the next import.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# bytecode caches matter here: the generated protocol codecs are ~45k lines, compiled
# afresh by every broker process the tests start when caching is disabled
unexport PYTHONDONTWRITEBYTECODE

# build tools the editable install needs at import time (meson-python rebuilds on import)
BUILD_TOOLS := "meson-python>=0.16" "meson>=1.4" "ninja>=1.11" "Cython>=3.0.10" "setuptools>=65" wheel
# what the tests drive from Debian: kcat (librdkafka's CLI), ZooKeeper (Java is preinstalled)
SYS_PACKAGES := kcat zookeeper
SRC_STAMPS := pyproject.toml meson.build _native/meson.build _native/modules.txt

.PHONY: serve test bench fuzz install install-test sysdeps clean distclean

serve: $(VENV)/.runtime
	$(VENV)/bin/broker serve --data-dir ./data --listen 127.0.0.1:9092

test: $(VENV)/.test sysdeps
	$(VPY) -m pytest $(PYTEST_ARGS)

# the quick set: native micro benchmarks (pytest-benchmark), then one quick asv pass over
# the native and end-to-end benchmarks in this environment (no downloads, no builds)
bench: $(VENV)/.bench
	$(VPY) -m pytest bench -q --benchmark-only --benchmark-columns=min,median,ops $(PYTEST_ARGS)
	cd bench && ../$(VENV)/bin/asv machine --yes >/dev/null && \
	  ../$(VENV)/bin/asv run --environment existing:$(CURDIR)/$(VENV)/bin/python --quick --show-stderr

# fuzzing at scale (not in CI; tens of minutes): a million mutated requests, a canary
# client beside; figures in bench/RESULTS.md
fuzz: $(VENV)/.bench
	$(VPY) bench/fuzz/run.py $(FUZZ_ARGS)

install: $(VENV)/.runtime
install-test: $(VENV)/.test

$(VPY):
	@echo "make: first use: creating $(VENV), then building the native core into it (a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(VENV)/.tools: | $(VPY)
	$(VPY) -m pip install -q $(BUILD_TOOLS)
	touch $@

$(VENV)/.runtime: $(SRC_STAMPS) | $(VENV)/.tools
	@echo "make: building the native core and installing kbroker into $(VENV) (a minute or more)"
	$(VPY) -m pip install -q --no-build-isolation -e .
	touch $@

$(VENV)/.test: $(SRC_STAMPS) | $(VENV)/.tools
	$(VPY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $@ $(VENV)/.runtime

$(VENV)/.bench: $(SRC_STAMPS) | $(VENV)/.tools
	$(VPY) -m pip install -q --no-build-isolation -e '.[test,bench]'
	touch $@ $(VENV)/.test $(VENV)/.runtime

# System packages: installed with apt when running as root and missing; otherwise the
# tests that need them fail under CI=true (and skip, saying why, on a developer machine).
sysdeps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing system packages:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "warning: missing system packages:$$missing (run 'make test' as root, or apt-get install them)"; \
	  fi; \
	fi

clean:
	rm -rf build .pytest_cache .hypothesis .benchmarks
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) data
