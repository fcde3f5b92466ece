// Per-rank plan slices: ExtractSlice and SerializedSlices (declared in
// plan_codec.h).
#include <algorithm>
#include <atomic>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plan/plan_codec.h"
#include "plan/plan_stats.h"
#include "plan/relay_roots.h"

namespace refit {

namespace {

// The plan's RelayRoots for trainer slices (a trainer rank also takes the
// relays of its bytes, for the digests of verified rounds); none for engines.
std::vector<std::vector<int32_t>> RootsFor(const Plan& plan, Side side) {
  return side == Side::kTrainer ? RelayRoots(plan) : std::vector<std::vector<int32_t>>();
}

// ExtractSlice with RootsFor(plan, side).
Plan SliceOf(const Plan& plan, Side side, int rank,
             const std::vector<std::vector<int32_t>>& roots) {
  Plan s;
  s.options = plan.options;
  s.fingerprint = plan.fingerprint;
  s.dst_to_src_tensor = plan.dst_to_src_tensor;
  auto shell = [](const SideLayout& from, SideLayout* to) {
    to->world_size = from.world_size;
    to->tensors = from.tensors;
    to->host_of_rank = from.host_of_rank;
    to->stage_of_rank = from.stage_of_rank;
    to->gpu_of_rank = from.gpu_of_rank;
  };
  shell(plan.src, &s.src);
  shell(plan.dst, &s.dst);
  std::vector<int32_t> src_rec(plan.src.records.size(), -1),
      dst_rec(plan.dst.records.size(), -1);
  std::vector<int32_t> src_buf(plan.src.buffers.size(), -1),
      dst_buf(plan.dst.buffers.size(), -1);
  // Maps record c's buffers (of `from`) into `to`, c.buffer(_step) set.
  auto map_buffers = [](const SideLayout& from, SideLayout* to,
                        std::vector<int32_t>& buf_map, Record& c) {
    const Record r = c;
    if (r.buffer_step > 0 && r.box.rank() > 0 && r.box.shape(0) > 1) {
      // Indexed: the slice keeps the record's buffers consecutive (step 1),
      // reusing an earlier mapping when it already is (gate and up records
      // share their per-expert buffers).
      const int64_t n = r.box.shape(0);
      const int32_t first = buf_map[r.buffer];
      bool reuse = first >= 0;
      for (int64_t i = 1; reuse && i < n; ++i) {
        reuse = buf_map[RecordBuffer(r, i)] == first + i;
      }
      if (reuse) {
        c.buffer = first;
      } else {
        c.buffer = static_cast<int32_t>(to->buffers.size());
        for (int64_t i = 0; i < n; ++i) {
          const int32_t b = RecordBuffer(r, i);
          if (buf_map[b] < 0) buf_map[b] = c.buffer + static_cast<int32_t>(i);
          to->buffers.push_back(from.buffers[b]);
        }
      }
      c.buffer_step = 1;
    } else {
      if (buf_map[r.buffer] < 0) {
        buf_map[r.buffer] = static_cast<int32_t>(to->buffers.size());
        to->buffers.push_back(from.buffers[r.buffer]);
      }
      c.buffer = buf_map[r.buffer];
    }
  };
  auto keep_record = [&](const SideLayout& from, SideLayout* to,
                         std::vector<int32_t>& rec_map,
                         std::vector<int32_t>& buf_map, int32_t ri) {
    if (rec_map[ri] >= 0) return rec_map[ri];
    Record c = from.records[ri];
    map_buffers(from, to, buf_map, c);
    rec_map[ri] = static_cast<int32_t>(to->records.size());
    to->records.push_back(std::move(c));
    return rec_map[ri];
  };
  auto keep_buffer = [](const SideLayout& from, SideLayout* to,
                        std::vector<int32_t>& buf_map, int32_t b) {
    if (b < 0) return b;
    if (buf_map[b] < 0) {
      buf_map[b] = static_cast<int32_t>(to->buffers.size());
      to->buffers.push_back(from.buffers[b]);
    }
    return buf_map[b];
  };
  for (const Wave& r : plan.waves) {
    Wave nr = r;
    nr.first_message = static_cast<int32_t>(s.messages.size());
    nr.num_messages = 0;
    for (int32_t i = r.first_message; i < r.first_message + r.num_messages; ++i) {
      const Message& m = plan.messages[i];
      // An engine rank also takes the relays it sends, a trainer rank
      // those forwarding its bytes.
      const bool mine =
          side == Side::kTrainer
              ? (!m.relay && m.src_rank == rank) ||
                    (m.relay && static_cast<size_t>(i) < roots.size() &&
                     std::binary_search(roots[i].begin(), roots[i].end(), rank))
              : m.dst_rank == rank || (m.relay && m.src_rank == rank);
      if (!mine) continue;
      Message nm = m;
      nm.wave = static_cast<int32_t>(s.waves.size());
      nm.first_segment = static_cast<int32_t>(s.segments.size());
      // A relay's source records and buffers are on the engine side.
      const SideLayout& from = m.relay ? plan.dst : plan.src;
      SideLayout* to = m.relay ? &s.dst : &s.src;
      std::vector<int32_t>& from_rec = m.relay ? dst_rec : src_rec;
      std::vector<int32_t>& from_buf = m.relay ? dst_buf : src_buf;
      for (int32_t j = m.first_segment; j < m.first_segment + m.num_segments; ++j) {
        Segment g = plan.segments[j];
        g.src_record = keep_record(from, to, from_rec, from_buf, g.src_record);
        g.dst_record = keep_record(plan.dst, &s.dst, dst_rec, dst_buf, g.dst_record);
        s.segments.push_back(std::move(g));
      }
      if (m.src_contiguous) {
        if (from_buf[m.src_buffer] < 0) {
          from_buf[m.src_buffer] = static_cast<int32_t>(to->buffers.size());
          to->buffers.push_back(from.buffers[m.src_buffer]);
        }
        nm.src_buffer = from_buf[m.src_buffer];
      }
      if (m.dst_contiguous) {
        if (dst_buf[m.dst_buffer] < 0) {
          dst_buf[m.dst_buffer] = static_cast<int32_t>(s.dst.buffers.size());
          s.dst.buffers.push_back(plan.dst.buffers[m.dst_buffer]);
        }
        nm.dst_buffer = dst_buf[m.dst_buffer];
      }
      s.messages.push_back(nm);
      ++nr.num_messages;
    }
    if (nr.num_messages > 0) s.waves.push_back(nr);
  }
  if (side == Side::kTrainer) {
    // The rank's conversions, and the cut tiles it exchanges amaxes for.
    // After the segments: a scratch buffer keeps the index their records
    // gave it (indexed records need their buffers consecutive).
    for (const Conversion& c : plan.conversions) {
      if (c.from.rank != rank) continue;
      Conversion n = c;
      map_buffers(plan.src, &s.src, src_buf, n.from);
      n.to_buffer = keep_buffer(plan.src, &s.src, src_buf, c.to_buffer);
      n.scale_buffer = keep_buffer(plan.src, &s.src, src_buf, c.scale_buffer);
      n.global_buffer = keep_buffer(plan.src, &s.src, src_buf, c.global_buffer);
      s.conversions.push_back(std::move(n));
    }
    for (const CutTileGroup& g : plan.cut_tiles) {
      if (std::binary_search(g.ranks.begin(), g.ranks.end(), rank)) {
        s.cut_tiles.push_back(g);
      }
    }
  }
  // The peers' buffers: rank and size only (see the header).
  for (BufferSpec& b : (side == Side::kTrainer ? s.dst : s.src).buffers) {
    b.name.clear();
    b.padding.clear();
  }
  s.stats = ComputePlanStats(s);
  return s;
}

}  // namespace

Plan ExtractSlice(const Plan& plan, Side side, int rank) {
  return SliceOf(plan, side, rank, RootsFor(plan, side));
}

std::vector<std::string> SerializedSlices(const Plan& plan, Side side,
                                          const std::vector<int32_t>& ranks,
                                          int threads) {
  std::vector<std::string> out(ranks.size());
  const std::vector<std::vector<int32_t>> roots = RootsFor(plan, side);
  std::atomic<size_t> next{0};
  std::atomic<bool> out_of_memory{false};
  auto work = [&] {
    // An allocation that fails on a pool thread is rethrown on the caller's
    // (an exception leaving a std::thread would end the process).
    try {
      for (size_t i = next++; i < ranks.size() && !out_of_memory.load(); i = next++) {
        out[i] = ToProto(SliceOf(plan, side, ranks[i], roots)).SerializeAsString();
      }
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true);
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(ranks.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (out_of_memory.load()) throw std::bad_alloc();
  return out;
}

}  // namespace refit
