// Converter: one source rank's conversions (plan/conversion.h) before its
// rounds: the values the engine stores, computed from the rank's registered
// buffers into its scratch buffers.
//
// A run has three steps, so that tiles cut between ranks get one scale:
//   1. Partials(): the rank's amax of every cut tile it holds a part of,
//      in the order of plan.cut_tiles; for each peer holding the same
//      tiles, the slice of them to send (SendLayout);
//   2. the caller exchanges them (the executor, over its transport) and
//      passes what each peer sent to Finish();
//   3. Finish() converts every record: f32 casts, -exp, or FP8 blocks with
//      the amax of whole tiles from the rank's own data and of cut tiles
//      from the exchange; scales of the tiles the rank owns go to its scale
//      buffers.
// Host memory only here; the CUDA copier runs the same steps with
// kernels (exec/convert/cuda/convert_kernels.h).
#ifndef REFIT_EXEC_CONVERT_CONVERT_H_
#define REFIT_EXEC_CONVERT_CONVERT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "exec/convert/quantize.h"
#include "plan/plan.h"

namespace refit {

// The heavy steps of a conversion, on one kind of memory (host loops here;
// CUDA kernels in exec/convert/cuda/convert_kernels.h). Pointers are of that kind.
class ConvertOps {
 public:
  virtual ~ConvertOps() = default;
  // The part `part` (inside r.box) of record r (elements of `dtype`),
  // dense row-major: where it lies when it does (DenseRecordData), else a
  // copy into `into` (memory of this kind, part's elements x dtype bytes)
  // or, with `into` null, into the steps' own working memory, valid until
  // the next Gather.
  virtual absl::StatusOr<const char*> Gather(const Record& r, const Box& part, DType dtype,
                                             absl::Span<char* const> buffers, char* into) = 0;
  // TileAmaxHost's result for dense data. INVALID_ARGUMENT naming the first
  // non-finite element's global index.
  virtual absl::StatusOr<std::vector<float>> TileAmax(
      const char* dense, DType dtype, const Box& box,
      const std::vector<int64_t>& tile) = 0;
  // QuantizeHost into out (e4m3; null: scales only) and scales (f32, E8M0
  // bytes for kE8m0; may be null).
  virtual absl::Status Quantize(const char* dense, DType dtype, const Box& box,
                                const std::vector<int64_t>& tile,
                                const std::vector<float>& amax, ScaleMode mode,
                                char* out, char* scales) = 0;
  // TileAmax then Quantize, for a record none of whose tiles another rank
  // holds part of (engines may fuse them). A non-finite value fails this
  // call or the next Sync() (engines may check once per batch) with
  // INVALID_ARGUMENT "<what>: non-finite value at [coordinates]".
  virtual absl::Status QuantizeWhole(const char* dense, DType dtype, const Box& box,
                                     const std::vector<int64_t>& tile, ScaleMode mode,
                                     char* out, char* scales, absl::string_view what);
  // NVFP4 (exec/convert/nvfp4.h), pass 1 on dense data of `box`: per index of the
  // box's leading dims the amax of its slice (`global`) and, with
  // `blocks`, the amax of the part of every 1 x 16 tile in the box
  // (`block`, row-major over IntersectingTiles). INVALID_ARGUMENT naming the
  // first non-finite element's global index.
  struct Nvfp4Amaxes {
    std::vector<float> block;
    std::vector<float> global;
  };
  virtual absl::StatusOr<Nvfp4Amaxes> Nvfp4Amax(const char* dense, DType dtype,
                                                const Box& box, bool blocks) = 0;
  // Nvfp4Amax's global amaxes into *global, which is valid once this call
  // or the next Sync() returns OK (engines batch the passes of many
  // records behind one wait); a non-finite value fails one of them with
  // INVALID_ARGUMENT "<what>: non-finite value at [coordinates]".
  virtual absl::Status Nvfp4GlobalAmax(const char* dense, DType dtype, const Box& box,
                                       std::vector<float>* global, absl::string_view what);
  // NVFP4, pass 2, by `recipe`: QuantizeNvfp4Host (kModelopt) or
  // QuantizeNvfp4VllmBoxHost (kVllm) with the global scales of
  // `global_amax` (per leading index, the parameter's amax) and the block
  // amaxes `block_amax` (empty: each tile's own, every tile whole in the
  // box) into out (packed) and scales (e4m3 bytes; may be null); the
  // engine's global scales (f32 weight_scale_2: ModelOpt's amax / 2688,
  // vLLM's 1 / SFScale) also into global_scales when not null.
  virtual absl::Status QuantizeNvfp4(const char* dense, DType dtype, const Box& box,
                                     Nvfp4Recipe recipe, const std::vector<float>& block_amax,
                                     const std::vector<float>& global_amax, char* out,
                                     char* scales, char* global_scales) = 0;
  // Copies `values` (host memory, free to go when this returns) to out.
  virtual absl::Status StoreF32(absl::Span<const float> values, char* out) = 0;
  // CastF32Host into out.
  virtual absl::Status Cast(const char* dense, DType dtype, int64_t n,
                            bool neg_exp, char* out) = 0;
  // Waits until every step issued is complete. Fails with the first
  // deferred QuantizeWhole error, or the engine's error.
  virtual absl::Status Sync() = 0;
  // Returns the bytes of working memory the steps hold now (Gather's dense
  // copies and the like), beyond the caller's buffers.
  virtual int64_t workspace_bytes() const { return 0; }
};

// Host loops (exec/convert/quantize.h).
std::unique_ptr<ConvertOps> MakeHostConvertOps();

// Where the part `part` (inside r.box) of record r (elements of `dtype`)
// already lies row-major and dense in its buffer: the address of its first
// element; null when it does not (a Gather must copy it). INVALID_ARGUMENT
// if its buffer is missing.
absl::StatusOr<const char*> DenseRecordData(const Record& r, const Box& part, DType dtype,
                                            absl::Span<char* const> buffers);

class Converter {
 public:
  // The conversions of source rank `rank` in `plan`; an empty converter
  // when it has none. The NVFP4 conversions of `global_amax_only`
  // (indices into plan.conversions; exec/pull/fused_pull.h) compute and
  // exchange the global amax as usual, then write it (f32 per leading
  // index) to their to_buffer and the global scales to global_buffer,
  // quantizing nothing. Those of `engine_amax` (a subset) are not run at
  // all: their receivers compute the global amax themselves
  // (exec/pull/fused_pull.h's EngineAmaxConversions). INVALID_ARGUMENT for
  // a conversion whose buffers are not the rank's.
  static absl::StatusOr<Converter> Create(const Plan& plan, int32_t rank,
                                          const std::set<int32_t>& global_amax_only = {},
                                          const std::set<int32_t>& engine_amax = {});

  bool empty() const { return convs_.empty(); }

  // Peer ranks (source-side) that this rank exchanges cut-tile amaxes
  // with, and how many f32 values go each way (the same count).
  const std::map<int32_t, int64_t>& peers() const { return peer_count_; }

  // Step 1 on host buffers (indexed like plan.src.buffers; this rank's
  // registered ones set). Returns, per peer in peers(), the f32 values to
  // send it. INVALID_ARGUMENT naming the tensor, the element and the rank
  // for a NaN or infinity in a quantized weight. A record whose amaxes it
  // takes (cut FP8 tiles, NVFP4) and that does not lie dense in its buffer
  // is gathered whole into the ops' own working memory, or, given
  // `gather` (memory of the ops' kind, gather_bytes), in bands of whole
  // dim-0 rows of at most gather_bytes each into it (a row larger than
  // that alone, into the ops' memory); the same amaxes either way.
  absl::StatusOr<std::map<int32_t, std::vector<float>>> Partials(
      ConvertOps& ops, absl::Span<char* const> buffers, char* gather = nullptr,
      int64_t gather_bytes = 0);

  // Step 3: `received[peer]` holds what the peer sent. Writes this rank's
  // scratch buffers (buffers[to_buffer], buffers[scale_buffer] set):
  // Combine, then Convert of every conversion, then ops.Sync().
  // INVALID_ARGUMENT as above or when a peer's count is wrong.
  absl::Status Finish(ConvertOps& ops, absl::Span<char* const> buffers,
                      const std::map<int32_t, std::vector<float>>& received);

  // Step 3 in parts, for a caller converting a few records at a time (the
  // delta runner, batch by batch). Combine takes the peers' partial amaxes
  // (as Finish; INVALID_ARGUMENT when a peer's count is wrong) and keeps
  // every cut tile's and NVFP4 parameter's amax until the next Partials.
  // Convert then enqueues on `ops` the values of conversion `index` (the
  // rank's conversions in plan order: conversion(index)) into its buffers
  // in `buffers` (to_buffer, scale_buffer, global_buffer set; the same
  // bytes Finish writes, however often it runs); it fails as Finish, a
  // non-finite value possibly only at the next ops.Sync().
  absl::Status Combine(const std::map<int32_t, std::vector<float>>& received);
  absl::Status Convert(ConvertOps& ops, absl::Span<char* const> buffers, int32_t index);
  // Convert of rows [begin, end) of conversion `index`'s from.box dim 0
  // (global indices; each a multiple of RowAlign(index) or an end of the
  // box): their values at their places in the scratch buffers (codes of
  // those rows, scales of the tiles they own, NVFP4 global scales of the
  // experts among them or, for a 2-D weight, the one global scale), the
  // bytes Convert writes there; nothing else of the buffers is touched.
  // Without `codes`, a kind that can (ScalesAlone) writes the scales only.
  // The rows' source values are gathered into `gather` (memory of the ops'
  // kind, GatherBytes) where they do not lie dense in their buffer (null:
  // the ops' own working memory).
  absl::Status ConvertRows(ConvertOps& ops, absl::Span<char* const> buffers, int32_t index,
                           int64_t begin, int64_t end, bool codes, char* gather);
  // The bytes ConvertRows gathers rows [begin, end) of conversion `index`
  // into (0: they lie dense in their buffer).
  int64_t GatherBytes(int32_t index, int64_t begin, int64_t end) const;
  // Whether ConvertRows of conversion `index` can write its scales without
  // its codes (FP8 and MXFP8 blocks: yes; NVFP4, element-wise kinds: no).
  bool ScalesAlone(int32_t index) const;
  // The dim-0 extent of conversion `index`'s tiles (1: element-wise kinds).
  int64_t RowAlign(int32_t index) const;
  // For scratch buffer `buffer` of conversion `index` (its to_buffer,
  // scale_buffer or global_buffer): RowBytes, the bytes [first, second)
  // that ConvertRows of rows [begin, end) writes there (the whole buffer
  // for a 2-D weight's one global scale); RowsAt, the rows (on
  // RowAlign(index)'s multiples, within the box) whose ConvertRows writes
  // bytes [lo, hi) of it (the first rows for that global scale).
  std::pair<int64_t, int64_t> RowBytes(int32_t index, int32_t buffer, int64_t begin,
                                       int64_t end) const;
  std::pair<int64_t, int64_t> RowsAt(int32_t index, int32_t buffer, int64_t lo,
                                     int64_t hi) const;
  // The rank's conversions, in plan order.
  int32_t size() const { return static_cast<int32_t>(convs_.size()); }
  const Conversion& conversion(int32_t index) const { return *convs_[index].c; }

 private:
  struct Conv {
    const Conversion* c = nullptr;
    const TensorSpec* tensor = nullptr;  // destination dtype
    Box tiles;                     // IntersectingTiles(from.box)
    std::vector<float> amax;       // per tile of `tiles`, after step 1
    bool has_cut = false;
    // kNvfp4: the record's experts (LeadingBox(from.box)) and its partial,
    // then the parameter's, amax of each.
    Box experts;
    std::vector<float> global_amax;
    bool global_only = false;
    bool skip = false;  // its receivers compute the global amax
  };
  // For one cut-tile group this rank is in: its tiles' partial amaxes.
  struct Group {
    const CutTileGroup* g = nullptr;
    std::vector<float> own;
  };
  // The parts of v's record its amax pass reads at once (Partials): the
  // whole box where it lies dense or `gather_bytes` is 0, else bands of
  // dim-0 rows of at most gather_bytes (at least one row each).
  absl::StatusOr<std::vector<Box>> AmaxBands(const Conv& v, absl::Span<char* const> buffers,
                                             int64_t gather_bytes) const;
  // NVFP4 rows `sub` of v's record (gathered into `gather` where needed),
  // with their block and global amaxes, into out, scales, global_scales.
  absl::Status ConvertNvfp4(ConvertOps& ops, const Conv& v, absl::Span<char* const> buffers,
                            const Box& sub, char* gather,
                            const std::vector<float>& block_amax,
                            const std::vector<float>& global_amax, char* out, char* scales,
                            char* global_scales);

  const Plan* plan_ = nullptr;
  int32_t rank_ = 0;
  std::vector<Conv> convs_;
  std::vector<Group> groups_;
  std::map<int32_t, int64_t> peer_count_;
};

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CONVERT_H_
