# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint tools bench clean openapi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Runtime install: re-run when the project's dependencies change. It compiles the detection
# core (setup.py) too.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@ $(VENV)/.native

# The compiled detection core, compiled again when its sources or the list of them
# (native.py's COMPILED) change; until then they run as Python (native.py).
NATIVE := setup.py src/localgate/redaction/native.py $(addprefix src/localgate/redaction/,\
	findings.py validators.py fold.py reveal.py recognizers.py names.py placeholders.py session.py request.py answer.py signatures.py)
$(VENV)/.native: $(NATIVE) $(VENV)/.runtime
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

# Test and lint tools on top of the runtime.
$(VENV)/.dev: pyproject.toml $(VENV)/.runtime
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.runtime $(VENV)/.native
	$(BIN)/localgate serve $(ARGS)

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests bench setup.py
	$(BIN)/ruff format --check src tests bench setup.py
	$(BIN)/mypy

# promtool checks and unit-tests the shipped alert rules (tests/test_alerts.py); Debian's
# prometheus package carries it (the service is not started). Where it cannot be installed
# (no root), those tests are skipped, except in CI.
tools:
	@command -v promtool >/dev/null || \
		(export DEBIAN_FRONTEND=noninteractive; \
		 apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) >/dev/null 2>&1) || \
		echo "note: could not install promtool (Debian: apt-get install prometheus); alert-rule tests are skipped"
	@# The auditor's report: WeasyPrint needs Pango and a CJK font for the PDF; its rendering
	@# test opens the HTML in headless Chromium and turns the PDF into images (pdftoppm).
	@# The web console's browser tests drive the same chromium through chromedriver.
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && \
		command -v pdftoppm >/dev/null && \
		ldconfig -p | grep -q libpangoft2-1.0 && fc-list :lang=zh | grep -q . || \
		(export DEBIAN_FRONTEND=noninteractive; \
		 PKGS="chromium chromium-driver poppler-utils libpango-1.0-0 libpangoft2-1.0-0 fonts-wqy-zenhei"; \
		 apt-get install -y -qq --no-install-recommends $$PKGS >/dev/null 2>&1 || \
		 (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$PKGS) >/dev/null 2>&1) || \
		echo "note: could not install chromium, chromium-driver, poppler-utils, Pango or a CJK font; the report's PDF, its rendering and the console's browser tests need them"

test: lint tools $(VENV)/.native
	$(BIN)/pytest

bench: $(VENV)/.dev $(VENV)/.native
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk) || \
		{ echo "make bench needs wrk (Debian/Ubuntu: apt-get install wrk)"; exit 1; }
	$(BIN)/python -m bench.run --out docs/benchmarks.md
	# The defaults on a ~2 KB Chinese/English prompt dense with personal data (issue 18's
	# targets), and its CPU per request stage by stage, in process.
	$(BIN)/python -m bench.run --body pii-dense --out docs/benchmarks-pii-dense.md
	# The same with redaction off: everything else the defaults do, i.e. how far any speed-up
	# of detection could take the line above.
	$(BIN)/python -m bench.run --body pii-dense --config bench/configs/audit-only.yaml --out docs/benchmarks-pii-dense-audit-only.md
	$(BIN)/python -m bench.stages --body pii-dense --out docs/benchmarks-stages.md
	# A chat's fifth turn: its history is remembered, not scanned again (docs/redaction.md).
	$(BIN)/python -m bench.stages --body conversation --out docs/benchmarks-stages-conversation.md
	$(BIN)/python -m bench.run --config bench/configs/core.yaml --out docs/benchmarks-core.md
	$(BIN)/python -m bench.audit --out docs/benchmarks-audit.md
	# The limits' cost: needs a Redis server (LOCALGATE_REDIS_URL, default the local one, db 13).
	$(BIN)/python -m bench.limits --redis $${LOCALGATE_REDIS_URL:-redis://127.0.0.1:6379/13} --out docs/benchmarks-limits.md
	$(BIN)/python -m bench.workers --out docs/benchmarks-workers.md
	$(BIN)/python -m bench.workers --config bench/configs/core.yaml --out docs/benchmarks-workers-core.md
	$(BIN)/python -m bench.cache --out docs/benchmarks-cache.md
	# The OpenAI door's CPU per request over the native door's (goal: at most +15%).
	$(BIN)/python -m bench.openai_door
	# What tracing every request costs (req/s and CPU per request, on against off).
	$(BIN)/python -m bench.tracing
	# The quality signals' cost per answer and per scrape.
	$(BIN)/python -m bench.quality --out docs/benchmarks-quality.md
	$(BIN)/python -m bench.pii.evaluate --detectors localgate,presidio,regex --out docs/benchmarks-redaction.md
	# Resident memory over 500,000 requests (a few minutes; stops after 30 min whatever happens).
	$(BIN)/python -m bench.soak --requests 500000 --out docs/benchmarks-soak.md

# The data plane's contract; tests/contract/test_openapi.py holds the committed copy to it.
openapi: $(VENV)/.runtime
	$(BIN)/localgate openapi --out docs/openapi/gemini.json
	$(BIN)/localgate openapi --dialect openai --out docs/openapi/openai.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
