// Quantize-on-pull: on the colocated data plane (exec/pull/cuda/pull_runner.h)
// an engine rank reads its trainers' BF16 weights and writes FP8 codes and
// block scales (kFp8Block, kFp8BlockUe8m0, kFp8BlockRequantUe8m0 (DeepGEMM's
// requantized power-of-two scales, `kernel=deepgemm`): 128 x 128 tiles, f32
// scales; kMxfp8: 1 x 32 blocks, E8M0 bytes; kNvfp4: packed E2M1 codes and
// e4m3 bytes per 1 x 16 block) straight into its own buffers in one pass,
// instead of the trainer quantizing into scratch buffers that the engine
// then pulls (plan/conversion.h, exec/convert/convert.h).
//
// NVFP4 needs the parameter's global amax (over every trainer's part of
// it, per expert) before any block is quantized: the trainer keeps such a
// conversion as a global-amax-only one (WithoutConversions' global_amax),
// computes and exchanges the amaxes as before the
// two-pass quantization (exec/convert/convert.h) and writes them, one f32 per
// leading index, into the conversion's codes scratch buffer, now that
// size; it exports the BF16 weight at the codes position and that buffer
// at the scale position. Its global scale tensor is still a scratch
// buffer it fills and the engine pulls. The engine's items read the BF16
// weight and their expert's global amax and write codes and scales.
//
// Which conversions fuse the planner decides (plan/one_pass.h) and records
// in the plan (Conversion::one_pass, with the cell its items read): a
// block quantization from a BF16 record, its source and destinations affine over
// every cell of elements (one stride per dim there, the last 1): 128 x 128
// cells for FP8 tiles; for MXFP8 the largest cell from 128 x 128 down to
// 1 x 32 that works (interleaved fused parameters qualify where their
// runs are multiples of the cell). A conversion whose record cuts tiles
// that other trainer records hold the rest of (FSDP's flat shards, a TP
// cut through a 128 x 128 tile or a 1 x 32 block) fuses too, except for
// the DeepGEMM requantization and NVFP4, and NVFP4 of vLLM's recipe
// (Nvfp4Recipe::kVllm) never fuses. Its trainer still computes the amaxes
// of all its tiles, exchanges the cut tiles' partial amaxes with their
// other holders (a few floats) and writes the scales of the tiles it owns
// into its scale scratch, which receivers pull as before; only the codes
// scratch goes, and the receiver's items quantize the codes of cut tiles
// with the scale read from the scale scratch of the tile's owner (the
// trainer record whose scale segment the receiver reads; cells of one
// block column for MXFP8). The rest keeps the two-pass path, and so does
// a conversion whose scratch an engine rank reads without pulling (on
// another host: FusableConversions).

// At prepare the trainer exports, at the positions of a fused conversion's
// scratch buffers in PairSourceBuffers' order, the conversion's BF16 source
// buffer instead, and sends one FusedSource per such position. The engine
// turns them and its slice into FusedItems (BuildFusedItems): each reads a
// region of whole tiles (one 128 x 128 tile, or up to 128 x 128 elements
// of 1 x 32 blocks), computes their amaxes and scales in the pass, and
// writes the codes of the part the engine holds and the scales it holds.
// The arithmetic is exec/convert/quantize.h's; RunFusedItemsHost runs items with
// the host loops, the CUDA kernel (exec/convert/cuda/convert_kernels.h) the same.
#ifndef REFIT_EXEC_PULL_FUSED_PULL_H_
#define REFIT_EXEC_PULL_FUSED_PULL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "plan/one_pass.h"
#include "plan/plan.h"

namespace refit {

// Largest tensor rank a fused conversion may have.
inline constexpr int kFusedMaxRank = kOnePassMaxRank;

// Splits a FusedSource carries per dim (DimMap::splits).
inline constexpr int kFusedMaxSplits = kOnePassMaxSplits;

// What a trainer tells a receiver about one fused scratch buffer (plain
// data: it travels as bytes): the conversion's source record, its dims as
// in Record::dims (elements of the BF16 source buffer exported at
// `position`), box in the tensor's coordinates.
struct FusedSource {
  int32_t position = 0;    // in PairSourceBuffers(slice, src, dst)
  int32_t role = 0;        // 0: the codes buffer, 1: the scales buffer
  int32_t conversion = 0;  // links a conversion's codes and scales
  int32_t format = 0;      // QuantFormat (its row-major scales: plan/one_pass.h)
  int32_t rank = 0;        // tensor rank, 2..kFusedMaxRank
  int32_t cut = 0;         // 1: the record cuts tiles (codes only; see above)
  int32_t splits[kFusedMaxRank] = {};  // per dim, 1..kFusedMaxSplits
  int64_t split_size[kFusedMaxRank][kFusedMaxSplits] = {};
  int64_t split_stride[kFusedMaxRank][kFusedMaxSplits] = {};
  int64_t tile[kFusedMaxRank] = {};
  int64_t origin[kFusedMaxRank] = {};
  int64_t shape[kFusedMaxRank] = {};
  // Items read at most cell_r x cell_c elements, cells aligned to
  // multiples of these in the tensor (128 x 128 for FP8 tiles; MXFP8 may
  // take smaller cells where a layout interleaves shorter runs).
  int64_t cell_r = 128, cell_c = 128;
  int64_t byte_offset = 0;   // Record::byte_offset
  int64_t buffer_bytes = 0;  // of the exported source buffer
  // NVFP4 (EngineAmaxConversions): 1 when the receiver computes the global
  // amax itself; then scale2_position is where the pair exports the global
  // scale scratch (-1: the receiver does not read it).
  int32_t engine_amax = 0;
  int32_t scale2_position = -1;
  int32_t amax_group = -1;  // engine_amax: the parameter (records sharing its amax)
};

// Indices into slice.conversions of trainer `rank` whose receivers fuse
// them: those the plan runs in one pass (Conversion::one_pass) whose
// scratch buffers every reader pulls (`pulls(dst_rank)`: whether an engine
// rank is a pull receiver; empty: every one).
std::set<int32_t> FusableConversions(const Plan& slice, int32_t rank,
                                     const std::function<bool(int32_t)>& pulls);

// `slice` without the conversions `fused` (what the trainer still runs
// itself): their scratch buffers are no longer scratch (nothing allocates
// them; the pair exports the source buffer at their positions instead).
// A fused conversion whose record cuts FP8 / MXFP8 tiles stays, without
// its codes (to_buffer -1): the trainer computes its scales into the scale
// scratch. A fused NVFP4 conversion stays, without scale buffer, its codes
// scratch resized to one f32 per leading index: the global amaxes (see
// above).
struct KeptConversions {
  Plan plan;                      // the slice without the fused conversions
  std::vector<int32_t> from;      // per plan.conversions[j]: its slice index
  std::set<int32_t> global_amax;  // the j of the fused NVFP4 ones (Converter's
                                  // global-amax-only conversions)
};
// Returns the plan the trainer converts with and what it kept.
KeptConversions WithoutConversions(const Plan& slice, const std::set<int32_t>& fused);

// The fused NVFP4 conversions of trainer `rank` (indices into
// slice.conversions, a subset of `fused`) whose global amax every receiver
// computes itself in its quantizing pass, so that the trainer reads
// nothing before "in place": every record of the parameter (those sharing
// its global scale, as vLLM's fused q/k/v) is this rank's and fused, no
// other trainer holds part of it, and every engine rank reading the codes
// of one reads all codes of all of them. Such a receiver
// quantizes with the amax it kept from its previous round, computes this
// round's in the same pass, requantizes the parameters whose amax changed
// and writes the amax and the global scale into the trainer's scratch
// (exec/pull/cuda/fused_pull_device.h); the bytes equal the two-pass ones.
std::set<int32_t> EngineAmaxConversions(const Plan& slice, int32_t rank,
                                        const std::set<int32_t>& fused);

// What trainer `rank` exports to engine rank `dst_rank`, by position:
// PairSourceBuffers, with each fused conversion's scratch buffers replaced
// by the conversion's BF16 source buffer (only the codes scratch where the
// record cuts tiles; NVFP4's scale buffer by its codes scratch buffer, the
// global amaxes).
std::vector<int32_t> ExportedSourceBuffers(const Plan& slice, int32_t rank,
                                           int32_t dst_rank,
                                           const std::set<int32_t>& fused);

// The FusedSources of the pair (rank, dst_rank) for the fused conversions
// `fused`, by position. `source_buffer(conversion index)` is where the
// pair's exports of those positions point: the conversion's from buffer.
std::vector<FusedSource> FusedSourcesOf(const Plan& slice, int32_t rank,
                                        int32_t dst_rank,
                                        const std::set<int32_t>& fused);

// One piece of quantize-on-pull work. The region: `rows` x `cols` elements
// of the source (whole tiles of the source record), row r at src_offset +
// 2 * r * src_pitch bytes of source buffer `src_buffer` (an index of the
// receiver's slice.src.buffers: the position it was exported at). Codes of
// the region-relative rectangle [w_r0, w_r1) x [w_c0, w_c1) go to
// dst_buffer (slice.dst index) at dst_offset + r * dst_pitch + c bytes
// (relative to the rectangle's origin); the scales of the tiles
// [s_r0, s_r1) x [s_c0, s_c1) (region-relative tile indices) to
// scale_buffer at scale_offset + (i * scale_pitch + j) * element bytes.
// dst_buffer / scale_buffer are -1 when the item writes none.
// scale_src_buffer >= 0 (the item of a record cutting tiles): the tiles'
// scales are read, not computed, from buffer scale_src_buffer of sender
// scale_src_rank (its scale scratch): tile (i, j) of the region at
// scale_src_offset + (i * scale_src_pitch + j) * element bytes.
struct FusedItem {
  int32_t src_rank = 0;
  int32_t src_buffer = 0;
  int64_t src_offset = 0;
  int64_t src_pitch = 0;
  int32_t dst_buffer = -1;
  int64_t dst_offset = 0;
  int64_t dst_pitch = 0;
  int32_t scale_buffer = -1;
  int64_t scale_offset = 0;
  int64_t scale_pitch = 0;
  int32_t rows = 0, cols = 0;
  int32_t w_r0 = 0, w_r1 = 0, w_c0 = 0, w_c1 = 0;
  int32_t s_r0 = 0, s_r1 = 0, s_c0 = 0, s_c1 = 0;
  int32_t scale_src_rank = -1;
  int32_t scale_src_buffer = -1;
  int64_t scale_src_offset = 0;
  int64_t scale_src_pitch = 0;
  int32_t format = 0;            // QuantFormat, row-major scales
  int32_t tile_r = 0, tile_c = 0;  // 128 x 128, 1 x 32 or 1 x 16
  // NVFP4: the f32 global amax of the region's leading index lies at
  // global_offset bytes of source buffer global_buffer. Its codes are
  // packed: columns [w_c0, w_c1) (even) are bytes [w_c0 / 2, w_c1 / 2).
  int32_t global_buffer = -1;
  int64_t global_offset = 0;
  // NVFP4 whose receiver computes the global amax (EngineAmaxConversions):
  // 1, and the global scale scratch (slice.src index, -1 if not read; the
  // f32 at global_offset) it writes next to the amax.
  int32_t engine_amax = 0;
  int32_t scale2_buffer = -1;
  int32_t amax_group = -1;  // FusedSource::amax_group
  // For errors: the source tensor (slice.src index) and the region's
  // global coordinates (leading dims, then row and column).
  int32_t tensor = 0;
  std::vector<int64_t> where;
};

// Copies the region of `it` (the pitches, rows and cols, and the weight and
// scale windows) into `d`, a device item of either pull kernel
// (exec/convert/cuda/pull_quantize_kernels.h, exec/pull/cuda/pull_nvfp4_kernels.h).
template <typename DeviceItem>
void CopyRegion(const FusedItem& it, DeviceItem* d) {
  d->src_pitch = it.src_pitch;
  d->dst_pitch = it.dst_pitch;
  d->scale_pitch = it.scale_pitch;
  d->rows = it.rows;
  d->cols = it.cols;
  d->w_r0 = it.w_r0;
  d->w_r1 = it.w_r1;
  d->w_c0 = it.w_c0;
  d->w_c1 = it.w_c1;
  d->s_r0 = it.s_r0;
  d->s_r1 = it.s_r1;
  d->s_c0 = it.s_c0;
  d->s_c1 = it.s_c1;
}

struct FusedProgram {
  std::vector<FusedItem> items;
  // slice.src buffers whose tasks the items replace (drop them from the
  // pull program's copies).
  std::set<int32_t> fused_buffers;
  int64_t bytes = 0;  // codes and scale bytes the items write
};

// The items of engine rank `dst_rank` for the FusedSources each sender
// sent (by trainer rank; positions as in PairSourceBuffers). INVALID_ARGUMENT
// naming the tensor when a source is malformed or a destination is not
// affine (the two members would hold different plans).
absl::StatusOr<FusedProgram> BuildFusedItems(
    const Plan& slice, int32_t dst_rank,
    const std::map<int32_t, std::vector<FusedSource>>& sources);

// Runs items on host memory: src[rank][b] the exported buffer of sender
// `rank` at slice index b, dst[b] the receiver's buffers. INVALID_ARGUMENT
// naming the tensor and the region for a NaN or infinity.
absl::Status RunFusedItemsHost(absl::Span<const FusedItem> items,
                               const Plan& slice,
                               const std::map<int32_t, std::vector<const char*>>& src,
                               absl::Span<char* const> dst);

}  // namespace refit

#endif  // REFIT_EXEC_PULL_FUSED_PULL_H_
