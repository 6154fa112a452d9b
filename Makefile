# retry-fetch — the two commands: `make demo` and `make test`.
# Every target installs what is missing first (scripts/setup.sh skips what is present).
SHELL := /bin/bash
PORT ?= 8080

.PHONY: all setup pkg demo test lint test-native test-wasm test-e2e test-server test-package test-browser test-types bench size clean

all: pkg

setup:
	@bash scripts/setup.sh

## Builds pkg/; skipped when none of its inputs changed since (FORCE=1 rebuilds anyway).
pkg: setup
	@bash scripts/build-pkg.sh $(if $(FORCE),--force)

## Builds pkg/ and serves www/ on http://127.0.0.1:$(PORT) (PORT=... to change). Ctrl-C stops it.
demo: pkg
	@node www/server.mjs --port $(PORT)

## Installs what is missing, builds, runs every test.
test: pkg
	@bash scripts/test.sh

## fmt, clippy and rustdoc with warnings as errors, every feature combination, native and wasm32.
lint: setup
	@bash scripts/lint.sh

test-native: setup
	@bash scripts/test.sh native

test-wasm: setup
	@bash scripts/test.sh wasm

test-e2e: pkg
	@bash scripts/test.sh e2e

test-server: pkg
	@bash scripts/test.sh server

test-package: pkg
	@bash scripts/test.sh package

test-browser: pkg
	@bash scripts/test.sh browser

test-types: pkg
	@bash scripts/test.sh types

bench: pkg
	@bash scripts/bench.sh

## Where every kilobyte of the client .wasm goes, crate by crate (builds into target/size; DETAIL=1 splits our crate by module).
size: setup
	@node scripts/size-report.mjs $(if $(DETAIL),--detail)

clean:
	rm -rf pkg target/pkg target/size test-results
