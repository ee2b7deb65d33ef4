# tensoracle — the two commands a fresh clone needs:
#   make demo   set up (Debian packages, .venv), build, run the main example (linear layer
#               in four precisions)
#   make test   set up, build, run every C++ and Python test that needs no GPU
# Both are idempotent: steps whose inputs did not change are skipped.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

VENV    ?= .venv
BUILD   ?= build
PY      := $(VENV)/bin/python
CMAKE   := $(VENV)/bin/cmake
NINJA   := $(VENV)/bin/ninja
FUZZ_SECONDS ?= 30

CPP_SOURCES := $(shell find cpp -type f \( -name '*.cpp' -o -name '*.h' -o -name 'CMakeLists.txt' -o -name '*.cmake' \))
PY_SOURCES  := $(shell find python/native python/src -type f) python/CMakeLists.txt python/pyproject.toml python/tensoracle-as-tensorrt.pth
# The CUDA wheels' folder (cuBLASLt when the toolkit has none), looked up when the recipe runs:
# setup may have just installed it.
CUDA_WHEELS  = $$(ls -d $(abspath $(VENV))/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -1)
CMAKE_ARGS  := -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(NINJA))

.PHONY: all setup apt cpp python fuzz-build test sanitize demo bench wheel clean
all: cpp python

setup: apt $(VENV)/.stamp

apt:
	@scripts/ensure-apt.sh scripts/apt-packages.txt

$(VENV)/.stamp: python/pyproject.toml scripts/setup-venv.sh | apt
	scripts/setup-venv.sh $(VENV)
	touch $@

# The standalone C++ build: library, CLI, tests.
cpp: setup
	@[ -f $(BUILD)/cpp/build.ninja ] || $(CMAKE) -S cpp -B $(BUILD)/cpp $(CMAKE_ARGS) -DTENSORACLE_CUDA_WHEELS="$(CUDA_WHEELS)" >/dev/null
	$(CMAKE) --build $(BUILD)/cpp

# The Python package (extension + CLI) installed into the virtual environment.
python: $(BUILD)/python.stamp
$(BUILD)/python.stamp: $(VENV)/.stamp $(CPP_SOURCES) $(PY_SOURCES)
	@mkdir -p $(BUILD)
	@echo "building the Python package into $(VENV)"
	$(PY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps ./python
	touch $@

# libFuzzer targets, built with clang into their own tree (skipped without clang).
fuzz-build: setup
	@if command -v clang++ >/dev/null; then \
	  [ -f $(BUILD)/fuzz/build.ninja ] || CC=clang CXX=clang++ $(CMAKE) -S cpp -B $(BUILD)/fuzz $(CMAKE_ARGS) \
	    -DTENSORACLE_FUZZ=ON -DTENSORACLE_CUDA=OFF -DTENSORACLE_BUILD_TESTS=OFF -DTENSORACLE_BUILD_TOOLS=OFF >/dev/null; \
	  $(CMAKE) --build $(BUILD)/fuzz; \
	else echo "fuzz: clang not found, fuzz targets not built"; fi

test: cpp python fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) BUILD=$(BUILD) VENV=$(VENV) scripts/run-tests.sh

# The C++ tests under AddressSanitizer + UBSan, the thread tests under ThreadSanitizer, the fuzz
# seeds and a short fuzz run (scripts/run-sanitizers.sh; build trees of their own, no CUDA).
# Not part of `make test` (a sanitizer build takes a while): run it before resolving any change
# to a parser, the loader or the runtime.
sanitize: setup fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) BUILD=$(BUILD) VENV=$(VENV) scripts/run-sanitizers.sh

# The main job: the linear layer in fp32, bf16, int8 and fp8 — built and saved with open_engine,
# reopened in a new process and gated against fp32 with compare_outputs
# (examples/precision/linear.py), the same in C++ (linear.cpp), then one saved engine inspected.
demo: cpp python
	$(PY) examples/precision/linear.py --dir $(BUILD)/demo
	$(BUILD)/cpp/examples/precision/example_precision_linear --dir $(BUILD)/demo-cpp
	$(VENV)/bin/tensoracle inspect "$$(ls -t $(BUILD)/demo/cache/linear-int8-*.engine | head -1)"

# Benchmarks against the named peers, each in one run on this machine (see python/bench/).
BENCHES ?= $(wildcard python/bench/bench_*.py)
bench: python
	@for b in $(BENCHES); do echo "== $$b"; $(PY) $$b || exit 1; done

# A wheel that installs anywhere (manylinux: the libraries it needs from the system copied into
# it by auditwheel), into dist/ (scripts/build-wheel.sh).
wheel: python
	scripts/build-wheel.sh dist $(VENV)

clean:
	rm -rf $(BUILD) python/build dist
