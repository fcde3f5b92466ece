#!/usr/bin/env bash
# Checks the deployable bundle: copies the bundle binaries with
# bundle_copy.sh into a directory outside the tree, then, with a scrubbed
# environment (no LD_LIBRARY_PATH), checks with ldd that every library
# resolves either inside the bundle or to one a GPU host provides itself,
# and runs `refit --help` from the copy.
set -euo pipefail
copy_script=$1
shift
dir="${TEST_TMPDIR:-$(mktemp -d)}/bundle"
"$copy_script" "$dir" "$@"
allowed='^(linux-vdso|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libstdc\+\+\.so|libgcc_s\.so|libcudart\.so|libnccl\.so|libcuda\.so)'
fail=0
for bin in "$dir"/*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  case "$bin" in *.sh) continue ;; esac
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    if [[ "$name" =~ $allowed ]]; then continue; fi
    if [[ "$path" != "$dir/lib/"* ]]; then
      echo "FAIL: $(basename "$bin") loads $name from $path, not from the bundle"
      fail=1
    fi
  done < <(env -i PATH=/usr/bin:/bin ldd "$bin")
  if env -i PATH=/usr/bin:/bin ldd "$bin" | grep -v -E 'libcudart|libnccl' | grep -q "not found"; then
    echo "FAIL: $(basename "$bin") has unresolved libraries"
    fail=1
  fi
done
out=$(env -i PATH=/usr/bin:/bin "$dir/refit" --help 2>&1) || { echo "FAIL: refit --help exited non-zero: $out"; exit 1; }
echo "$out" | grep -q "refit plan" || { echo "FAIL: refit --help does not describe 'refit plan'"; exit 1; }
[ $fail -eq 0 ] || exit 1
echo "bundle OK: $(ls "$dir/lib" | wc -l) libraries shipped; refit --help ran from $dir"
