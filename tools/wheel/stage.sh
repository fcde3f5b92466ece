#!/usr/bin/env bash
# stage.sh BUNDLE_COPY STAGE_DIR PY_FILE... -- LIB...: lays out what the
# wheel carries: STAGE_DIR/refit (the package's modules) and
# STAGE_DIR/native (the client libraries, and in native/lib every shared
# library they load but those the host provides: glibc, libstdc++,
# libgcc_s, CUDA and NCCL; see tools/bundle_copy.sh).
set -euo pipefail
copy=$1 stage=$2
shift 2
mkdir -p "$stage/refit" "$stage/native"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  cp -f "$1" "$stage/refit/"
  shift
done
[ $# -gt 1 ] || { echo "usage: stage.sh BUNDLE_COPY STAGE_DIR PY_FILE... -- LIB..." >&2; exit 2; }
shift
"$copy" "$stage/native" "$@" >/dev/null
chmod -R u+w "$stage"
