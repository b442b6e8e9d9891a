#!/usr/bin/env bash
# Installs the Debian packages Backplane needs to build, test and demo.
# Idempotent: installs only what is missing. Needs root or sudo.
set -euo pipefail

packages=(
  build-essential cmake git pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev graphviz
  libflatbuffers-dev flatbuffers-compiler libxxhash-dev
  libdnnl-dev
  clang libclang-rt-14-dev
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

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
