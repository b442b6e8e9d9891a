# The two commands a newcomer runs: `make demo` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

# The checkout this Makefile is in and the build directory, symlinks resolved.
# Run through a link (`make -C LINK`, or a tree of links to the checkout's
# entries, as tests/docs/guide_test.py makes), CMake would otherwise record
# the link's path as the build's source and cache directory, re-pointing an
# existing build at a path that may not outlive the link.
SRC_DIR := $(patsubst %/,%,$(dir $(realpath $(lastword $(MAKEFILE_LIST)))))
BUILD_PATH = $(or $(realpath $(BUILD_DIR)),$(abspath $(BUILD_DIR)))

.PHONY: all deps configure build demo test bench bench-cpuref soak clean

all: build

deps:
	@bash $(SRC_DIR)/scripts/install-deps.sh

configure: deps
	@cmake -S $(SRC_DIR) -B $(BUILD_PATH) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD_PATH) -j $(JOBS)

demo: build
	@bash $(SRC_DIR)/scripts/demo.sh $(BUILD_PATH)

# The fuzz targets (a clang build of their own, fuzz/) are built here with
# every job, not inside the fuzz_smoke test beside the others.
test: build
	@BACKPLANE_FUZZ_BUILD=$(BUILD_PATH)/fuzz-build BACKPLANE_FUZZ_JOBS=$(JOBS) \
	  bash $(SRC_DIR)/scripts/fuzz.sh --build-only
	@cd $(BUILD_PATH) && ctest --output-on-failure -j $(JOBS)

# CpuOneDnn against ONNX Runtime (npm onnxruntime-node) on real models; prints
# the tables and writes $(BUILD_DIR)/bench/results.md, then the dynamic-shape
# tables (a decoder token by token, an encoder at mixed lengths) to
# $(BUILD_DIR)/bench/shapes_results.md. Not part of `make test`.
# Sets itself up: Node.js/npm from Debian if missing, onnxruntime-node from npm
# into $(BUILD_DIR)/bench/ort, the models generated locally.
# BENCH_MODELS: comma-separated names of bench/bench_models.py's catalog or
# paths of .onnx files (default: the whole catalog, 21 models).
# BENCH_ARGS e.g. "--runs 50 --threads 1,2 --write-doc docs/benchmark-results.md".
# Then CpuOneDnn's outputs against CpuRef's on the same models (bench/check_cpuref.py,
# also `make bench-cpuref` alone: fails the bench if any output is further than
# 1e-4 of CpuRef's largest).
# Then the per-run overhead of the Python module over the C++ API
# (bench/python_overhead.py, mobilenet_v2 and the transformer encoder).
# Last, GpuOcl on the machine's OpenCL device, named as its driver names it
# (bench/gpuocl_bench.py: resnet18, mobilenet_v2, the encoder; load from .bpk
# vs .onnx; host<->device bandwidth) to $(BUILD_DIR)/bench/gpuocl_results.md;
# skipped, saying so, without GpuOcl or a device. GPUOCL_BENCH_ARGS e.g.
# "--runs 20 --models resnet18".
# Then the serving load (bench/serve_bench.py): backplane-serve driven by wrk
# at concurrency 1, 8 and 32 on resnet18 and the encoder, with and without
# dynamic batching, against the same model in-process through the C++ API
# (bench/serve_inprocess.cpp) to $(BUILD_DIR)/bench/serve_results.md; about
# four minutes. SERVE_BENCH_ARGS e.g. "--duration 10 --concurrency 1,4".
# Then the int8 table (bench/int8_bench.py): ResNet-50, MobileNetV2 and
# EfficientNet-B0 quantized to QDQ and the encoder dynamically by
# scripts/quantize_qdq.py (cached in $(BUILD_DIR)/bench/models), Backplane int8
# against ONNX Runtime int8 on the same file and against Backplane float, at 1
# and 2 threads, the CPU's ISA named, to $(BUILD_DIR)/bench/int8_results.md;
# a few minutes. BENCH_MODELS, if given, are quantized instead;
# INT8_BENCH_ARGS e.g. "--runs 20 --threads 1".
# Last, 4-bit weights (bench/nbits_bench.py): a 4-bit embedding table into a
# chain of MatMulNBits (ONNX Runtime's int4 layout) at one token and a
# prompt's 64, Backplane against ONNX
# Runtime on the same file: latency, ready time and peak memory, to
# $(BUILD_DIR)/bench/nbits_results.md; a minute. NBITS_BENCH_ARGS e.g.
# "--width 2048 --threads 1".
bench: build
	@bash scripts/install-deps.sh --bench
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target bench_tools _backplane
	@/usr/bin/python3 bench/run_bench.py --build-dir $(BUILD_DIR) $(if $(BENCH_MODELS),--models $(BENCH_MODELS)) $(BENCH_ARGS)
	@/usr/bin/python3 bench/check_cpuref.py --build-dir $(BUILD_DIR) $(if $(BENCH_MODELS),--models $(BENCH_MODELS)) $(CPUREF_ARGS)
	@/usr/bin/python3 bench/shapes_bench.py --build-dir $(BUILD_DIR) $(SHAPES_BENCH_ARGS)
	@/usr/bin/python3 bench/python_overhead.py --build-dir $(BUILD_DIR) $(PYTHON_BENCH_ARGS)
	@/usr/bin/python3 bench/gpuocl_bench.py --build-dir $(BUILD_DIR) $(GPUOCL_BENCH_ARGS)
	@/usr/bin/python3 bench/serve_bench.py --build-dir $(BUILD_DIR) $(SERVE_BENCH_ARGS)
	@/usr/bin/python3 bench/int8_bench.py --build-dir $(BUILD_DIR) $(if $(BENCH_MODELS),--models $(BENCH_MODELS)) $(INT8_BENCH_ARGS)
	@/usr/bin/python3 bench/nbits_bench.py --build-dir $(BUILD_DIR) $(NBITS_BENCH_ARGS)

# CpuOneDnn's outputs against CpuRef's on the same models (bench/check_cpuref.py:
# every output within 1e-4 of CpuRef's largest, at 1 and 2 threads; exit 1 if
# not). BENCH_MODELS as above.
bench-cpuref: build
	@/usr/bin/python3 bench/check_cpuref.py --build-dir $(BUILD_DIR) $(if $(BENCH_MODELS),--models $(BENCH_MODELS)) $(CPUREF_ARGS)

# backplane serve for 10 minutes (SOAK_SECONDS) under mixed good and malformed
# requests with models loaded, reloaded and unloaded in between: fails on a
# crash, a failed good request, or resident memory growing more than 5% after
# the warm-up (tests/serve/soak.py). make test runs 30 seconds of it.
SOAK_SECONDS ?= 600
soak: build
	@cmake --build $(BUILD_PATH) -j $(JOBS) --target backplane_serve_cli backplane_cli
	@cd $(BUILD_PATH) && ctest -R '^e2e_generate_models$$' >/dev/null
	@BACKPLANE_SERVE=$(BUILD_PATH)/bin/backplane-serve BACKPLANE_CLI=$(BUILD_PATH)/bin/backplane \
	  BACKPLANE_TEST_MODELS=$(BUILD_PATH)/testdata/models \
	  /usr/bin/python3 $(SRC_DIR)/tests/serve/soak.py --seconds $(SOAK_SECONDS)

clean:
	rm -rf $(BUILD_DIR)
