#!/usr/bin/env bash
# delta_encode_ab.sh DIR... [ROUNDS]: the delta encoder of several builds on
# one GPU, in turns (A, B, C, A, B, C, ...; ROUNDS each, default 3). Each
# directory holds a bundled gpu_wave_ops_test (tools/bundle_copy.sh) of one
# build, named by the directory; its Figure test times the mask pass and
# the whole count + encode of 1 GiB in 32 messages (BF16, 2% changed) next
# to the read floor (a compare writing nothing). Prints each run's FIGURE
# lines, then a table: build, round, wave encode ms (host wall) and its
# share of the read floor, the encode's kernels on the device's clock and
# the host's part between them, mask pass ms and share; last, each build's
# median over its rounds.
set -u
rounds=3
dirs=("$@")
if [ $# -gt 1 ] && [[ "${!#}" =~ ^[0-9]+$ ]]; then
  rounds=${!#}
  dirs=("${@:1:$#-1}")
fi
log=$(mktemp)
rows=$(mktemp)
for i in $(seq 1 "$rounds"); do
  for d in "${dirs[@]}"; do
    timeout 60 "$d/gpu_wave_ops_test" --gtest_filter='*Figure*' 2>&1 | grep FIGURE |
      sed "s|^|$(basename "$d") $i |" | tee -a "$log"
  done
done
echo "build round | encode ms | of the floor | kernels ms | of the floor | host part ms | mask pass ms | of the floor"
for i in $(seq 1 "$rounds"); do
  for d in "${dirs[@]}"; do
    n=$(basename "$d")
    enc=$(grep "^$n $i .*wave encode: " "$log" |
      sed -E 's/.*: ([0-9.]+) ms \(count.* ([0-9.]+) of the read floor.*/\1 | \2/')
    dev=$(grep "^$n $i .*wave encode, device time" "$log" |
      sed -E 's/.*: ([0-9.]+) ms, ([0-9.]+) of the read floor; the host.s part between them ([-0-9.]+) ms.*/\1 | \2 | \3/')
    mask=$(grep "^$n $i .*mask pass, " "$log" |
      sed -E 's/.*1 GiB ([0-9.]+) ms, [0-9]+ GB\/s read, ([0-9.]+) of the floor;.*/\1 | \2/')
    echo "$n $i | ${enc:-?} | ${dev:-?} | ${mask:-?}" | tee -a "$rows"
  done
done
echo
echo "build (median of $rounds) | encode ms | of the floor | kernels ms | of the floor | host part ms"
for d in "${dirs[@]}"; do
  n=$(basename "$d")
  med() {  # median of column $1 of this build's rows
    grep "^$n [0-9]* |" "$rows" | awk -F' \\| ' -v c="$1" '{print $c}' | grep -E '^-?[0-9.]+$' |
      sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "?"}'
  }
  echo "$n | $(med 2) | $(med 3) | $(med 4) | $(med 5) | $(med 6)"
done
rm -f "$log" "$rows"
