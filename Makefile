# One task runner; CI (.ci/run) calls the same targets.
CARGO ?= cargo
EMULATOR := scripts/emulator.sh

.PHONY: test check fmt clippy setup emulator-start emulator-stop ci

## The whole test suite (unit, integration and end-to-end) against a private local emulator.
test:
	$(EMULATOR) run -- $(CARGO) test --workspace --all-targets --locked

## Formatting and lints, as CI runs them.
check: fmt clippy

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## Install the pinned tools into .venv (the test and demo targets do this themselves).
setup:
	$(EMULATOR) install

emulator-start:
	$(EMULATOR) start

emulator-stop:
	$(EMULATOR) stop

ci: check test
