# Two commands do all the setup on a fresh machine: `make run` and `make test`.
# EXTRAS=gpu adds CuPy (CUDA 13) to the environment: `make run EXTRAS=gpu`.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?=
BIN := $(VENV)/bin
comma := ,
RUN_SPEC := .$(if $(EXTRAS),[$(EXTRAS)])
TEST_SPEC := .[test$(if $(EXTRAS),$(comma)$(EXTRAS))]

.PHONY: run test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One stamp per set of extras, so `make run EXTRAS=gpu` after a plain `make run` installs CuPy.
$(VENV)/.installed-run$(EXTRAS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '$(RUN_SPEC)'
	touch $@

$(VENV)/.installed-test$(EXTRAS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '$(TEST_SPEC)'
	touch $@

run: $(VENV)/.installed-run$(EXTRAS)
	$(BIN)/gemmlab reproduce --quick $(ARGS)

# pytest exits 5 when it collects nothing. With a selection (PYTEST_ARGS="-k ...") that is
# reported, not a failure; the full suite collecting nothing is a failure.
test: $(VENV)/.installed-test$(EXTRAS)
	@$(BIN)/python -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ] && [ -n "$(PYTEST_ARGS)" ]; then echo "make test: no tests selected"; exit 0; fi; \
	exit $$status

# ruff comes with the test extra; its configuration is in pyproject.toml.
lint: $(VENV)/.installed-test$(EXTRAS)
	$(BIN)/python -m ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
