// ConversionStage (see conversion_stage.h).
#include "exec/convert/conversion_stage.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace refit {

absl::Status ConversionStage::Check(const Plan& plan, int32_t rank, const OpsFactory& make_ops,
                                    absl::Span<char* const> buffers) {
  ops_ = make_ops ? make_ops() : nullptr;
  if (ops_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer rank ", rank, ": this data plane cannot convert (the engine "
        "asks for another dtype)"));
  }
  for (const Conversion& v : plan.conversions) {
    if (v.from.rank != rank) continue;
    const int64_t n = v.from.buffer_step > 0 && v.from.box.rank() > 0 ? v.from.box.shape(0) : 1;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t b = RecordBuffer(v.from, i);
      if (b < 0 || static_cast<size_t>(b) >= buffers.size() || buffers[b] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trainer rank ", rank, ": buffer ",
            b >= 0 && static_cast<size_t>(b) < plan.src.buffers.size()
                ? plan.src.buffers[b].name
                : absl::StrCat("#", b),
            " of a converted tensor is not registered"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ConversionStage>> ConversionStage::Create(
    const Plan& plan, int32_t rank, const OpsFactory& make_ops, Memory memory,
    std::vector<char*>* buffers, const std::set<int32_t>& global_amax_only,
    const std::set<int32_t>& engine_amax) {
  REFIT_ASSIGN_OR_RETURN(Converter c,
                         Converter::Create(plan, rank, global_amax_only, engine_amax));
  if (c.empty()) return std::unique_ptr<ConversionStage>();
  std::unique_ptr<ConversionStage> s(new ConversionStage(std::move(c)));
  s->memory_ = std::move(memory);
  buffers->resize(plan.src.buffers.size(), nullptr);
  REFIT_RETURN_IF_ERROR(s->Check(plan, rank, make_ops, *buffers));
  for (size_t b = 0; b < plan.src.buffers.size(); ++b) {
    const BufferSpec& spec = plan.src.buffers[b];
    if (!spec.scratch || spec.rank != rank) continue;
    REFIT_ASSIGN_OR_RETURN(
        (*buffers)[b],
        AnnotateStatus(s->memory_.allocate(spec.byte_size),
                       absl::StrCat("trainer rank ", rank, ": ", spec.byte_size,
                                    " bytes for converted values")));
    s->scratch_.emplace_back((*buffers)[b], spec.byte_size);
    s->scratch_bytes_ += spec.byte_size;
  }
  return s;
}

absl::StatusOr<std::unique_ptr<ConversionStage>> ConversionStage::CreateUnplaced(
    const Plan& plan, int32_t rank, const OpsFactory& make_ops,
    absl::Span<char* const> buffers) {
  REFIT_ASSIGN_OR_RETURN(Converter c, Converter::Create(plan, rank));
  if (c.empty()) return std::unique_ptr<ConversionStage>();
  std::unique_ptr<ConversionStage> s(new ConversionStage(std::move(c)));
  REFIT_RETURN_IF_ERROR(s->Check(plan, rank, make_ops, buffers));
  return s;
}

ConversionStage::~ConversionStage() {
  ops_.reset();
  for (const auto& [p, bytes] : scratch_) memory_.release(p, bytes);
}

absl::StatusOr<std::map<int32_t, std::vector<float>>> ConversionStage::Partials(
    absl::Span<char* const> buffers, const AmaxExchange& exchange, char* gather,
    int64_t gather_bytes) {
  REFIT_ASSIGN_OR_RETURN(auto sends, converter_.Partials(*ops_, buffers, gather, gather_bytes));
  std::map<int32_t, std::vector<float>> received;
  if (!converter_.peers().empty()) {
    REFIT_ASSIGN_OR_RETURN(received, exchange(sends));
  }
  return received;
}

absl::Status ConversionStage::Run(absl::Span<char* const> buffers,
                                  const AmaxExchange& exchange) {
  REFIT_ASSIGN_OR_RETURN(auto received, Partials(buffers, exchange));
  return converter_.Finish(*ops_, buffers, received);
}

absl::Status ConversionStage::ExchangeAmaxes(absl::Span<char* const> buffers,
                                             const AmaxExchange& exchange, char* gather,
                                             int64_t gather_bytes) {
  REFIT_ASSIGN_OR_RETURN(auto received, Partials(buffers, exchange, gather, gather_bytes));
  return converter_.Combine(received);
}

absl::Status ConversionStage::Convert(ConvertOps& ops, absl::Span<char* const> buffers,
                                      absl::Span<const Rows> rows, char* gather) {
  for (const Rows& r : rows) {
    const int32_t k = r.conversion;
    if (k < 0 || k >= converter_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("conversion ", k, " of ",
                                                     converter_.size()));
    }
    const Box& box = converter_.conversion(k).from.box;
    const bool whole = box.rank() == 0;
    if (!whole && (r.begin < box.origin(0) || r.end > box.limit(0) || r.begin >= r.end)) {
      return absl::InvalidArgumentError(absl::StrCat("rows [", r.begin, ", ", r.end,
                                                     ") outside conversion ", k, "'s record"));
    }
    REFIT_RETURN_IF_ERROR(converter_.ConvertRows(ops, buffers, k, r.begin, r.end,
                                                 r.codes || !converter_.ScalesAlone(k),
                                                 gather));
  }
  return absl::OkStatus();
}

}  // namespace refit
