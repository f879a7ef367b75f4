# The single entry point. `make help` lists the targets.
# `make demo` and `make test` build their own virtual environment.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# jsii warns on every synth that Node 20 is past end of life; the synth works,
# and the warning drowns the output. Node 22+ needs no such setting.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.DEFAULT_GOAL := help
.PHONY: help venv demo serve bench soak year test coverage test-unit test-integration test-infra lint format typecheck synth plan clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# pip compiles every installed file to bytecode one at a time (45 of the 70 s here); compileall -j 0 does
	@# it on every core. Not fatal: bytecode is a cache, and pip itself never failed on a file it could not compile.
	$(PY) -m pip install --quiet --no-compile -r requirements-dev.txt
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null \
		|| echo "some installed files did not compile to bytecode; they compile on first import"
	@# functions/ (the Lambda code root) and the repository root on the venv's path
	@# (the site directory is asked for here, once the venv exists: a make variable would be expanded
	@# before the recipe's first line runs, empty on a fresh clone)
	@printf '%s\n%s\n' "$(CURDIR)/functions" "$(CURDIR)" \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/timeseries-project.pth"
	@touch $(STAMP)

venv: $(STAMP) ## Create .venv and install the dev requirements

demo: $(STAMP) ## Run the main job: the seed scenario on the embedded local stack
	$(PY) -m tsctl demo

serve: $(STAMP) ## Leave the whole local system running on loopback (moto, the six functions, the API)
	$(PY) -m tsctl serve

bench: $(STAMP) ## Run the benchmarks; figures to out/bench/results.json (ARGS=--quick for a smoke run)
	$(PY) -m benchmarks $(ARGS)

soak: $(STAMP) ## Minutes of real-time load on the local system; every reading accounted for (out/soak/report.json)
	SOAK=1 $(PY) -m pytest -n 0 -s tests/integration/local_runtime/test_soak.py

# `make test` runs each simulation over a few days; these are the year the docs quote (hours each, not in CI).
year: $(STAMP) ## A simulated year of rotation, rollups and compaction (hours; docs/rollups.md, docs/rotation.md)
	YEAR_PERIOD=day YEAR_DAYS=365 YEAR_RETENTION_DAYS=30 YEAR_CHANGED=10000 \
		$(PY) -m pytest -n 0 -s -p no:cacheprovider --timeout=0 tests/integration/rotator/test_year.py
	ROLLUP_YEAR_DAYS=365 ROLLUP_YEAR_RETENTION_HOURS=720 \
		$(PY) -m pytest -n 0 -s -p no:cacheprovider --timeout=0 tests/unit/rollup/test_rollup_year.py
	COMPACTION_YEAR_DAYS=365 COMPACTION_YEAR_RETENTION_HOURS=720 \
		$(PY) -m pytest -n 0 -s -p no:cacheprovider --timeout=0 tests/unit/rollup/test_compaction_year.py

# Two pytest-xdist workers per core (at most 4: each end-to-end test runs a whole local system). The end-to-end
# tests wait on clocks (a split's minute boundary, a stream's next read) with their core idle. On 2 cores,
# fresh-clone `make test` runs with mypy beside: 829-851 s of pytest with 2 workers, 732 s with 3 and one infra synth,
# 674 s with 4 (on a tree whose tests also cost less CPU: one run each, and runs differ by a minute or two).
# A worker takes a whole file at a time (a module's running system or synth is built once). Not loadgroup:
# with pytest 9.2 it ignores xdist_group marks and spreads one file's tests over workers (pytest-xdist#1386).
# Files go out in collection order (infra, integration, unit), not xdist's default of most tests first, which
# started the two-test demo file (4 minutes) after 6.5 minutes and left one worker idle for the last 1.5.
XDIST := -n $(shell echo $$(( 2 * $$(nproc) ))) --maxprocesses 4 --dist loadfile --no-loadscope-reorder

# mypy (1.5 minutes on a fresh clone's cold cache) runs beside pytest, whose end-to-end tests leave a core
# waiting on the clock; its report follows pytest's, and either failing fails the target.
test: $(STAMP) lint ## Run every test (unit, integration, infra), lint and type checks
	@log=$$(mktemp); $(PY) -m mypy > $$log 2>&1 & mypy=$$!; \
	$(PY) -m pytest $(XDIST) --durations=20 tests; tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy:"; cat $$log; rm -f $$log; \
	if [ $$tests -ne 0 ]; then exit $$tests; fi; exit $$typed

# Coverage is a report nobody gates on, and it made `make test` 43% slower (14 min 44 s against 10 min 20 s
# of pytest, the same tree, one after the other on 2 cores): its own target.
coverage: $(STAMP) ## Every test, with the coverage report
	$(PY) -m pytest $(XDIST) --cov --cov-report=term:skip-covered tests

test-unit: $(STAMP) ## Unit tests only (no network)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP) ## Integration tests only (moto)
	$(PY) -m pytest tests/integration

test-infra: $(STAMP) ## CDK synth, template assertions, cdk-nag, cfn-lint
	$(PY) -m pytest tests/infra

lint: $(STAMP) ## ruff lint and format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

typecheck: $(STAMP) ## mypy on the runtime code
	$(PY) -m mypy

synth: $(STAMP) ## Synthesize the CloudFormation template into cdk.out/ (offline, no credentials)
	$(PY) app.py
	@echo "template: cdk.out/$$(ls cdk.out | grep -m1 '\.template\.json$$')"

plan: $(STAMP) ## Capacity plan for the seed workload (see `python -m tsctl plan --help`)
	$(PY) -m tsctl plan --peak-writes 50000 --entities 10000 --hot sensor-alpha-001=2000

clean: ## Remove the virtual environment and build outputs
	rm -rf $(VENV) cdk.out out .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage
