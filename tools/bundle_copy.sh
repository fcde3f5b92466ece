#!/usr/bin/env bash
# bundle_copy.sh DIR BINARY...: copies the binaries into DIR and every shared
# library they load into DIR/lib, except the ones a GPU host provides itself:
# glibc (libc, libm, libdl, librt, libpthread, ld-linux), the C++ runtime
# (libstdc++, libgcc_s), and CUDA/NCCL (libcudart, libnccl, libcuda), which
# must match the host's driver. Binaries are linked with rpath $ORIGIN/lib.
set -euo pipefail
dir=$1
shift
mkdir -p "$dir/lib"
keep_host='^(linux-vdso|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libstdc\+\+\.so|libgcc_s\.so|libcudart\.so|libnccl\.so|libcuda\.so)'
for bin in "$@"; do
  cp -f "$bin" "$dir/"
  chmod u+w,+x "$dir/$(basename "$bin")"
  ldd "$bin" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    if [[ "$name" =~ $keep_host ]]; then continue; fi
    if [ "$path" = "not" ] || [ ! -e "$path" ]; then
      echo "bundle: $bin needs $name, which is not found here" >&2
      exit 1
    fi
    [ -e "$dir/lib/$name" ] || cp -L "$path" "$dir/lib/$name"
  done
done
echo "bundle: $(ls "$dir" | grep -v '^lib$' | wc -l) binaries, $(ls "$dir/lib" | wc -l) libraries in $dir"
