// delta_bench's knobs (see delta_bench_knobs.h).
#include "bench/delta_bench_knobs.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace refit {

const char* const kKnobsUsage =
    "[--snapshot=gpu|pinned] [--batch_mib=N] [--warm_ms=N] [--trace] "
    "[--mask_kernel=sweep|tiles|block|bulk] [--mask_unroll=2|4|8] [--mask_values=0|1] "
    "[--mask_claim=0|1] [--mask_smem=0|1] [--mask_blocks=N] [--shared_counts=0|1] [--count_streams=1|2] "
    "[--fused_digest=0|1] [--digests=overlap|after] [--merge_headers=0|1] "
    "[--scan_with_count=0|1] [--nccl_inline=0|1] [--lanes=1|2|3|4] "
    "[--deadline_s=N]";

namespace {

// The value of `--name=` in `arg` as a count (false: another flag or not
// a non-negative integer).
bool CountFlag(const std::string& arg, const std::string& name, int64_t* v) {
  const std::string prefix = absl::StrCat("--", name, "=");
  return arg.rfind(prefix, 0) == 0 && absl::SimpleAtoi(arg.substr(prefix.size()), v) && *v >= 0;
}

// `--name=0` or `--name=1` into *b.
bool BoolFlag(const std::string& arg, const std::string& name, bool* b) {
  if (arg != absl::StrCat("--", name, "=0") && arg != absl::StrCat("--", name, "=1")) return false;
  *b = arg.back() == '1';
  return true;
}

}  // namespace

bool ParseKnob(const std::string& a, Knobs* k) {
  int64_t v = 0;
  if (a == "--snapshot=pinned" || a == "--snapshot=gpu") {
    k->snapshot = a == "--snapshot=gpu" ? SnapshotMemory::kDevice : SnapshotMemory::kPinnedHost;
  } else if (CountFlag(a, "batch_mib", &v)) {
    k->batch_bytes = v << 20;
  } else if (CountFlag(a, "warm_ms", &v)) {
    k->warm_ms = static_cast<double>(v);
  } else if (a == "--trace") {
    k->trace = true;
  } else if (a == "--mask_unroll=2" || a == "--mask_unroll=4" || a == "--mask_unroll=8") {
    k->mask.unroll = a.back() - '0';
  } else if (a == "--mask_kernel=sweep" || a == "--mask_kernel=tiles" ||
             a == "--mask_kernel=block" || a == "--mask_kernel=bulk") {
    const std::string kind = a.substr(14);
    k->mask.kind = kind == "sweep"   ? WaveMaskKind::kSweep
                   : kind == "tiles" ? WaveMaskKind::kTiles
                   : kind == "block" ? WaveMaskKind::kBlock
                                     : WaveMaskKind::kBulk;
  } else if (CountFlag(a, "lanes", &v) && v >= 1 && v <= 4) {
    k->lanes = static_cast<int>(v);
  } else if (CountFlag(a, "deadline_s", &v)) {
    k->deadline_s = v;
  } else if (CountFlag(a, "mask_blocks", &v)) {
    k->mask.blocks = static_cast<int>(v);
  } else if (a == "--count_streams=1" || a == "--count_streams=2") {
    k->count_streams = a.back() - '0';
  } else if (a == "--digests=overlap" || a == "--digests=after") {
    k->overlap_digests = a == "--digests=overlap";
  } else {
    return BoolFlag(a, "mask_values", &k->mask.values) ||
           BoolFlag(a, "mask_claim", &k->mask.claim) ||
           BoolFlag(a, "mask_smem", &k->mask.smem_slots) ||
           BoolFlag(a, "shared_counts", &k->shared_counts) ||
           BoolFlag(a, "fused_digest", &k->fused_digest) ||
           BoolFlag(a, "merge_headers", &k->merge_headers) ||
           BoolFlag(a, "scan_with_count", &k->scan_with_count) ||
           BoolFlag(a, "nccl_inline", &k->nccl_inline);
  }
  return true;
}

std::string DescribeKnobs(const Knobs& k) {
  const char* kinds[] = {"sweep", "tiles", "block", "bulk"};
  return absl::StrCat(
      "snapshot in ", k.snapshot == SnapshotMemory::kDevice ? "GPU memory" : "pinned host memory",
      ", ", k.lanes, " lanes, batches of ", k.batch_bytes >> 20, " MiB, mask kernel ",
      kinds[static_cast<int>(k.mask.kind)],
      k.mask.kind == WaveMaskKind::kSweep ? (k.mask.claim ? " (tiles claimed)" : " (grid-stepped)")
                                          : "",
      ", grid ", k.mask.blocks > 0 ? absl::StrCat(k.mask.blocks) : "every SM full", ", unroll ",
      k.mask.unroll, ", values ", k.mask.values ? "kept" : "re-read",
      k.mask.values && k.mask.smem_slots ? " (through shared memory)" : "", ", ", k.count_streams,
      " count streams", k.shared_counts ? " shared by the lanes" : " per lane", ", digest ",
      !k.overlap_digests ? "after the round"
      : k.fused_digest   ? "in the count"
                         : "a pass of its own",
      ", headers ", k.merge_headers ? "merged" : "apart", ", scan ",
      k.scan_with_count ? "with the count" : "with the gather", ", NCCL groups ",
      k.nccl_inline ? "inline (blocking communicators)" : "through NCCL's thread (non-blocking)");
}

}  // namespace refit
