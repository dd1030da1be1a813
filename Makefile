# Fresh-machine entry points. Each target creates/refreshes .venv in the repo root.
PY ?= python3
VENV := .venv
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# Said when an install fails: the usual cause on a fresh machine is a full disk.
INSTALL_HINT = { echo "make: the install into $(VENV) failed. torch's CUDA build takes about 6 GB there and pip unpacks it in the temporary folder first; free space:" >&2; df -h . "$${TMPDIR:-/tmp}" >&2; exit 1; }

$(VENV)/.installed: setup.py
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet $(TORCH_PINS) || $(INSTALL_HINT)
	$(VENV)/bin/pip install --quiet -e '.[test,bench]' || $(INSTALL_HINT)
	touch $@

.PHONY: bench test
bench: $(VENV)/.installed  ## the main job: torchdali vs torchvision on a synthetic ImageNet-shaped folder
	$(VENV)/bin/python -m torchdali.bench $(ARGS)

# test processes (pytest-xdist): 2 halves the suite's time on 2 cores; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2

test: $(VENV)/.installed  ## the test suite (GPU tests are skipped without a GPU; run them with ARGS="-m cuda")
	$(VENV)/bin/python -m pytest tests -n $(TEST_WORKERS) $(ARGS)
