// ConversionStage: a trainer rank's conversions (plan/conversion.h) made
// ready to run on its data plane: the Converter, the conversion steps on
// the data plane's memory (ConvertOps), the scratch buffers the converted
// values go to, and a round's steps: partial amaxes, their exchange among
// the trainer ranks that share cut FP8 tiles, finish. The executor and the
// pull runner each hold one and convert the whole rank before their waves;
// only how the amaxes travel differs (the AmaxExchange they pass to Run).
// The delta runner holds one without scratch (CreateUnplaced): it exchanges
// the amaxes once a round (ExchangeAmaxes), then converts a batch's records
// at a time into memory of its own (Convert). The conversion math is
// exec/convert/convert.h.
#ifndef REFIT_EXEC_CONVERT_CONVERSION_STAGE_H_
#define REFIT_EXEC_CONVERT_CONVERSION_STAGE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "exec/convert/convert.h"
#include "plan/plan.h"

namespace refit {

class ConversionStage {
 public:
  // Memory of the data plane's kind for the scratch buffers: allocate
  // fails with the allocator's status; release frees what it returned.
  struct Memory {
    std::function<absl::StatusOr<char*>(int64_t bytes)> allocate;
    std::function<void(char* p, int64_t bytes)> release;
  };
  // The conversion steps on the data plane's memory; null = it has none.
  using OpsFactory = std::function<std::unique_ptr<ConvertOps>()>;
  // Sends sends[peer] to every peer of peers() and returns what each sent
  // (received[peer], peers()[peer] values each); the caller's transport
  // error otherwise.
  using AmaxExchange = std::function<absl::StatusOr<std::map<int32_t, std::vector<float>>>(
      const std::map<int32_t, std::vector<float>>& sends)>;

  // The conversions of trainer rank `rank` in `plan` (which must outlive
  // the stage); null when the rank has none. `buffers` are the rank's
  // buffers indexed like plan.src.buffers (resized to them): the scratch
  // buffers are allocated from `memory` and set there. Fails with
  // INVALID_ARGUMENT for a malformed conversion or a converted tensor's
  // buffer that is not registered (naming it and the rank),
  // FAILED_PRECONDITION when `make_ops` gives no conversion steps, or the
  // allocator's error. `global_amax_only`, `engine_amax`: Converter::Create's.
  static absl::StatusOr<std::unique_ptr<ConversionStage>> Create(
      const Plan& plan, int32_t rank, const OpsFactory& make_ops, Memory memory,
      std::vector<char*>* buffers, const std::set<int32_t>& global_amax_only = {},
      const std::set<int32_t>& engine_amax = {});
  // The same conversions with no scratch buffers of their own: the caller
  // places their values with Convert. `buffers`: the rank's registered
  // buffers, indexed like plan.src.buffers. Fails as Create.
  static absl::StatusOr<std::unique_ptr<ConversionStage>> CreateUnplaced(
      const Plan& plan, int32_t rank, const OpsFactory& make_ops,
      absl::Span<char* const> buffers);
  ~ConversionStage();  // releases the scratch buffers

  // Trainer ranks this rank exchanges cut-tile amaxes with, and how many
  // f32 values go each way.
  const std::map<int32_t, int64_t>& peers() const { return converter_.peers(); }

  // Converts the rank's weights into its scratch buffers (`buffers` as
  // Create left them), exchanging amaxes through `exchange` when peers()
  // is not empty. INVALID_ARGUMENT naming the tensor and rank for a NaN or
  // infinity in a quantized weight, or the exchange's error.
  absl::Status Run(absl::Span<char* const> buffers, const AmaxExchange& exchange);

  // Run in parts. ExchangeAmaxes: the partial amaxes of the rank's
  // registered buffers (in `buffers`), their exchange through `exchange`
  // when peers() is not empty, combined and kept for Convert; it fails as
  // Run. Convert: enqueues on `ops` (which may be ops() or others of the
  // same memory kind) the values of `rows` (each rows [begin, end) of the
  // dim 0 of conversion(conversion).from.box, on multiples of
  // row_align(conversion) or the box's ends) into `buffers`, where their
  // scratch buffers (to_buffer, scale_buffer, global_buffer) are set: the
  // bytes Run writes at those rows' places (Converter::ConvertRows), and
  // nothing else. INVALID_ARGUMENT for a conversion index not below size()
  // or rows outside the box, naming the tensor and rank for a non-finite
  // value, here or at ops.Sync().
  // Without `codes`, a conversion that can (scales_alone) writes its
  // scales only (its to_buffer need not be set).
  struct Rows {
    int32_t conversion = 0;
    int64_t begin = 0, end = 0;
    bool codes = true;
  };
  // ExchangeAmaxes gathers the records it reads that do not lie dense
  // into `gather` (gather_bytes of memory of the ops' kind, free until it
  // returns) in bands of rows (Converter::Partials); null: the ops' own
  // working memory, whole records.
  absl::Status ExchangeAmaxes(absl::Span<char* const> buffers, const AmaxExchange& exchange,
                              char* gather = nullptr, int64_t gather_bytes = 0);
  // The source rows go through `gather` (gather_bytes of the largest of
  // `rows`, memory of the ops' kind) where they do not lie dense in their
  // buffers; null: the ops' own working memory.
  absl::Status Convert(ConvertOps& ops, absl::Span<char* const> buffers,
                       absl::Span<const Rows> rows, char* gather);
  // The rank's conversions (plan order), and the dim-0 extent of their tiles.
  int32_t size() const { return converter_.size(); }
  const Conversion& conversion(int32_t k) const { return converter_.conversion(k); }
  int64_t row_align(int32_t k) const { return converter_.RowAlign(k); }
  bool scales_alone(int32_t k) const { return converter_.ScalesAlone(k); }
  int64_t gather_bytes(const Rows& r) const {
    return converter_.GatherBytes(r.conversion, r.begin, r.end);
  }
  // Converter::RowBytes and RowsAt: the bytes of a scratch buffer rows
  // write, the rows that write given bytes of it.
  std::pair<int64_t, int64_t> row_bytes(int32_t k, int32_t buffer, int64_t begin,
                                        int64_t end) const {
    return converter_.RowBytes(k, buffer, begin, end);
  }
  std::pair<int64_t, int64_t> rows_at(int32_t k, int32_t buffer, int64_t lo, int64_t hi) const {
    return converter_.RowsAt(k, buffer, lo, hi);
  }

  // Bytes of the scratch buffers, and the conversion steps' workspace.
  int64_t scratch_bytes() const { return scratch_bytes_; }
  int64_t workspace_bytes() const { return ops_->workspace_bytes(); }
  ConvertOps& ops() { return *ops_; }

 private:
  ConversionStage(Converter c) : converter_(std::move(c)) {}
  // Create's checks: the conversion steps, the converted tensors' buffers.
  absl::Status Check(const Plan& plan, int32_t rank, const OpsFactory& make_ops,
                     absl::Span<char* const> buffers);
  // Partials and their exchange: what each peer sent.
  absl::StatusOr<std::map<int32_t, std::vector<float>>> Partials(
      absl::Span<char* const> buffers, const AmaxExchange& exchange, char* gather = nullptr,
      int64_t gather_bytes = 0);
  Converter converter_;
  std::unique_ptr<ConvertOps> ops_;
  Memory memory_;
  std::vector<std::pair<char*, int64_t>> scratch_;
  int64_t scratch_bytes_ = 0;
};

}  // namespace refit

#endif  // REFIT_EXEC_CONVERT_CONVERSION_STAGE_H_
