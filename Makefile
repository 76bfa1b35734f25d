# Two commands do all the set-up on a fresh machine with only python3:
#   make run   -> creates .venv, installs onnxpart, runs the demo on a bundled model
#   make test  -> same set-up, then the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_MODEL := fixtures/transformer_block.onnx

.PHONY: run test install bench clean fixtures

export PYTHONDONTWRITEBYTECODE =

# uv installs the same versions in about 5 s, where pip takes 30-40 s (one package at a time); pip is the
# fallback wherever uv cannot be installed. The venv is made without pip (ensurepip took 6 of its 6.5 s
# here): python3's own pip puts uv in it (pip >= 22.3: --python), and uv puts pip there with the rest;
# where python3 has no pip (or an older one), the venv gets its own by ensurepip, and it installs uv.
# Neither compiles bytecode (pip: --no-compile; 78 s of pip's install here): the tests import about a
# quarter of the installed files, and each is compiled once, by the first process that imports it
# (PYTHONDONTWRITEBYTECODE emptied: with it set, as on this machine, every process the tests start
# compiled each module it imported again).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv || \
	  ( $(BIN)/python -m ensurepip --default-pip > /dev/null && $(BIN)/python -m pip install --quiet uv ) || true
	$(BIN)/python -m uv pip install --quiet --python $(BIN)/python pip -e '.[dev,cluster]' || \
	  ( $(BIN)/python -m ensurepip --default-pip > /dev/null; \
	    $(BIN)/python -m pip install --quiet --no-compile -e '.[dev,cluster]' )
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/onnxpart inspect $(DEMO_MODEL)
	$(BIN)/onnxpart annotate $(DEMO_MODEL) --cost analytic --device a100 -o $(VENV)/demo_costs.json --force
	$(BIN)/onnxpart partition $(DEMO_MODEL) -k 4 --time-limit 10 --verify --force -o $(VENV)/demo_partition
	$(BIN)/onnxpart remat $(DEMO_MODEL) --budget 95% --time-limit 10 --verify --force -o $(VENV)/demo_remat
	$(BIN)/onnxpart schedule $(DEMO_MODEL) --system fixtures/systems/cpu_t4_a100.yaml --time-limit 10 --verify --force -o $(VENV)/demo_schedule
	$(BIN)/onnxpart tile $(DEMO_MODEL) --devices 4 --time-limit 10 --verify --force -o $(VENV)/demo_tile

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not free_cores"  # two workers (CI has 2 cores); a file's tests stay on one; longest files first (tests/conftest.py)
	$(BIN)/python -m pytest -q -m free_cores  # then the tests that need two free cores, alone

fixtures: $(STAMP)
	$(BIN)/python scripts/make_fixtures.py

bench: $(STAMP)
	$(BIN)/python scripts/bench_graph.py
	$(BIN)/python scripts/bench_costs.py
	$(BIN)/python scripts/bench_partition.py
	$(BIN)/python scripts/bench_remat.py
	$(BIN)/python scripts/bench_scale.py
	$(BIN)/python scripts/bench_schedule.py
	$(BIN)/python scripts/bench_schedule_many.py
	$(BIN)/python scripts/bench_check_certificate.py
	$(BIN)/python scripts/bench_tile.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
