// WaveOrderRun (see wave_order_run.h).
#include "testing/wave_order_run.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "testing/reference_copy.h"

namespace refit {
namespace testing {

std::string RunInWaveOrder(const Plan& plan) {
  OwnedBuffers src = AllocateBuffers(plan.src);
  FillPattern(plan.src, src.ptrs);
  OwnedBuffers dst = AllocateBuffers(plan.dst);
  // The wave that wrote each engine byte (-1: none yet).
  std::vector<std::vector<int32_t>> written(plan.dst.buffers.size());
  for (size_t b = 0; b < plan.dst.buffers.size(); ++b) {
    written[b].assign(plan.dst.buffers[b].byte_size, -1);
  }
  for (const Message& m : plan.messages) {
    const std::string at = absl::StrCat(m.relay ? "relay engine rank " : "trainer rank ",
                                        m.src_rank, " -> engine rank ", m.dst_rank, " wave ",
                                        m.wave, ": ");
    const SideLayout& from = m.relay ? plan.dst : plan.src;
    for (int32_t i = m.first_segment; i < m.first_segment + m.num_segments; ++i) {
      const Segment& s = plan.segments[i];
      const Record& sr = from.records[s.src_record];
      const Record& dr = plan.dst.records[s.dst_record];
      if (sr.rank != m.src_rank || dr.rank != m.dst_rank) return at + "segment of other ranks";
      if (m.relay && (sr.tensor != dr.tensor || sr.rank == dr.rank)) {
        return at + "relay reads another tensor or its own rank";
      }
      if (IsEmpty(s.box)) continue;
      const int64_t es = DTypeSize(plan.dst.tensors[dr.tensor].dtype);
      Box::Indices g(s.box.origin().begin(), s.box.origin().end());
      while (true) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < s.box.rank(); ++d) {
          so += DimOffset(sr.dims[d], g[d] - sr.box.origin(d));
          doff += DimOffset(dr.dims[d], g[d] - dr.box.origin(d));
        }
        const int32_t sb = RecordBuffer(sr, g.empty() ? 0 : g[0] - sr.box.origin(0));
        const int32_t db = RecordBuffer(dr, g.empty() ? 0 : g[0] - dr.box.origin(0));
        so = sr.byte_offset + so * es;
        doff = dr.byte_offset + doff * es;
        for (int64_t k = 0; k < es; ++k) {
          if (m.relay && written[sb][so + k] < 0) return at + "relay reads a byte no wave wrote";
          if (m.relay && written[sb][so + k] >= m.wave) {
            return at + "relay reads a byte of its own wave or a later one";
          }
          if (written[db][doff + k] != -1) return at + "engine byte written twice";
          written[db][doff + k] = m.wave;
          dst.ptrs[db][doff + k] = (m.relay ? dst.ptrs : src.ptrs)[sb][so + k];
        }
        int d = s.box.rank() - 1;
        while (d >= 0 && ++g[d] == s.box.limit(d)) {
          g[d] = s.box.origin(d);
          --d;
        }
        if (d < 0) break;
      }
    }
  }
  absl::Status st = CheckPattern(plan.dst, dst.ptrs);
  if (!st.ok()) return st.ToString();
  // ReferenceCopy (wave order with relays) agrees; it computes converted
  // scratch buffers itself (checked by the caller).
  if (!plan.conversions.empty()) return "";
  OwnedBuffers ref = AllocateBuffers(plan.dst);
  st = ReferenceCopy(plan, src.ptrs, ref.ptrs);
  if (st.ok()) st = CheckPattern(plan.dst, ref.ptrs);
  return st.ok() ? "" : "ReferenceCopy: " + st.ToString();
}

}  // namespace testing
}  // namespace refit
