// Conversions: the destination stores a tensor in another dtype, or as a
// function of the trainer's values, and the sender computes it.
//
// The cases: the element-wise kinds, and kQuantize to a row of the format
// table (layout/quant_format.h, QuantFormat and ScaleSwizzle):
//   - kCastF32 / kNegExpF32: an f32 engine tensor from a bf16 / f16 / f32
//     trainer tensor, as is or as -exp(x) (vLLM's Mamba `A = -exp(A_log)`,
//     an f32 parameter whatever the model dtype);
//   - kFp8Block / kFp8BlockUe8m0: e4m3 weights with one f32 scale
//     (`<weight>_scale_inv`) per block x block tile of each logical weight
//     (per expert for stacked experts), from a bf16 / f16 / f32 trainer
//     tensor; Ue8m0 rounds every scale up to a power of two;
//   - kFp8BlockRequantUe8m0: the bytes vLLM's DeepGEMM path holds after
//     loading the kFp8Block checkpoint: each tile dequantized with its
//     float scale and requantized with a power-of-two scale
//     (exec/convert/quantize.h has the arithmetic);
//   - kFp8BlockRequantUe8m0 with kPackedUe8m0: the same codes, for
//     DeepGEMM on SM100 (kernel=deepgemm-sm100): the engine's
//     `<weight>_scale_inv` is u8 with one exponent byte per weight row and
//     tile column ([..., N, ceil(K/128)], each row the byte of its 128-row
//     tile), which the engine layout packs four to an int32, MN-major. A
//     sender's scratch holds one byte per owned tile; its
//     scale records read each byte for the tile's rows (a stride-0 digit);
//   - kMxfp8: e4m3 weights with one E8M0 byte (`<weight>_scale`, u8, vLLM's
//     MXFP8 weight_scale) per 1 x 32 block along the last dim;
//   - kNvfp4: a u8 engine weight [..., N, K/2] (two E2M1 codes a byte) from
//     a float trainer weight [..., N, K], with an f8e4m3 `<weight>_scale`
//     [..., N, K/16] and an f32 global scale `<weight>_scale_2` ([] or [E])
//     shared by every weight of its engine parameter (the dst weights whose
//     records share a buffer: q/k/v in qkv_proj, gate/up in w13); its amax
//     is that of all of them, per expert (exec/convert/nvfp4.h has the
//     formulas). Two recipes make these bytes (Nvfp4Recipe): ModelOpt's
//     exporter (an engine that loaded a ModelOpt NVFP4 checkpoint) and
//     vLLM's online quantization of a BF16 checkpoint, read off the
//     engine's global scale tensor (transform kNvfp4Vllm).
//
// How it runs: ConvertSource rewrites the source layout so that every
// converted record reads from a scratch buffer (BufferSpec::scratch) that
// holds the converted values row-major over the record's box, and adds the
// scale tensors with records in scratch buffers too. The planner then plans
// the converted layout like any other: the wire carries the engine's dtype
// (FP8 at half the bytes of BF16). Before its waves each sender computes
// its scratch buffers from its registered ones (exec/convert/convert.h); where its
// record cuts a tile that other ranks hold parts of, the holders first
// exchange per-tile partial amaxes (CutTileGroup) so that every part is
// quantized with the same scale. NVFP4's global amax is exchanged the same
// way, with the global scale tensor's leading dims (experts; none for a
// dense weight) as its tiles: every rank holding part of the parameter
// sends its partial amax per expert, a few floats.
#ifndef REFIT_PLAN_CONVERSION_H_
#define REFIT_PLAN_CONVERSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/layout.h"
#include "layout/quant_format.h"

namespace refit {

enum class ConversionKind : int32_t {
  kCastF32 = 1,    // f32(x)
  kNegExpF32 = 2,  // -exp(f32(x)), f32
  kQuantize = 3,   // codes and block scales of a format-table row
                   // (Conversion::format and swizzle)
};

// Which recipe makes an NVFP4 weight's global scale, block scales and codes
// (one format, two sets of bytes; the engine holds those of the recipe it
// loaded or quantized with):
//   kModelopt: ModelOpt's NVFP4QTensor export (weight_scale_2 = amax /
//     2688; exec/convert/nvfp4.h), what vLLM holds after loading a ModelOpt
//     NVFP4 checkpoint (ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE);
//   kVllm: vLLM's online quantization (Nvfp4OnlineMoEMethod,
//     _quantize_moe_weight_to_nvfp4 in vllm/model_executor/layers/
//     quantization/online/nvfp4.py at 0136201): SFScale (6 * 448) / amax as
//     torch evaluates it, weight_scale_2 its reciprocal, blocks by
//     FlashInfer's cvt_warp_fp16_to_fp4 (exec/convert/nvfp4_vllm_math.h).
enum class Nvfp4Recipe : int32_t {
  kModelopt = 0,
  kVllm = 1,
};

// "modelopt", "vllm".
const char* Nvfp4RecipeName(Nvfp4Recipe r);

// MXFP8's block length along the last dim (vLLM's MXFP8_BLOCK_SIZE), from
// its row of the format table.
inline constexpr int64_t kMxfp8Block = QuantFormatTraits(QuantFormat::kMxfp8).block_cols;
// NVFP4's block length along the last dim (ModelOpt's group_size).
inline constexpr int64_t kNvfp4Block = QuantFormatTraits(QuantFormat::kNvfp4).block_cols;

struct Conversion;

// The format `c` writes, for summaries: "cast_f32", "neg_exp_f32", or its
// format row's name ("fp8_block", "fp8_block_ue8m0",
// "fp8_block_requant_ue8m0", "fp8_block_requant_ue8m0_packed", "mxfp8",
// "nvfp4"), and for NVFP4 of vLLM's recipe "nvfp4 recipe=vllm".
std::string ConversionFormatName(const Conversion& c);

// The format-table row (layout/quant_format.h) a kQuantize conversion
// writes; nullptr for the element-wise kinds.
const QuantFormatRow* QuantFormatRowOf(const Conversion& c);

// True for kQuantize (block scales and tiles).
bool IsBlockQuantized(ConversionKind k);

// True when `c` quantizes to format `f` (any scale layout).
bool QuantizesTo(const Conversion& c, QuantFormat f);

// Bytes of one scale element of a kQuantize conversion, from its format
// row: 1 (E8M0, e4m3, UE8M0) for MXFP8, NVFP4 and the packed
// kFp8BlockRequantUe8m0 row, else 4.
int64_t ScaleElementBytes(const Conversion& c);

// One source record's conversion. `from` is the record as registered (the
// trainer's buffer, dtype from_dtype); the converted values lie row-major
// over from.box in scratch buffer plan.src.buffers[to_buffer] (the
// destination's dtype). kQuantize: scratch buffer scale_buffer holds the
// scales of OwnedTiles(from.box) (-1 when there are none), row-major, each
// a scale element of the format row (f32, E8M0 / UE8M0 bytes, e4m3).
struct Conversion {
  ConversionKind kind = ConversionKind::kCastF32;
  // kQuantize: the row of layout/quant_format.h the scratch holds. The
  // engine's MXFP8 / NVFP4 128 x 4 tiles lie in the destination records,
  // so those conversions write the row-major row; kPackedUe8m0 (DeepGEMM
  // on SM100) writes one exponent byte per owned tile.
  QuantFormat format = QuantFormat::kFp8Block;
  ScaleSwizzle swizzle = ScaleSwizzle::kRowMajor;
  DType from_dtype = DType::kBF16;
  Record from;
  int32_t to_buffer = -1;
  int32_t scale_buffer = -1;
  // Tile extent per tensor dim (1 on leading dims, `block` on the last
  // two); empty for element-wise kinds.
  std::vector<int64_t> tile;
  // kNvfp4: the plan.src tensor of the parameter's global scale (its dims
  // are from.box's leading dims), and the scratch buffer (-1: none) that
  // receives it, f32 row-major over from.box's leading dims, when this
  // record is of the weight that carries it and holds element [.., 0, 0].
  // The scratch at to_buffer holds from.box with its last extent halved.
  int32_t global_tensor = -1;
  int32_t global_buffer = -1;
  // kNvfp4: the recipe of the bytes (the engine global scale tensor's
  // transform: kNvfp4Vllm is kVllm, none kModelopt).
  Nvfp4Recipe recipe = Nvfp4Recipe::kModelopt;
  // Whether the colocated pull path runs this conversion in one pass (its
  // receivers read the BF16 record and write codes and scales as they
  // pull), with the cell its items read at most (elements, aligned in the
  // tensor); false and 0 x 0: two passes (the trainer converts into
  // scratch, the receivers pull it). Decided by the planner
  // (plan/one_pass.h).
  bool one_pass = false;
  int32_t one_pass_cell_rows = 0;
  int32_t one_pass_cell_cols = 0;
};

// Tiles of one source tensor that several source records share, each
// record holding only part of every tile: each holder rank computes its
// partial amax of every tile in `tiles` (tile coordinates), sends it to
// every other holder rank, and quantizes with the maximum of all.
struct CutTileGroup {
  int32_t tensor = 0;          // plan.src tensor
  Box tiles;                   // tile coordinates
  std::vector<int32_t> ranks;  // holder ranks, sorted, distinct (>= 1)
};

struct ConvertedSource {
  SideLayout layout;  // the source with conversions applied
  std::vector<Conversion> conversions;  // sorted by from.rank
  std::vector<CutTileGroup> cut_tiles;
};

// Applies every conversion `dst` asks of `src`: a dst tensor whose src
// namesake has another dtype, or that has a transform, and a dst weight
// whose format (TensorSpec::format, role kCodes) is a quantized one: the
// conversion writes that format's row, the row whose scale dtype is the
// dtype of the weight's scale tensor ("<w>_scale_inv" or "<w>_scale" of
// role kScales and the same format; kFp8BlockRequantUe8m0's u8 scales
// are its kPackedUe8m0 row). The planner never guesses a format from
// dtypes: an f8e4m3 or u8 engine tensor without a format is refused.
// `block` is the FP8 tile edge (128). Without any conversion the source
// comes back unchanged.
//
// A trainer tensor already quantized (its format set: TE's MXFP8 / NVFP4
// tensors) is not converted: its codes and scales move as bytes when the
// engine's tensor has the same format and role, and any other pair is
// INVALID_ARGUMENT naming the tensor, the trainer's rank and parameter and
// both formats (refit does not dequantize or requantize them).
//
// INVALID_ARGUMENT naming the tensor (and the engine rank and parameter
// holding it) when a conversion is not in the table (e.g. f32 -> bf16,
// e4m3 from an integer dtype, a format to per-tensor FP8), a quantized
// weight has no scale tensor, its scales are another format or of a dtype
// no row of its format has, it has fewer than 2 dims, or its scale
// tensor's shape is not the tile grid.
absl::StatusOr<ConvertedSource> ConvertSource(SideLayout src,
                                              const SideLayout& dst,
                                              int64_t block);

// The scale tensor name of a block-quantized weight: name + "_scale_inv"
// (FP8 blocks), name + "_scale" (MXFP8).
std::string ScaleTensorName(const std::string& weight);
std::string MxScaleTensorName(const std::string& weight);
// NVFP4's global scale of a weight: name + "_scale_2".
std::string GlobalScaleTensorName(const std::string& weight);

// The leading dims of `box` (all but the last two).
Box LeadingBox(const Box& box);

// Tiles of `box` along each dim: those intersecting it ([floor(o/t),
// ceil(end/t))) and those whose first element lies in it ([ceil(o/t),
// ceil(end/t))).
Box IntersectingTiles(const Box& box, const std::vector<int64_t>& tile);
Box OwnedTiles(const Box& box, const std::vector<int64_t>& tile);


}  // namespace refit

#endif  // REFIT_PLAN_CONVERSION_H_
