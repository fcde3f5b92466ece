// An independent statement of the weight conventions refit moves between,
// for the end-to-end conventions tests (tests/mapping/conventions_test.cc):
// each trainer's (Megatron-Core, HF / FSDP) and each engine's (vLLM, SGLang)
// local buffers per rank, written by explicit slicing and concatenation of
// the full checkpoint tensors, never by a call into mapping/'s tables. And
// RunCase, which checks mapping/'s layouts, the planner and the reference
// copy against those statements.
//
// Files: conventions_pieces.cc (Piece, Checkpoint, slicing), conventions_
// trainers.cc (Megatron, FSDP), conventions_engines.cc (vLLM, SGLang),
// conventions_run_case.cc (RunCase).
//
// Failures are gtest failures in the calling test (ADD_FAILURE / EXPECT /
// ASSERT), never a status: these are test oracles, not library code.
#ifndef REFIT_TESTING_CONVENTIONS_REFERENCE_H_
#define REFIT_TESTING_CONVENTIONS_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "mapping/model_config.h"
#include "mapping/testing/arrays.h"

namespace refit::testing {

// ---------------------------------------------------------------------------
// Checkpoint pieces and their slicing (conventions_pieces.cc).

// The FP8 block edge: a block-scaled weight has one scale per 128 x 128.
inline constexpr int64_t kBlock = 128;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
// `v` rounded up to a multiple of `m`.
inline int64_t Up(int64_t v, int64_t m) { return CeilDiv(v, m) * m; }

// A weight and, for an FP8 weight, its block scales, sliced together: rows /
// cols [b, b+n) of the weight take scale rows / cols [b/128, ceil((b+n)/128)).
// Per-tensor FP8 (pt): s is the weight's one scale, as [1] ([E, 1] for a
// stacked tensor), untouched by slicing and concatenated by fusion.
struct Piece {
  testing_mapping::Arr w;
  bool fp8 = false;
  testing_mapping::Arr s;
  bool pt = false;
};

// The full tensors of a model's checkpoint, and which of them the
// expectations used (every tensor must be placed by some convention).
class Checkpoint {
 public:
  explicit Checkpoint(testing_mapping::Ckpt ck) : ck_(std::move(ck)) {}

  // The tensor `name` with its "<w>_scale_inv" (block FP8) or "<w>_scale"
  // (per-tensor FP8) when the checkpoint has one. Fails the test (and
  // returns zeros) when there is no tensor `name`; fails it when its shape
  // is not `shape` (checks the model family).
  Piece P(const std::string& name, std::vector<int64_t> shape);
  // Names of checkpoint tensors no expectation used.
  std::vector<std::string> Unused() const;
  const testing_mapping::Ckpt& all() const { return ck_; }

 private:
  testing_mapping::Ckpt ck_;
  std::set<std::string> used_;
};

// Slices dim `d` counted from the end (1 = last, 2 = second to last).
Piece SliceEnd(const Piece& p, int from_end, int64_t b, int64_t n);
// Rows [b, b+n) of a matrix (or of a stacked matrix's members), or of a vector.
Piece Rows(const Piece& p, int64_t b, int64_t n);
// Columns [b, b+n) (the last dim).
Piece Cols(const Piece& p, int64_t b, int64_t n);
// Part i of `parts` equal parts of the rows / the columns.
Piece RowsOf(const Piece& p, int64_t parts, int64_t i);
Piece ColsOf(const Piece& p, int64_t parts, int64_t i);
// vLLM's A: the f32 parameter its loader fills with -exp(A_log.float()).
Piece NegExpF32(const Piece& p);
// Concatenation of rows (scales concatenated too, as vLLM's merged params).
Piece CatRows(const std::vector<Piece>& ps);
// The pieces stacked on a new leading dim (scales too).
Piece StackP(const std::vector<Piece>& ps);
// Member e of a stacked piece (scales too).
Piece MemberP(const Piece& p, int64_t e);
// Rank r's rows of an embedding / LM head of `vocab` rows padded with zero
// rows to `padded` and split over tp ranks.
Piece Vocab(const Piece& p, int64_t vocab, int64_t padded, int64_t tp, int64_t r);
// Puts the piece as buffer `name` (and its scale as "<w>_scale_inv" or
// "<w>_scale") into `b`. Fails the test when `name` is there already.
void Put(testing_mapping::Bufs& b, const std::string& name, const Piece& p);

// ---------------------------------------------------------------------------
// Trainers (conventions_trainers.cc).

// megatron:tp=,pp=,dp=,ep=,etp=,first=,last=,experts=grouped|indexed,
// glu_chunk= as options.
struct MegatronOpts {
  int64_t tp = 1, pp = 1, dp = 1, ep = 1, etp = 1, first = 0, last = 0;
  bool grouped = false;
  int64_t chunk = 0;
};

// Each Megatron-Core rank's buffers (rank k = (stage * dp + d) * tp + r),
// from Megatron-Core's conventions: fused QKV by query
// group, fused GLU ([gate; up] or chunk-interleaved), vocab padded, pipeline
// stages, expert (tensor) parallelism, indexed or grouped experts. Fails the
// test when a tensor it expects is missing or of another shape.
std::vector<testing_mapping::Bufs> ExpectMegatron(const ModelConfig& c,
                                                  Checkpoint& ck,
                                                  const MegatronOpts& o);
// HF / FSDP (HSDP): every tensor Shard(0) by torch.chunk over the shard
// group of `shard` of the `dp` ranks; experts per member.
std::vector<testing_mapping::Bufs> ExpectFsdp(Checkpoint& ck, int64_t dp,
                                              int64_t shard);

// A trainer's statement for RunCase.
using TrainerExpect =
    std::function<std::vector<testing_mapping::Bufs>(const ModelConfig&, Checkpoint&)>;
TrainerExpect Megatron(MegatronOpts o);
TrainerExpect Fsdp(int64_t dp, int64_t shard);

// ---------------------------------------------------------------------------
// Engines (conventions_engines.cc).

// Each vLLM rank's buffers (tp * dp ranks, dp-major) as vLLM's loaders fill
// them: merged QKV / gate_up, vocab padded to 64 and split, experts sharded
// over tp or, with ep, placed whole (linear or round_robin). SGLang
// (sglang = true): MLA's fused module is fused_qkv_a_proj_with_mqa; with
// sglang_ep > 0, each TP group spreads the experts over sglang_ep ranks and
// shards each over tp / sglang_ep of them. Fails the test when a tensor it
// expects is missing or of another shape.
std::vector<testing_mapping::Bufs> ExpectVllm(const ModelConfig& c,
                                              Checkpoint& ck, int64_t tp,
                                              int64_t dp, bool ep,
                                              bool sglang = false,
                                              int64_t sglang_ep = 0,
                                              bool round_robin = false);

// ---------------------------------------------------------------------------
// The driver (conventions_run_case.cc).

// One case end to end. `model` is a tiny model's name or its config JSON;
// `trainer` / `engine` are spec strings; `expect_trainer` states the
// trainer's buffers, ExpectVllm(tp, dp, ep, ...) the engine's. Fails the
// test when: a spec does not parse or a layout does not build; the two
// sides' logical tensors differ (beyond Mamba's A_log as -exp in f32); a
// checkpoint tensor is expected by no statement; a rank's stated buffers do
// not pass ValidateRankBuffers; a record is invalid or addresses other
// bytes than the checkpoint's; ScatterToRecord / GatherFromRecord do not
// rebuild the buffers / tensors; or BuildPlan + ReferenceCopy from the
// trainer's buffers does not give every engine buffer byte for byte, or
// writes a padding byte.
void RunCase(const std::string& model, const std::string& trainer,
             const TrainerExpect& expect_trainer, const std::string& engine,
             int64_t tp, int64_t dp, bool ep);

}  // namespace refit::testing

#endif  // REFIT_TESTING_CONVENTIONS_REFERENCE_H_
