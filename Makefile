# Developer shortcuts; CI and the README use scripts/test directly.
.PHONY: unit test lint bench load-test load-test-full screenshots

# The fast tier (tests/unit, seconds): run it on every edit.
unit:
	bash scripts/test --unit

test:
	bash scripts/test

lint:
	uv run ruff check src tests benchmarks && uv run ruff format --check src tests benchmarks

# SDK core: log_* call cost and offline write throughput (about a minute).
bench:
	uv run python benchmarks/sdk_offline.py

# The online load test at a small size (about a minute); the full one is load-test-full.
load-test:
	uv run python benchmarks/online_load.py --episodes 50

load-test-full:
	uv run python benchmarks/online_load.py --episodes 1000
	uv run python benchmarks/online_load.py --episodes 10000 --fixed-mb 2.2
	uv run python benchmarks/online_load.py --burst 10000
	uv run python benchmarks/idle_cpu.py

# Refresh the README's screenshots (docs/screenshots/) from the browser tests; a plain test run
# saves its screenshots in a temporary directory and leaves the tree as it was.
screenshots:
	OPENRUNS_SCREENSHOTS=docs/screenshots uv run pytest tests/web -q -p no:cacheprovider
