#!/usr/bin/env bash
# Installs the Node gRPC client the serve_grpc_node test drives the server
# with (tests/serve/grpc_node_client.js) into BUILD_DIR/serve/node, from the
# npm registry, at exact versions: @grpc/grpc-js and @grpc/proto-loader,
# which loads serve/proto/grpc_predict_v2.proto at run time. Pure JavaScript;
# --ignore-scripts, as nothing needs building.
# Idempotent: what is there at the pinned versions is kept.
# Usage: scripts/fetch-grpc-node.sh BUILD_DIR
set -euo pipefail

build_dir=${1:?usage: fetch-grpc-node.sh BUILD_DIR}
dest=$build_dir/serve/node
packages=("@grpc/grpc-js@1.14.7" "@grpc/proto-loader@0.8.1")

for tool in node npm; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "fetch-grpc-node: needs $tool (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done

installed_version() {  # the version in package.json, or nothing
  node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
    "$dest/node_modules/$1/package.json"
}

missing=()
for spec in "${packages[@]}"; do
  name=${spec%@*}
  version=${spec##*@}
  [ "$(installed_version "$name")" = "$version" ] || missing+=("$spec")
done
if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p "$dest"
  echo "fetch-grpc-node: npm install ${missing[*]}"
  # Both at once, so npm resolves one tree for the two.
  npm install --ignore-scripts --no-audit --no-fund --no-save --loglevel=error \
    --prefix "$dest" "${packages[@]}"
fi
for spec in "${packages[@]}"; do
  name=${spec%@*}
  if [ "$(installed_version "$name")" != "${spec##*@}" ]; then
    echo "fetch-grpc-node: $spec is not what npm installed in $dest" >&2
    exit 1
  fi
done
echo "fetch-grpc-node: ready in $dest/node_modules"
