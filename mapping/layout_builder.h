// MappedSide (a SideLayout plus each buffer's local shape and dtype) and
// the LayoutBuilder the conventions use to produce one.
//
// Conventions describe placements as (tensor, buffer, box, per-dim DimPlace);
// the builder turns them into Records. A DimPlace says where the box's index
// range of one dim lands in the buffer's dim: at row `at`, and, when `block`
// is set, in runs of `block` rows spaced `period` rows apart (Megatron's QKV
// per query group, gate/up interleaved in chunks) — one record, however many
// runs.
//
// FP8: a buffer added for an FP8 weight tensor with derive_scales gets a
// companion f32 buffer ScaleName(name) of the same shape with its last two
// dims ceil-divided by the block; each placement of a weight is mirrored into
// it with every offset and extent divided by the block. A placement that
// would split a block (offset, run or extent not a multiple of the block,
// other than the tensor's own last partial block) is INVALID_ARGUMENT saying
// so.
#ifndef REFIT_MAPPING_LAYOUT_BUILDER_H_
#define REFIT_MAPPING_LAYOUT_BUILDER_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/round_up.h"
#include "layout/layout.h"
#include "mapping/model_family.h"
#include "mapping/swizzled_scales.h"

namespace refit {

// Local shape and dtype of one buffer of a MappedSide.
struct BufferInfo {
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
};

// One buffer as a rank registers it (or as the layout expects it).
struct LocalBuffer {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
  int64_t byte_size = 0;
};

struct MappedSide {
  SideLayout layout;
  std::vector<BufferInfo> buffer_info;  // parallel to layout.buffers
  // Buffers of rank r: layout.buffers[rank_begin[r], rank_begin[r + 1]).
  std::vector<int32_t> rank_begin;
};

// The buffers rank `rank` must register (names, local shapes, dtypes, byte
// sizes), in layout order. Empty for a rank outside the world.
std::vector<LocalBuffer> RankBuffers(const MappedSide& side, int32_t rank);

// Returns `side` reduced to rank `rank`: that rank's buffers and records
// (records' buffer indices renumbered), the side's tensors, world size and
// per-rank annotations kept, and every other rank without buffers. What a
// member keeps of its side's layout: RankBuffers and ValidateRankBuffers
// answer for `rank` as on `side`, and pattern fills and checks of `rank`
// (testing/reference_copy.h) touch the same bytes, while the other ranks'
// buffers and records (most of a large side's memory) are freed. A rank
// outside the world keeps no buffers and no records.
MappedSide RankOnly(MappedSide side, int32_t rank);

struct DimPlace {
  int64_t at = 0;      // buffer row (in this dim) of the box's first index
  int64_t block = 0;   // > 0: the box's indices run in blocks of this size
  int64_t period = 0;  // buffer rows between the starts of two blocks
};

class LayoutBuilder {
 public:
  // `side` names the side in errors ("trainer megatron", "engine vllm").
  // derive_scales: FP8 weight buffers get companion scale buffers (else the
  // convention places the scale tensors itself).
  LayoutBuilder(const ModelTensors& model, int32_t world_size,
                std::string side, bool derive_scales);

  // Returns the buffer `name` of `rank`, adding it with `shape` and the dtype
  // of `tensor` if new (ranks must be visited in increasing order). An
  // existing buffer must have the same shape (INTERNAL otherwise). Padding
  // rows [pad_begin, pad_end) of dim 0 are declared unsourced. With
  // ModelTensors::scale_swizzle kTiles128x4 the companion scale buffer holds whole
  // 128 x 4 tiles and an NVFP4 dense weight whole 32 x 32 blocks of codes
  // (vLLM's padding), their padding declared unsourced; INVALID_ARGUMENT
  // naming the buffer when a stacked or row-padded NVFP4 weight would need
  // the weight padding.
  // scale_parts: how many weights share the buffer's per-tensor FP8 scale
  // buffer (3 for a fused qkv, 2 for gate/up; per-tensor FP8 only).
  absl::StatusOr<int32_t> Buffer(int32_t rank, const std::string& name,
                                 std::vector<int64_t> shape, int32_t tensor,
                                 int64_t pad_begin = 0, int64_t pad_end = 0,
                                 int scale_parts = 1);

  // Places `box` of `tensor` into `buffer` per `places` (one per dim), and
  // the matching scale blocks into the companion buffer. INVALID_ARGUMENT
  // naming tensor, rank and buffer on a dtype mismatch, a block that does
  // not divide the extent, or an FP8 block split.
  // Per-tensor FP8: the weight's scale goes to entry `part` of the
  // companion "<name>_scale" buffer ([parts], or [E_local(, parts)] for
  // grouped experts), once per (tensor, buffer).
  absl::Status Place(int32_t tensor, int32_t buffer, const Box& box,
                     absl::Span<const DimPlace> places, int part = 0);

  // Places `box` of `tensor` as a dense block at buffer origin `at`.
  absl::Status PlaceAt(int32_t tensor, int32_t buffer, const Box& box,
                       absl::Span<const int64_t> at, int part = 0);

  // Appends to `dst_rank` copies of every buffer and record of `src_rank`
  // (a replica: engine DP ranks hold what their TP peer in replica 0 holds).
  // With expert_shift != 0 the records of stacked (per-expert) tensors get
  // their box's dim 0 moved by it: a rank alike to src_rank but for which
  // experts it holds (Megatron's EP ranks of one stage; names and local
  // shapes count experts locally, so they do not change).
  // Ranks must be built in order: src_rank < dst_rank, dst_rank new;
  // INTERNAL otherwise. A src_rank without buffers copies nothing.
  absl::Status CloneRank(int32_t src_rank, int32_t dst_rank,
                         int64_t expert_shift = 0);

  // Sets optional rank annotations.
  void SetStage(std::vector<int32_t> stage_of_rank);
  void SetHosts(int32_t gpus_per_host);

  // Checks that every tensor got records whose distinct boxes hold at least
  // as many elements as the tensor. Fails with INVALID_ARGUMENT naming the
  // first tensors nothing holds. (Records are validated by BuildPlan.)
  absl::StatusOr<MappedSide> Finish() &&;

  const ModelTensors& model() const { return model_; }
  const std::string& side() const { return side_; }

  // by_name_ refers to out_: the builder stays where it was made.
  LayoutBuilder(const LayoutBuilder&) = delete;
  LayoutBuilder& operator=(const LayoutBuilder&) = delete;

 private:
  // Looks buffers of the current rank up by name without copying names:
  // the set holds buffer indices, hashed and compared by their names.
  struct NameHash {
    using is_transparent = void;
    const std::vector<BufferSpec>* buffers;
    size_t operator()(absl::string_view name) const {
      return absl::Hash<absl::string_view>()(name);
    }
    size_t operator()(int32_t b) const { return (*this)((*buffers)[b].name); }
  };
  struct NameEq {
    using is_transparent = void;
    const std::vector<BufferSpec>* buffers;
    absl::string_view Name(int32_t b) const { return (*buffers)[b].name; }
    absl::string_view Name(absl::string_view name) const { return name; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Name(a) == Name(b);
    }
  };

  // Starts rank `rank` (the next one built, by rules or by CloneRank).
  void StartRank(int32_t rank);
  absl::Status PlaceOne(int32_t tensor, int32_t buffer, const Box& box,
                        absl::Span<const DimPlace> places);
  // NVFP4: the global scale of `tensor`'s parameter into the companion
  // global buffer, once per (buffer, experts), when `tensor` has one.
  absl::Status PlaceGlobalScale(int32_t tensor, int32_t buffer, const Box& box,
                                absl::Span<const DimPlace> places);
  // kernel=flashinfer: `box` of the scale tensor into buffer `sbuf` in the
  // swizzled 128 x 4 tile order (SwizzledScaleOffset), as a few records
  // (partial 32-row groups, partial tiles, whole tiles); INVALID_ARGUMENT
  // for a part interleaved in runs.
  absl::Status PlaceSwizzledScale(int32_t scale, int32_t sbuf, const Box& box,
                                  absl::Span<const DimPlace> places);
  // kernel=deepgemm-sm100: `box` of a per-row scale tensor into buffer
  // `sbuf` ([..., words, aligned rows] int32) at PackedScaleOffset, a
  // record per partial group of 4 columns and one for the whole groups;
  // INVALID_ARGUMENT for a part interleaved in runs.
  absl::Status PlacePackedScale(int32_t scale, int32_t sbuf, const Box& box,
                                absl::Span<const DimPlace> places);
  // Appends the record of scale part `box` (placed at `places`) cut to the
  // row run `rows` and the column run `cols` of its last two dims, with
  // the leading dims' maps `lead_dims`, at `byte_offset` of buffer `sbuf`.
  void AddScaleRunRecord(int32_t scale, int32_t sbuf, const Box& box,
                         absl::Span<const DimPlace> places, const SwizzleRun& rows,
                         const SwizzleRun& cols, absl::Span<const DimMap> lead_dims,
                         int64_t byte_offset);
  // The leading dims (all but the last two) of scale part `box` in buffer
  // `sbuf`, whose matrices are `matrix` bytes each, the first `lead` dims
  // of the tensor not in the buffer (one expert of stacked experts; every
  // leading dim of a flat buffer): their maps into `dims` (resized to the
  // box's rank), the byte offset of the part's first matrix returned.
  int64_t ScaleLeadDims(int32_t sbuf, const Box& box, absl::Span<const DimPlace> places,
                        int lead, int64_t matrix, absl::InlinedVector<DimMap, 4>* dims) const;
  // NVFP4 dense weight with kernel=flashinfer: `shape` ([N, K/2] bytes)
  // rounded up to multiples of 32 rows and 32 codes, the added bytes
  // appended to `padding`; INVALID_ARGUMENT naming the buffer when a
  // stacked or row-padded buffer would need it.
  absl::Status PadNvfp4Weight(int32_t rank, const std::string& name, bool row_padded,
                              std::vector<int64_t>* shape,
                              std::vector<ByteRange>* padding) const;
  absl::Status PlacePerTensorScale(int32_t tensor, int32_t buffer,
                                   const Box& box, int part);

  const ModelTensors& model_;
  std::string side_;
  bool derive_scales_;
  MappedSide out_;
  std::vector<int32_t> scale_buffer_;  // per buffer, -1 if none
  std::vector<int32_t> global_buffer_;  // per buffer: NVFP4 global, -1 if none
  // NVFP4 global scale records placed: (global tensor, buffer, first expert).
  absl::flat_hash_set<std::tuple<int32_t, int32_t, int64_t>> globals_placed_;
  std::vector<bool> scale_grouped_;    // per buffer: an [E_local, ...] scale
  // Per buffer: the padded scale columns of a swizzled scale buffer (a
  // multiple of 4), 0 for any other buffer.
  std::vector<int64_t> swizzle_cols_;
  // First buffer / record of each rank built so far (-1: none yet).
  std::vector<int64_t> first_buffer_, first_record_;
  // Buffers of the current rank by name (ranks are built in order).
  int32_t current_rank_ = -1;
  absl::flat_hash_set<int32_t, NameHash, NameEq> by_name_;
  // Records [begin, end) copied by CloneRank unchanged: their boxes repeat
  // boxes of earlier records, which Finish's coverage check can skip.
  std::vector<std::pair<int64_t, int64_t>> repeated_records_;
  // Per-tensor scales placed: (tensor, weight buffer).
  absl::flat_hash_set<std::pair<int32_t, int32_t>> scaled_;
};

// A box [origin, origin + shape).
Box MakeBox(absl::Span<const int64_t> origin, absl::Span<const int64_t> shape);

// Helpers shared by the conventions.
// `extent` cut evenly into n; fails with INVALID_ARGUMENT "<what> (extent)
// is not divisible by <axis>=n" otherwise.
absl::Status CheckDivides(int64_t extent, int64_t n, absl::string_view what,
                          absl::string_view axis);
// The same with `what` a callable returning the subject's name, called
// only on failure: rules check every placement on every rank, and a name
// formatted for each check that passes costs an allocation.
template <typename What,
          typename = std::enable_if_t<std::is_invocable_v<What&>>>
absl::Status CheckDivides(int64_t extent, int64_t n, What what,
                          absl::string_view axis) {
  if (n > 0 && extent % n == 0) return absl::OkStatus();
  const std::string name = what();
  return CheckDivides(extent, n, absl::string_view(name), axis);
}

}  // namespace refit

#endif  // REFIT_MAPPING_LAYOUT_BUILDER_H_
