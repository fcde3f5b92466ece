// Normalization: merging per-index records into indexed records.
#include "plan/internal/normalize.h"

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "layout/box.h"

namespace refit {
namespace internal_plan {
namespace {

// Extends *p (the last record of its (tensor, rank)) by r when r holds the
// next dim-0 index in the next of evenly spaced buffers at the same offset
// with the same in-buffer layout (see MergeIndexedRecords).
bool ExtendIndexed(Record* p, const Record& r) {
  if (p->byte_offset != r.byte_offset || p->box.limit(0) != r.box.origin(0)) {
    return false;
  }
  for (int d = 1; d < r.box.rank(); ++d) {
    if (p->box.origin(d) != r.box.origin(d) ||
        p->box.shape(d) != r.box.shape(d) || !(p->dims[d] == r.dims[d])) {
      return false;
    }
  }
  const int64_t n = p->box.shape(0);
  int32_t step = p->buffer_step;
  if (step == 0) {
    if (n != 1 || r.buffer <= p->buffer) return false;
    step = r.buffer - p->buffer;
  } else if (p->dims[0].splits.size() != 1 ||
             p->dims[0].splits[0].stride != 0 ||
             int64_t{p->buffer} + n * step != r.buffer) {
    return false;
  }
  Box::Indices shape(p->box.shape().begin(), p->box.shape().end());
  shape[0] = n + 1;
  p->box = Box::Unchecked(p->box.origin(), shape);
  p->dims[0].splits.assign(1, DimSplit{n + 1, 0});
  p->buffer_step = step;
  return true;
}

}  // namespace

void MergeIndexedRecords(std::vector<Record>* records) {
  std::vector<Record>& v = *records;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> last;
  size_t out = 0;  // v[0, out) is the merged prefix; out <= i
  for (size_t i = 0; i < v.size(); ++i) {
    const Record& r = v[i];
    const bool one_index =
        r.box.rank() >= 1 && r.buffer_step == 0 && r.box.shape(0) == 1;
    if (one_index) {
      auto it = last.find(std::make_pair(r.tensor, r.rank));
      if (it != last.end() && ExtendIndexed(&v[it->second], r)) continue;
    }
    // Only a one-index or indexed record can be extended by a later one
    // (merging past another record of the pair is exact all the same).
    if (one_index || r.buffer_step > 0) {
      last[std::make_pair(r.tensor, r.rank)] = static_cast<int32_t>(out);
    }
    if (out != i) v[out] = std::move(v[i]);
    ++out;
  }
  v.resize(out);
}

}  // namespace internal_plan
}  // namespace refit
