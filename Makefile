# One task runner; CI (.ci/run) calls the same targets.
CARGO ?= cargo
EMULATOR := scripts/emulator.sh
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
# Options for the demo, e.g. make demo DEMO_ARGS="--orders 5000 --shard-count 32 --batch-size 500"
# or DEMO_ARGS="--target custom" (the whole job on the local Custom Event Bus, into a FIFO queue)
DEMO_ARGS ?=

.PHONY: demo test test-custom-bus-double config-reference check fmt clippy lint-infra guard setup emulator-start emulator-stop ci lambda-zip poller-image

## The main job end to end on a private local emulator (installs the pinned tools on first run):
## orders through the stream relay, a simulated stream outage, a backfill by the poller, a summary.
## DEMO_ARGS="--regions 2": two regions on the local global table (docs/demo.md, "Two regions").
demo:
	$(CARGO) build --locked --workspace --bins
	$(if $(DEMO_REGIONS),EMULATOR_REGIONS=$(TEST_REGIONS)) $(EMULATOR) run -- $(TARGET_DIR)/debug/outbox-demo $(DEMO_ARGS)

# Set when DEMO_ARGS asks for two regions: the demo target then starts the emulators with the
# local global table's regions; the one-region demo starts none of it.
DEMO_REGIONS = $(or $(findstring --regions 2,$(DEMO_ARGS)),$(findstring --regions=2,$(DEMO_ARGS)))

# The regions of the local global table the tests run on (scripts/emulator.sh: a DynamoDB Local per
# region and the replicator between them; tests/src/regions.rs and tools/tests use them).
TEST_REGIONS := us-east-1,eu-west-1
# Tests run at once in each test binary. The integration binary's tests mostly wait on the emulators
# (moto was busy 9 % of a run), so four on the 2-core machine: 293 s against 426 s with the default
# two, from the same fresh clone (docs/testing.md).
TEST_THREADS ?= 4

# The build comes first, whole: the workspace's binaries with its tests, as the integration tests
# run them (outbox_tests::workspace_binary), so no test waits on a build and cargo test builds nothing.
# The emulators' first install (downloads and pip's work) runs beside it (`beside`, below).
## The whole test suite (unit, integration and end-to-end) against a private local emulator, with a
## local global table of two regions.
test:
	$(call beside,$(CARGO) build --workspace --bins --tests --locked,$(EMULATOR) install)
	EMULATOR_REGIONS=$(TEST_REGIONS) RUST_TEST_THREADS=$(TEST_THREADS) $(EMULATOR) run -- $(CARGO) test --workspace --locked
	$(MAKE) test-custom-bus-double

## The tools' own tests (tools/tests), with boto3: the Custom Event Bus double (its eventbridgev2
## client), the OTLP receiver, and the global table's replicator against global tables' behaviour.
test-custom-bus-double:
	EMULATOR_REGIONS=$(TEST_REGIONS) $(EMULATOR) run -- .venv/bin/python -m pytest -q tools/tests

## Regenerate docs/configuration.md's reference of every setting from the clap definitions (a test
## of the integration binary, config_reference, fails while it is stale; it needs no emulator).
config-reference:
	UPDATE_CONFIG_REFERENCE=1 $(CARGO) test -p outbox-tests --test integration config_reference

## Formatting and lints, as CI runs them: clippy beside the template's linters and Guard (their
## first install included).
check: fmt
	$(call beside,$(CLIPPY),scripts/lint-infra.sh && scripts/guard.sh)

# $(call beside,A,B): the shell commands A and B at once, B in the background, failing if either
# fails. Not make's -j: cargo would take its jobs from make's jobserver and build one crate at a
# time. (lint-infra before guard: both read the SAM-transformed template, from lint-infra's tools.)
beside = ( $(2) ) & other=$$!; $(1); status=$$?; wait $$other && exit $$status

fmt:
	$(CARGO) fmt --all -- --check

CLIPPY = $(CARGO) clippy --workspace --all-targets --locked -- -D warnings
clippy:
	$(CLIPPY)

## cfn-lint and checkov on infra/ (pinned, in .venv-lint; installed on first use).
lint-infra:
	scripts/lint-infra.sh

## AWS's Guard rules (the Well-Architected security pillar's, vendored in infra/guard/) on the
## SAM-transformed template, both bus variants, with a pinned prebuilt cfn-guard (.venv-guard).
guard:
	scripts/guard.sh

## Install the pinned tools into .venv (the test and demo targets do this themselves).
setup:
	$(EMULATOR) install

emulator-start:
	EMULATOR_REGIONS=$(TEST_REGIONS) $(EMULATOR) start

emulator-stop:
	$(EMULATOR) stop

ci: check test

## The deployable artefacts, built without a prompt (docs/operations.md, "Deploy").
# The Lambda's architecture is the template's (`Architectures: [arm64]`), the poller's its task's
# (`CpuArchitecture: ARM64`); both are checked by a test of outbox-tests (infra_template).
LAMBDA_TARGET := aarch64-unknown-linux-gnu
LAMBDA_DIR := $(TARGET_DIR)/lambda
# The poller image's tag: the commit, never `latest` (PollerImageTag has no default).
POLLER_IMAGE_TAG ?= $(shell git rev-parse --short=12 HEAD)
POLLER_IMAGE ?= relay-poller:$(POLLER_IMAGE_TAG)

## The Lambda packages: $(LAMBDA_DIR)/relay-stream/bootstrap.zip (the stream relay) and
## $(LAMBDA_DIR)/example-consumer/bootstrap.zip (the template's DeployExampleConsumer), cross-compiled by
## the project's pinned cargo-lambda (in .venv, with its pinned zig) for the template's arm64.
lambda-zip:
	bash -c 'source scripts/pinned-venv.sh && install_pinned_venv lambda-zip "$(CURDIR)/.venv" tools/requirements-emulator.txt cargo-lambda'
	rustup target add $(LAMBDA_TARGET)
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(CURDIR)/.venv/bin/cargo-lambda lambda build --release --locked \
	  --target $(LAMBDA_TARGET) --package relay-stream --bin relay-stream \
	  --output-format zip --lambda-dir $(LAMBDA_DIR)
	PATH="$(CURDIR)/.venv/bin:$$PATH" $(CURDIR)/.venv/bin/cargo-lambda lambda build --release --locked \
	  --target $(LAMBDA_TARGET) --package order-consumer --bin example-consumer \
	  --output-format zip --lambda-dir $(LAMBDA_DIR)
	@echo "lambda-zip: $(LAMBDA_DIR)/relay-stream/bootstrap.zip $(LAMBDA_DIR)/example-consumer/bootstrap.zip"

## The poller's image for arm64 (needs Docker with buildx), tagged $(POLLER_IMAGE); push it with
## `docker push` after an ECR login (docs/operations.md).
poller-image:
	docker buildx build --platform linux/arm64 -f infra/Dockerfile -t $(POLLER_IMAGE) --load .
	@echo "poller-image: $(POLLER_IMAGE)"
