# Two commands do all the setup on a fresh machine: `make run` and `make test`.
# EXTRAS=gpu adds CuPy (CUDA 13) to the environment: `make run EXTRAS=gpu`.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?=
BIN := $(VENV)/bin
comma := ,
RUN_SPEC := .$(if $(EXTRAS),[$(EXTRAS)])
TEST_SPEC := .[test$(if $(EXTRAS),$(comma)$(EXTRAS))]

.PHONY: run test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '$(RUN_SPEC)'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '$(TEST_SPEC)'
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/gemmlab reproduce --quick $(ARGS)

# pytest exits 5 when a selection (PYTEST_ARGS="-m gpu -k ...") collects nothing: say so, don't fail.
test: $(VENV)/.installed-test
	@$(BIN)/python -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: no tests collected"; exit 0; fi; exit $$status

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
