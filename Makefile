# kbroker — the two commands of the quick start are `make serve` and `make test`.
#
#   make serve   one broker on 127.0.0.1:9092 and its schema registry on 127.0.0.1:8081, data in
#                ./data (builds .venv on first use)
#   make test    lint and typecheck, then the whole suite in two workers (installs what the
#                tests need; system packages when root; the pinned JVM/Go/Node test
#                dependencies once, offline afterwards); TEST_WORKERS=0: in one process
#   make bench   the quick benchmark set (pytest-benchmark)
#   make bench-tools  the C load generator of bench/kafka_vs_kbroker.py --pinned (bench/native/kgen;
#                needs librdkafka-dev), bench/native/ingest (bench/produce_copies.py) and
#                bench/native/alloc_ahead (pwrite with and without blocks allocated ahead)
#   make lint    ruff (pyflakes, isort, pyupgrade, bugbear) and cython-lint on _native/
#   make typecheck   mypy (strict on broker/protocol, log, cluster, coordinator, group, txn, security,
#                metrics, server, applog.py)
#   make protocol    regenerates broker/protocol/messages/ and _native/include/kb_messages.h
#                from broker/protocol/schema/
#   make fuzz    a million fuzzed requests at a broker (bench/fuzz/run.py; not in CI)
#   make faults  the long randomized fault run (bench/faults/run.py; root; not in CI)
#
# Everything lives in .venv; the project is installed editable (meson-python), so
# editing a .pyx rebuilds the native core on the next import.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
# where Spark's discovery of the `kbroker` data source looks in the editable venv (below)
SPARK_DISCOVERY := $(VENV)/spark-discovery/pyspark_kbroker.py
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# bytecode caches matter here: the generated protocol codecs are ~45k lines, compiled
# afresh by every broker process the tests start when caching is disabled
unexport PYTHONDONTWRITEBYTECODE
# ... and meson-python's editable loader never writes the caches of the package itself:
# $(COMPILE) writes them (for what changed since the last run) before serving, testing or
# benchmarking. Without them `import broker.client` takes 0.53 s instead of 0.06 s, in
# every broker process, CLI command and Spark Python worker.
COMPILE := $(VPY) -m compileall -q -j0 broker

# build tools the editable install needs at import time (meson-python rebuilds on import)
BUILD_TOOLS := "meson-python>=0.16" "meson>=1.4" "ninja>=1.11" "Cython>=3.0.10" "setuptools>=65" wheel
# what the tests drive from Debian: kcat (librdkafka's CLI), ZooKeeper, Maven (it fetches the
# JVM test dependencies; a JDK 17 is preinstalled), iptables (the fault tests cut loopback
# addresses apart: tests/support/netfault.py), systemd's systemd-analyze and netcat (docs/deploy.md's
# units are verified and its commands checked: tests/cluster/test_deploy.py), Chromium (the status
# page in a headless browser: tests/cluster/test_status_page.py), librdkafka's headers (the C load
# generator of bench/kafka_vs_kbroker.py --pinned, bench/native/kgen.c: tests/unit/test_bench_pinned.py
# builds it), Prometheus (it scrapes a metrics listener behind TLS and basic authentication, and its promtool
# checks the web configuration: tests/interop/test_prometheus.py)
SYS_PACKAGES := kcat zookeeper maven iptables systemd netcat-openbsd chromium librdkafka-dev prometheus
# Apache Kafka's jars (broker, tools, Java client) and Spark's Kafka connector, pinned in
# tests/jvm/pom.xml; `mvn package` there copies them into tests/jvm/target/*-libs
JVM_DIR := tests/jvm
JVM_STAMP := $(JVM_DIR)/target/.fetched
JVM_SOURCES := $(JVM_DIR)/pom.xml $(shell find $(JVM_DIR)/src -type f 2>/dev/null)
# franz-go (with its schema registry client, pkg/sr) and sarama (Go module proxy, pinned in
# tests/go/go.mod + go.sum), KafkaJS and @kafkajs/confluent-schema-registry (npm, pinned by
# tests/node/package-lock.json)
GO_DIR := tests/go
GO_BIN := $(GO_DIR)/bin/goclients
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.package-lock.json
SRC_STAMPS := pyproject.toml meson.build _native/meson.build _native/modules.txt

.PHONY: serve test lint typecheck protocol bench install install-test sysdeps testdeps clean distclean
.PHONY: serve test bench fuzz faults install install-test sysdeps clean distclean bench-tools

# SERVE_ARGS adds flags, e.g. SERVE_ARGS="--set metrics.listener=127.0.0.1:9404" (the broker
# then prints where its metrics and status page are); the schema registry (Confluent's REST
# API, docs/schema-registry.md) is served beside the broker on 127.0.0.1:8081
serve: $(VENV)/.runtime
	@$(COMPILE)
	$(VENV)/bin/broker serve --data-dir ./data --listen 127.0.0.1:9092 --set schema.registry.listener=127.0.0.1:8081 $(SERVE_ARGS)

# lint and typecheck first: a violation fails the run before any test starts
# the suite in TEST_WORKERS processes (pytest-xdist; 0: in this one), grouped as
# tests/conftest.py says; PYTEST_ARGS adds pytest options
TEST_WORKERS ?= 2
test: lint typecheck $(VENV)/.test $(SPARK_DISCOVERY) sysdeps testdeps
	@$(COMPILE)
	$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# the settings of ruff, cython-lint and mypy are in pyproject.toml
lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/cython-lint _native/*.pyx _native/*.pxd

typecheck: $(VENV)/.test
	$(VENV)/bin/mypy

# the codecs from the checked-in JSON, and what the C codec of Produce needs of them
# (_native/include/kb_messages.h); tools/gen_protocol.py SPEC_DIR --records-dir DIR first
# refreshes the JSON from Kafka's own definitions (SPEC_DIR: kafka-clients' common/message/,
# DIR: kafka-group-coordinator's), keeping the versions Kafka removed (schema/legacy/)
protocol: | $(VPY)
	$(VPY) tools/gen_protocol.py --from-schema

# the quick set: native micro benchmarks (pytest-benchmark), then one quick asv pass over
# the native and end-to-end benchmarks in this environment (no downloads, no builds)
bench: $(VENV)/.bench $(SPARK_DISCOVERY)
	@$(COMPILE)
	$(VPY) -m pytest bench -q --benchmark-only --benchmark-columns=min,median,ops $(PYTEST_ARGS)
	cd bench && ../$(VENV)/bin/asv machine --yes >/dev/null && \
	  ../$(VENV)/bin/asv run --environment existing:$(CURDIR)/$(VENV)/bin/python --quick --show-stderr

# the C load generator (librdkafka) that bench/kafka_vs_kbroker.py --pinned drives both brokers with
KGEN := bench/native/kgen
INGEST := bench/native/ingest
# what allocating a segment's blocks ahead saves on pwrite (bench/RESULTS.md, issue 22)
ALLOC_AHEAD := bench/native/alloc_ahead
bench-tools: $(KGEN) $(INGEST) $(ALLOC_AHEAD)

$(ALLOC_AHEAD): bench/native/alloc_ahead.c
	$(CC) -O2 -Wall -Wextra -o $@ $<

$(INGEST): bench/native/ingest.c _native/kb_crc32c.c _native/include/kb_crc32c.h
	$(CC) -O2 -Wall -Wextra -I_native/include -o $@ bench/native/ingest.c _native/kb_crc32c.c

$(KGEN): bench/native/kgen.c
	@[ -f /usr/include/librdkafka/rdkafka.h ] || \
	  { echo "kgen needs librdkafka's headers: apt-get install -y librdkafka-dev"; exit 1; }
	$(CC) -O2 -Wall -Wextra -o $@ $< -lrdkafka

# fuzzing at scale (not in CI; tens of minutes): a million mutated requests, a canary
# client beside; figures in bench/RESULTS.md
fuzz: $(VENV)/.bench
	$(VPY) bench/fuzz/run.py $(FUZZ_ARGS)

# the long randomized fault run (not in CI; tens of minutes): random network partitions,
# kill -9, SIGSTOP under load, every history checked (bench/faults/run.py; root, iptables);
# figures in bench/RESULTS.md. FAULTS_ARGS e.g. "--schedules 100 --seed 7"
faults: $(VENV)/.test sysdeps
	$(VPY) bench/faults/run.py $(FAULTS_ARGS)

install: $(VENV)/.runtime $(SPARK_DISCOVERY)
	@$(COMPILE)
install-test: $(VENV)/.test $(SPARK_DISCOVERY)
	@$(COMPILE)

$(VPY):
	@echo "make: first use: creating $(VENV), then building the native core into it (a few minutes)"
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(VENV)/.tools: | $(VPY)
	$(VPY) -m pip install -q $(BUILD_TOOLS)
	touch $@

# Spark finds the `kbroker` data source by itself (format("kbroker") without registering it)
# through a top-level module pyspark_kbroker that pkgutil.iter_modules() lists on its Python
# workers' sys.path. The editable install makes the module importable but not listed (its
# finder has no sys.path entry), so the venv gets one: a directory holding only a link to
# the checkout's pyspark_kbroker.py, named by a .pth file. A regular install needs none.
# Its last line imports tools/spark_discovery/kbroker_pyspark_path.py, linked there too:
# Spark's Python workers then import pyspark compiled, from site-packages, rather than
# from the pyspark.zip Spark puts first on their path (see that file).
$(SPARK_DISCOVERY): pyspark_kbroker.py tools/spark_discovery/kbroker_pyspark_path.py | $(VPY)
	mkdir -p $(VENV)/spark-discovery
	ln -sf $(CURDIR)/pyspark_kbroker.py $@
	ln -sf $(CURDIR)/tools/spark_discovery/kbroker_pyspark_path.py $(VENV)/spark-discovery/
	$(VPY) -c "import sys, sysconfig; open(sysconfig.get_paths()['purelib'] + '/kbroker-spark-discovery.pth', 'w').write(sys.argv[1] + '\nimport kbroker_pyspark_path\n')" $(CURDIR)/$(VENV)/spark-discovery

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
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	PATH="$$PATH:/usr/sbin:/sbin" command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v nc >/dev/null 2>&1 || missing="$$missing netcat-openbsd"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	[ -f /usr/include/librdkafka/rdkafka.h ] || missing="$$missing librdkafka-dev"; \
	command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing system packages:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "warning: missing system packages:$$missing (run 'make test' as root, or apt-get install them)"; \
	  fi; \
	fi

# Pinned test dependencies from Maven Central, the Go module proxy and npm: fetched once,
# offline afterwards (each is rebuilt only when its pins or sources change). A failed fetch
# warns: the tests that need it then fail under CI=true (and skip, saying why, elsewhere).
testdeps: $(JVM_STAMP) $(GO_BIN) $(NODE_STAMP)

$(JVM_STAMP): $(JVM_SOURCES) | sysdeps
	@if command -v mvn >/dev/null 2>&1; then \
	  echo "fetching the pinned JVM test dependencies (tests/jvm/pom.xml)"; \
	  rm -rf $(JVM_DIR)/target/cds $(JVM_DIR)/target/*-libs; \
	  (cd $(JVM_DIR) && mvn -q -B package) && touch $@ || \
	    echo "warning: mvn package in $(JVM_DIR) failed: the Kafka/JVM tests will not run"; \
	else \
	  echo "warning: mvn is missing (apt-get install maven, or run 'make test' as root)"; \
	fi

$(GO_BIN): $(GO_DIR)/go.mod $(GO_DIR)/go.sum $(wildcard $(GO_DIR)/*.go)
	@if command -v go >/dev/null 2>&1; then \
	  echo "building the Go client checks ($(GO_DIR))"; \
	  (cd $(GO_DIR) && go build -o bin/goclients .) || \
	    echo "warning: go build in $(GO_DIR) failed: the franz-go and sarama tests will not run"; \
	else \
	  echo "warning: go is missing: the franz-go and sarama tests will not run"; \
	fi

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  echo "installing KafkaJS ($(NODE_DIR))"; \
	  (cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error) || \
	    echo "warning: npm ci in $(NODE_DIR) failed: the KafkaJS tests will not run"; \
	else \
	  echo "warning: npm is missing: the KafkaJS tests will not run"; \
	fi

clean:
	rm -rf build .pytest_cache .hypothesis .benchmarks
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) data $(JVM_DIR)/target $(GO_DIR)/bin $(NODE_DIR)/node_modules
