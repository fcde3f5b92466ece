#!/usr/bin/env bash
# delta_encode_ab.sh A_DIR B_DIR [ROUNDS]: the delta encoder of two builds
# on one GPU, alternately (A, B, A, B, ...; ROUNDS each, default 3). Each
# directory holds a bundled gpu_wave_ops_test (tools/bundle_copy.sh) of one
# build; its Figure test times the mask pass and the whole count + encode of
# 1 GiB in 32 messages (BF16, 2% changed) next to the read floor (a compare
# writing nothing). Prints each run's FIGURE lines, then a table: build,
# round, wave encode ms and its share of the read floor, mask pass ms and
# share.
set -u
a=$1 b=$2 rounds=${3:-3}
log=$(mktemp)
for i in $(seq 1 "$rounds"); do
  for d in "$a" "$b"; do
    timeout 60 "$d/gpu_wave_ops_test" --gtest_filter='*Figure*' 2>&1 | grep FIGURE |
      sed "s|^|$(basename "$d") $i |" | tee -a "$log"
  done
done
echo "build round | encode ms | of the floor | mask pass ms | of the floor"
for i in $(seq 1 "$rounds"); do
  for d in "$a" "$b"; do
    n=$(basename "$d")
    enc=$(grep "^$n $i .*wave encode" "$log" |
      sed -E 's/.*: ([0-9.]+) ms \(count.* ([0-9.]+) of the read floor.*/\1 | \2/')
    mask=$(grep "^$n $i .*mask pass, " "$log" |
      sed -E 's/.*1 GiB ([0-9.]+) ms, [0-9]+ GB\/s read, ([0-9.]+) of the floor;.*/\1 | \2/')
    echo "$n $i | $enc | $mask"
  done
done
rm -f "$log"
