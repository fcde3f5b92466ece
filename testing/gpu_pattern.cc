// The test pattern on the GPU (see gpu_pattern.h).
#include "testing/gpu_pattern.h"

#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "testing/pattern_kernels.h"
#include "common/status_macros.h"
#include "exec/cuda/cuda_status.h"
#include "testing/reference_copy.h"

#define CK(x) REFIT_RETURN_IF_CUDA_ERROR(x)

namespace refit::testing {
namespace {

// FiniteWord's kind of a dtype (pattern_kernels.h).
int32_t FiniteKind(DType d) {
  switch (d) {
    case DType::kBF16:
      return 1;
    case DType::kF16:
      return 2;
    case DType::kF32:
      return 3;
    default:
      return 0;
  }
}

}  // namespace

absl::Status DevicePattern(const SideLayout& side, int rank,
                           const std::vector<char*>& buffers, uint64_t seed, bool check) {
  PatternOptions po;
  po.rank = rank;
  // The records' inner offset tables (every row of a record shares its
  // record's), in one device array.
  std::vector<int64_t> inner_at(side.records.size(), -1);
  std::vector<int64_t> inner_all;
  ForEachPatternRow(side, po,
                    [&](const Record& r, int32_t, const std::vector<int64_t>& inner, int64_t,
                        int64_t) {
                      int64_t& at = inner_at[&r - side.records.data()];
                      if (at >= 0) return;
                      at = static_cast<int64_t>(inner_all.size());
                      inner_all.insert(inner_all.end(), inner.begin(), inner.end());
                    });
  int64_t* dev_inner = nullptr;
  constexpr int64_t kChunk = 1 << 20;  // rows per launch
  PatternRow* dev_rows = nullptr;
  unsigned long long* wrong = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&dev_inner),
                std::max<size_t>(1, inner_all.size()) * sizeof(int64_t)));
  CK(cudaMemcpy(dev_inner, inner_all.data(), inner_all.size() * sizeof(int64_t),
                cudaMemcpyHostToDevice));
  CK(cudaMalloc(reinterpret_cast<void**>(&dev_rows), kChunk * sizeof(PatternRow)));
  CK(cudaMalloc(reinterpret_cast<void**>(&wrong), 2 * sizeof(unsigned long long)));
  // Per row of the chunk: where it is, for naming a wrong element.
  struct Where {
    int64_t record, buffer, off;
  };
  std::vector<PatternRow> rows;
  std::vector<Where> where;
  int64_t nwrong = 0;
  std::string first;
  absl::Status st;
  auto flush = [&]() -> absl::Status {
    if (rows.empty()) return absl::OkStatus();
    CK(cudaMemcpy(dev_rows, rows.data(), rows.size() * sizeof(PatternRow),
                  cudaMemcpyHostToDevice));
    const unsigned long long init[2] = {0, ~0ULL};
    CK(cudaMemcpy(wrong, init, sizeof(init), cudaMemcpyHostToDevice));
    CK(static_cast<cudaError_t>(LaunchPatternRows(
        dev_rows, static_cast<int64_t>(rows.size()), seed, check, wrong, nullptr)));
    unsigned long long got[2] = {0, 0};
    CK(cudaMemcpy(got, wrong, sizeof(got), cudaMemcpyDeviceToHost));
    if (got[0] > 0) {
      if (nwrong == 0) {
        const size_t r = got[1] >> 32;
        const int64_t j = static_cast<int64_t>(got[1] & 0xffffffffULL);
        const Record& rec = side.records[where[r].record];
        first = absl::StrCat("tensor ", side.tensors[rec.tensor].name, " element ",
                             rows[r].lin + j, " (linear index) on rank ", rank, " buffer ",
                             side.buffers[where[r].buffer].name, " byte ",
                             where[r].off + inner_all[inner_at[where[r].record] + j]);
      }
      nwrong += static_cast<int64_t>(got[0]);
    }
    rows.clear();
    where.clear();
    return absl::OkStatus();
  };
  ForEachPatternRow(side, po,
                    [&](const Record& r, int32_t buffer, const std::vector<int64_t>& inner,
                        int64_t off, int64_t lin) {
                      if (!st.ok()) return;
                      const int64_t ri = &r - side.records.data();
                      const TensorSpec& t = side.tensors[r.tensor];
                      PatternRow row;
                      row.base = buffers[buffer] + off;
                      row.inner = dev_inner + inner_at[ri];
                      row.lin = lin;
                      row.name_hash = NameHash(t.name);
                      row.count = static_cast<int32_t>(inner.size());
                      row.es = static_cast<int32_t>(DTypeSize(t.dtype));
                      row.finite = FiniteKind(t.dtype);
                      row.reserved = 0;
                      rows.push_back(row);
                      where.push_back({ri, buffer, off});
                      if (static_cast<int64_t>(rows.size()) == kChunk) st = flush();
                    });
  if (st.ok()) st = flush();
  if (st.ok()) st = CudaStatus(cudaDeviceSynchronize(), "pattern kernel");
  (void)cudaFree(dev_inner);
  (void)cudaFree(dev_rows);
  (void)cudaFree(wrong);
  REFIT_RETURN_IF_ERROR(st);
  if (nwrong > 0) {
    return absl::InternalError(absl::StrCat(nwrong, " wrong elements, the first: ", first));
  }
  return absl::OkStatus();
}

}  // namespace refit::testing
