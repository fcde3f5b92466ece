#!/usr/bin/env bash
# tools/wheel/wheel.sh [--cpu] DIST_DIR: builds the client libraries, refitd
# and refit, and writes refit's wheel (distribution refit-weights, import
# name refit, commands refitd and refit) into DIST_DIR. Install it with
# `pip install DIST_DIR/refit_weights-*.whl`.
#   default: with the GPU library (librefit_client_gpu.so: CUDA and NCCL
#            from the host) where nvcc is installed; compiles every kernel
#   --cpu:   host buffers only (Gloo over TCP), built with --config=nocuda:
#            no CUDA compile; the version carries "+cpu"
set -euo pipefail
cpu=
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
[ $# -eq 1 ] || { echo "usage: tools/wheel/wheel.sh [--cpu] DIST_DIR" >&2; exit 2; }
dist=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
tools/setup >/dev/null
libs=(//client/python:librefit_client.so //server:refitd //cli:refit)
config=()
if [ -n "$cpu" ]; then
  config=(--config=nocuda)
elif [ -x /usr/local/cuda/bin/nvcc ]; then
  libs+=(//client/python:librefit_client_gpu.so)
fi
bazel build "${config[@]}" "${libs[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
paths=()
for l in "${libs[@]}"; do pkg=${l#//}; paths+=("bazel-bin/${pkg%%:*}/${l##*:}"); done
tools/wheel/stage.sh tools/bundle_copy.sh "$stage" client/python/refit/*.py \
  client/python/refit/py.typed -- "${paths[@]}"
python3 tools/wheel/build_wheel.py ${cpu:+--cpu} "$dist" "$stage/refit" "$stage/native"
