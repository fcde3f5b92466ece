#!/usr/bin/env bash
# wheel_test.sh BUNDLE_COPY STAGE BUILD_WHEEL PY_FILE... -- LIB...: builds
# the wheel, installs it with pip --no-index into a fresh virtualenv, and
# from outside the tree, with no PYTHONPATH nor REFIT_CLIENT_LIB: imports
# refit, refit.torch, refit.vllm and refit.sglang, loads the client library
# from the installed package and calls into it (a convention's buffers). Checks
# that every packaged client library exports only refit_* symbols, that
# its libraries resolve inside the package or to the host's own, that
# refit.testing is left out, that vLLM's plugin entry point is declared,
# and that the venv's `refitd` and `refit` commands run the wheel's
# binaries (refitd serves, `refit status` reads it).
set -euo pipefail
copy=$1 stage_sh=$2 build=$3
shift 3
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$stage_sh" "$copy" "$tmp/stage" "$@"
wheel=$(python3 "$build" "$tmp/dist" "$tmp/stage/refit" "$tmp/stage/native")
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
# The tag states the glibc the files truly need: the newest GLIBC_2.N any
# packaged ELF file names.
need=$(find "$tmp/stage/native" -type f -exec grep -aoh 'GLIBC_2\.[0-9]*' {} + |
  sed 's/GLIBC_2\.//' | sort -n | tail -1)
case "$(basename "$wheel")" in
  refit_weights-*-py3-none-manylinux_2_${need}_x86_64.whl) ;;
  *) echo "FAIL: unexpected wheel name $wheel (files need glibc 2.$need)"; exit 1 ;;
esac
unzip -p "$wheel" '*/METADATA' | grep -q "^Requires: Linux x86-64 with glibc 2.$need or later" ||
  { echo "FAIL: METADATA does not state glibc 2.$need"; exit 1; }
# The CPU wheel: the host library alone, "+cpu", installable on its own.
py=() cpu_libs=()
for a in "$@"; do
  if [ "$a" = "--" ]; then sep=1; continue; fi
  if [ -z "${sep:-}" ]; then py+=("$a"); elif [[ "$a" != *_gpu.so ]]; then cpu_libs+=("$a"); fi
done
"$stage_sh" "$copy" "$tmp/stage_cpu" "${py[@]}" -- "${cpu_libs[@]}"
cpu_wheel=$(python3 "$build" --cpu "$tmp/dist_cpu" "$tmp/stage_cpu/refit" "$tmp/stage_cpu/native")
case "$(basename "$cpu_wheel")" in
  refit_weights-*+cpu-py3-none-manylinux_2_*_x86_64.whl) echo "built $(basename "$cpu_wheel")" ;;
  *) echo "FAIL: unexpected CPU wheel name $cpu_wheel"; exit 1 ;;
esac
! unzip -l "$cpu_wheel" | grep -q librefit_client_gpu ||
  { echo "FAIL: the CPU wheel carries the GPU library"; exit 1; }
python3 -m venv "$tmp/venv_cpu"
env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv_cpu/bin/pip" install -q --no-index "$cpu_wheel"
(cd "$tmp" && env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv_cpu/bin/python" -c '
import refit
b = refit.expected_buffers(side="engine", rank=0, model="tiny-qwen3", convention="vllm:tp=1")
print("CPU wheel import OK:", refit.load_library().refit_build_info().decode(), len(b), "buffers")')
python3 -m venv "$tmp/venv"
env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv/bin/pip" install -q --no-index "$wheel"
cd "$tmp"
site=$(env -i PATH=/usr/bin:/bin "$tmp/venv/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["platlib"])')
fail=0
for so in "$site"/refit/_native/librefit_client*.so; do
  others=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^refit_' || true)
  if [ -n "$others" ]; then
    echo "FAIL: $(basename "$so") exports non-refit symbols: $(echo "$others" | head -5)"
    fail=1
  fi
  allowed='^(linux-vdso|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libstdc\+\+\.so|libgcc_s\.so|libcudart\.so|libnccl\.so|libcuda\.so)'
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $allowed ]] && continue
    if [[ "$path" != "$site/refit/_native/lib/"* ]]; then
      echo "FAIL: $(basename "$so") loads $name from $path, not from the package"
      fail=1
    fi
  done < <(env -i PATH=/usr/bin:/bin ldd "$so")
done
[ ! -e "$site/refit/testing.py" ] || { echo "FAIL: refit.testing is in the wheel"; fail=1; }
grep -q '^refit = refit.vllm:register$' "$site"/refit_weights-*.dist-info/entry_points.txt ||
  { echo "FAIL: no vllm.general_plugins entry point"; fail=1; }
env -i PATH=/usr/bin:/bin HOME="$tmp" "$tmp/venv/bin/python" - "$site" <<'PY'
import os, sys
site = sys.argv[1]
import refit, refit.torch, refit.vllm, refit.sglang
assert refit.__file__.startswith(site), refit.__file__
lib = refit.load_library()
path = refit.loaded_library_path()
assert path.startswith(os.path.join(site, "refit", "_native")), path
bufs = refit.expected_buffers(side="engine", rank=0, model="tiny-qwen3",
                              convention="vllm:tp=1")
assert any(b.name.endswith("qkv_proj.weight") for b in bufs), bufs
assert refit.vllm.register() is False  # no vLLM in this venv
assert refit.vllm.VLLM_INTERFACE is None
assert refit.sglang.LOADER == "refit.sglang.load"  # --custom-weight-loader
print(f"import OK: {os.path.basename(path)} ({lib.refit_build_info().decode()}), "
      f"{len(bufs)} buffers")
PY
[ -e "$site/refit/py.typed" ] || { echo "FAIL: no refit/py.typed"; fail=1; }
for cmd in refitd refit; do
  [ -x "$tmp/venv/bin/$cmd" ] || { echo "FAIL: no $cmd command in the venv"; fail=1; }
done
# The commands, from outside the tree with a scrubbed environment: refitd
# listens, `refit status` talks to it.
env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME="$tmp" refitd --address=127.0.0.1:0 \
  >"$tmp/refitd.log" 2>&1 &
refitd_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/refitd.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: the refitd command did not listen: $(head -5 "$tmp/refitd.log")"; fail=1
elif ! env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME="$tmp" \
    refit status --server="127.0.0.1:$port" >"$tmp/status.txt" 2>&1; then
  echo "FAIL: refit status: $(head -5 "$tmp/status.txt")"; fail=1
else
  echo "commands OK: refitd on port $port; refit status: $(head -1 "$tmp/status.txt")"
fi
kill "$refitd_pid" 2>/dev/null || true
wait "$refitd_pid" 2>/dev/null || true
[ $fail -eq 0 ] || exit 1
echo "wheel OK"
