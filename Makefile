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

.PHONY: build run test bench fmt lint deps soak fuzz clean

build:
	$(CARGO) build --release --workspace

## run: build and start a single-node broker (data in ./$(DATA_DIR), git-ignored)
run:
	$(CARGO) build --release -p strand-broker
	exec target/release/strand --data-dir $(DATA_DIR)

## test: install what the tests need, then formatting, lints and every test
test: deps lint
	$(CARGO) test --workspace --all-targets
	$(CARGO) run -q -p strand-bench -- disk --dir $(DATA_DIR)/bench-smoke \
	  --total-bytes 16777216 --sync-samples 20 --engine-secs 0.1 --partitions 1,4 > /dev/null
	@echo "make test: all passed"

## bench: the disk physics and storage engine ratios (release build)
bench:
	$(CARGO) run --release -q -p strand-bench -- disk --dir $(DATA_DIR)

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## deps: system packages the tests use (mkfs.ext4 and mount for the ENOSPC test)
deps:
	@missing=""; \
	command -v mkfs.ext4 >/dev/null || missing="$$missing e2fsprogs"; \
	command -v mount >/dev/null || missing="$$missing mount"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $$missing; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq $$missing; fi; \
	fi

## soak: many more kill -9 iterations than `make test` runs
soak:
	STRAND_SOAK_ITERATIONS=$(SOAK_ITERATIONS) $(CARGO) test --release -p strand-tests --test crash_kill9 -- --nocapture

## fuzz: run the record-batch fuzzer for 60 s (needs nightly and cargo-fuzz)
fuzz:
	cd wire/fuzz && cargo +nightly fuzz run record_batch -- -max_total_time=60

clean:
	$(CARGO) clean
	rm -rf $(DATA_DIR)
