// Data-plane test patterns, hand-made plans, fill and check helpers.
#include "common/hash.h"
#include "testing/test_patterns.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "layout/dtype.h"
#include "layout/layout.h"
#include "plan/planner.h"
#include "plan/wave_bytes.h"

namespace refit::testing {
namespace {

int32_t AddTensor(SideLayout* s, const std::string& name,
                  std::vector<int64_t> shape, DType dt = DType::kBF16) {
  s->tensors.push_back(TensorSpec{name, std::move(shape), dt, false});
  return static_cast<int32_t>(s->tensors.size() - 1);
}

int32_t AddBuffer(SideLayout* s, int32_t rank, const std::string& name,
                  int64_t bytes) {
  s->buffers.push_back(BufferSpec{rank, name, bytes, {}});
  return static_cast<int32_t>(s->buffers.size() - 1);
}

void AddRecord(SideLayout* s, int32_t tensor, int32_t rank, int32_t buffer,
               const Box& box, int64_t byte_offset, DimMaps dims) {
  Record r;
  r.tensor = tensor;
  r.rank = rank;
  r.buffer = buffer;
  r.box = box;
  r.byte_offset = byte_offset;
  r.dims = std::move(dims);
  s->records.push_back(std::move(r));
}

int64_t Es(const SideLayout& s, int32_t t) {
  return DTypeSize(s.tensors[t].dtype);
}

int64_t Prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Tensor `t` split along `dim` into `n` equal parts, part i on rank i (or
// every rank holds all of it when n == 1 and replicas > 1), each part in
// its own row-major buffer.
void ShardEach(SideLayout* s, int dim, int n, int replicas = 1) {
  const int32_t nt = static_cast<int32_t>(s->tensors.size());
  for (int32_t t = 0; t < nt; ++t) {
    const std::vector<int64_t>& shape = s->tensors[t].shape;
    for (int i = 0; i < n * replicas; ++i) {
      const int part = i % n;
      std::vector<int64_t> o(shape.size(), 0), sz = shape;
      if (n > 1) {
        sz[dim] = shape[dim] / n;
        o[dim] = part * sz[dim];
      }
      const int32_t b =
          AddBuffer(s, i, s->tensors[t].name, Prod(sz) * Es(*s, t));
      AddRecord(s, t, i, b, Box::Unchecked(o, sz), 0, RowMajorDims(sz));
    }
  }
}

void Tensors(SideLayout* s) {
  AddTensor(s, "layers.0.attn.o_proj.weight", {24, 16});
  AddTensor(s, "layers.0.mlp.down_proj.weight", {12, 36});
  AddTensor(s, "layers.0.norm.weight", {48}, DType::kF32);
}

}  // namespace

std::vector<std::string> PatternNames() {
  return {"1to1", "2to2", "1to3", "3to1", "replicated", "qkv", "w13", "pp",
          "experts", "relay"};
}

Plan MakeHandPlan(const SideLayout& src, const SideLayout& dst,
                  int32_t num_lanes, int32_t rounds_per_stage) {
  Plan plan;
  plan.src = src;
  plan.dst = dst;
  plan.options.num_lanes = num_lanes;
  for (const TensorSpec& t : dst.tensors) {
    int32_t found = -1;
    for (size_t i = 0; i < src.tensors.size(); ++i) {
      if (src.tensors[i].name == t.name) found = static_cast<int32_t>(i);
    }
    plan.dst_to_src_tensor.push_back(found);
  }
  // (round, src, dst) -> segments.
  std::map<std::tuple<int, int, int>, std::vector<Segment>> groups;
  for (size_t di = 0; di < dst.records.size(); ++di) {
    const Record& d = dst.records[di];
    const int32_t st = plan.dst_to_src_tensor[d.tensor];
    for (size_t si = 0; si < src.records.size(); ++si) {
      const Record& s = src.records[si];
      if (s.tensor != st) continue;
      Box inter = Intersect(s.box, d.box);
      if (IsEmpty(inter)) continue;
      const int stage =
          src.stage_of_rank.empty() ? 0 : src.stage_of_rank[s.rank];
      const int round = stage * rounds_per_stage + d.tensor % rounds_per_stage;
      Segment seg;
      seg.src_record = static_cast<int32_t>(si);
      seg.dst_record = static_cast<int32_t>(di);
      seg.box = inter;
      seg.bytes = UncheckedNumElements(inter) * Es(dst, d.tensor);
      groups[{round, s.rank, d.rank}].push_back(seg);
    }
  }
  int last_round = -1;
  for (auto& [key, segs] : groups) {
    const auto [round, sr, dr] = key;
    if (round != last_round) {
      Wave r;
      r.stage = round / rounds_per_stage;
      r.lane = static_cast<int32_t>(plan.waves.size()) % num_lanes;
      r.first_message = static_cast<int32_t>(plan.messages.size());
      plan.waves.push_back(r);
      last_round = round;
    }
    Message m;
    m.src_rank = sr;
    m.dst_rank = dr;
    m.wave = static_cast<int32_t>(plan.waves.size() - 1);
    m.first_segment = static_cast<int32_t>(plan.segments.size());
    m.num_segments = static_cast<int32_t>(segs.size());
    // Contiguity on each side: every segment one range, each following the
    // previous one in the same buffer.
    for (int side = 0; side < 2; ++side) {
      const SideLayout& L = side == 0 ? src : dst;
      bool ok = true;
      int32_t buf = -1;
      int64_t begin = 0, end = 0;
      for (size_t i = 0; i < segs.size() && ok; ++i) {
        const Record& r =
            L.records[side == 0 ? segs[i].src_record : segs[i].dst_record];
        auto range = ContiguousByteRange(r, Es(L, r.tensor), segs[i].box);
        const int32_t rb = RecordBuffer(
            r, r.box.rank() > 0 ? segs[i].box.origin(0) - r.box.origin(0) : 0);
        if (!range || (i > 0 && (rb != buf || range->begin != end))) {
          ok = false;
          break;
        }
        if (i == 0) {
          buf = rb;
          begin = range->begin;
        }
        end = range->end();
      }
      if (side == 0) {
        m.src_contiguous = ok;
        m.src_buffer = ok ? buf : -1;
        m.src_offset = ok ? begin : 0;
      } else {
        m.dst_contiguous = ok;
        m.dst_buffer = ok ? buf : -1;
        m.dst_offset = ok ? begin : 0;
      }
    }
    for (const Segment& s : segs) {
      m.bytes += s.bytes;
      plan.segments.push_back(s);
    }
    plan.messages.push_back(m);
    ++plan.waves.back().num_messages;
  }
  SetWaveBytes(&plan);
  return plan;
}

absl::StatusOr<Plan> MakePatternPlan(const std::string& name,
                                     int32_t num_lanes,
                                     int32_t rounds_per_stage) {
  SideLayout src, dst;
  if (name == "1to1") {
    src.world_size = dst.world_size = 1;
    Tensors(&src);
    ShardEach(&src, 0, 1);
    // Destination: all tensors packed in one flat buffer, back to back.
    Tensors(&dst);
    int64_t off = 0;
    std::vector<int64_t> offs;
    for (size_t t = 0; t < dst.tensors.size(); ++t) {
      offs.push_back(off);
      off += Prod(dst.tensors[t].shape) * Es(dst, t) + 8;  // 8 bytes gap
    }
    const int32_t b = AddBuffer(&dst, 0, "flat", off);
    dst.buffers[b].padding.clear();
    for (size_t t = 0; t < dst.tensors.size(); ++t) {
      const auto& sh = dst.tensors[t].shape;
      AddRecord(&dst, t, 0, b,
                Box::Unchecked(std::vector<int64_t>(sh.size(), 0), sh),
                offs[t], RowMajorDims(sh));
    }
  } else if (name == "2to2") {
    src.world_size = dst.world_size = 2;
    Tensors(&src);
    ShardEach(&src, 0, 2);
    Tensors(&dst);
    // Columns (last dim) on the destination.
    for (size_t t = 0; t < dst.tensors.size(); ++t) {
      const auto& sh = dst.tensors[t].shape;
      const int d = static_cast<int>(sh.size()) - 1;
      for (int i = 0; i < 2; ++i) {
        std::vector<int64_t> o(sh.size(), 0), sz = sh;
        sz[d] /= 2;
        o[d] = i * sz[d];
        const int32_t b =
            AddBuffer(&dst, i, dst.tensors[t].name, Prod(sz) * Es(dst, t));
        AddRecord(&dst, t, i, b, Box::Unchecked(o, sz), 0, RowMajorDims(sz));
      }
    }
  } else if (name == "1to3") {
    src.world_size = 1;
    dst.world_size = 3;
    Tensors(&src);
    ShardEach(&src, 0, 1);
    Tensors(&dst);
    ShardEach(&dst, 0, 3);
  } else if (name == "3to1") {
    src.world_size = 3;
    dst.world_size = 1;
    Tensors(&src);
    ShardEach(&src, 0, 3);
    Tensors(&dst);
    ShardEach(&dst, 0, 1);
  } else if (name == "replicated" || name == "relay") {
    src.world_size = 2;
    dst.world_size = 3;
    Tensors(&src);
    ShardEach(&src, 0, 2);
    Tensors(&dst);
    ShardEach(&dst, 0, 1, /*replicas=*/3);
    if (name == "relay") {
      // Each replica on a host of its own, planned by BuildPlan with relays
      // under a small staging budget: the trainer sends each byte about
      // once, the replicas forward it to each other.
      src.host_of_rank = {0, 0};
      dst.host_of_rank = {1, 2, 3};
      PlannerOptions o;
      o.relay = true;
      o.num_lanes = num_lanes;
      o.choose_lanes = false;
      o.staging_budget_bytes = int64_t{1024} * num_lanes;
      return BuildPlan(std::move(src), std::move(dst), o);
    }
  } else if (name == "qkv") {
    // q [Hq*D, H], k/v [Hkv*D, H]. Trainer TP2: Megatron linear_qkv,
    // interleaved per query group; engine TP2: vLLM qkv_proj = [q; k; v].
    const int64_t hq = 8, hkv = 4, d = 4, h = 16, tp = 2;
    const int64_t qpg = hq / hkv, groups = hkv / tp, es = 2;
    src.world_size = dst.world_size = tp;
    for (SideLayout* s : {&src, &dst}) {
      AddTensor(s, "layers.0.attn.q_proj.weight", {hq * d, h});
      AddTensor(s, "layers.0.attn.k_proj.weight", {hkv * d, h});
      AddTensor(s, "layers.0.attn.v_proj.weight", {hkv * d, h});
    }
    const int64_t rows = groups * (qpg + 2) * d;
    for (int r = 0; r < tp; ++r) {
      const int32_t b = AddBuffer(&src, r, "linear_qkv", rows * h * es);
      const int64_t gstride = (qpg + 2) * d * h;
      auto dims = [&](int64_t per_group) {
        DimMaps m(2);
        m[0].splits = {{groups, gstride}, {per_group, h}};
        m[1].splits = {{h, 1}};
        return m;
      };
      AddRecord(&src, 0, r, b,
                Box::Unchecked({r * groups * qpg * d, 0}, {groups * qpg * d, h}),
                0, dims(qpg * d));
      AddRecord(&src, 1, r, b, Box::Unchecked({r * groups * d, 0}, {groups * d, h}),
                qpg * d * h * es, dims(d));
      AddRecord(&src, 2, r, b, Box::Unchecked({r * groups * d, 0}, {groups * d, h}),
                (qpg + 1) * d * h * es, dims(d));
      const int32_t c = AddBuffer(&dst, r, "qkv_proj", rows * h * es);
      const int64_t qrows = hq / tp * d, kvrows = hkv / tp * d;
      AddRecord(&dst, 0, r, c, Box::Unchecked({r * qrows, 0}, {qrows, h}), 0,
                RowMajorDims({qrows, h}));
      AddRecord(&dst, 1, r, c, Box::Unchecked({r * kvrows, 0}, {kvrows, h}),
                qrows * h * es, RowMajorDims({kvrows, h}));
      AddRecord(&dst, 2, r, c, Box::Unchecked({r * kvrows, 0}, {kvrows, h}),
                (qrows + kvrows) * h * es, RowMajorDims({kvrows, h}));
    }
  } else if (name == "w13") {
    // gate/up [I, H]. Trainer TP2 linear_fc1 = [gate shard; up shard];
    // engine TP1 gate_up_proj = [gate; up].
    const int64_t inter = 24, h = 8, es = 2;
    src.world_size = 2;
    dst.world_size = 1;
    for (SideLayout* s : {&src, &dst}) {
      AddTensor(s, "layers.0.mlp.gate_proj.weight", {inter, h});
      AddTensor(s, "layers.0.mlp.up_proj.weight", {inter, h});
    }
    for (int r = 0; r < 2; ++r) {
      const int64_t half = inter / 2;
      const int32_t b = AddBuffer(&src, r, "linear_fc1", 2 * half * h * es);
      AddRecord(&src, 0, r, b, Box::Unchecked({r * half, 0}, {half, h}), 0,
                RowMajorDims({half, h}));
      AddRecord(&src, 1, r, b, Box::Unchecked({r * half, 0}, {half, h}),
                half * h * es, RowMajorDims({half, h}));
    }
    const int32_t c = AddBuffer(&dst, 0, "gate_up_proj", 2 * inter * h * es);
    AddRecord(&dst, 0, 0, c, Box::Unchecked({0, 0}, {inter, h}), 0,
              RowMajorDims({inter, h}));
    AddRecord(&dst, 1, 0, c, Box::Unchecked({0, 0}, {inter, h}),
              inter * h * es, RowMajorDims({inter, h}));
  } else if (name == "experts") {
    // 4 experts, gate/up [6, 8] each. Trainer (one rank, 2 GPUs suffice):
    // one buffer per expert holding [gate; up] (Megatron TEGroupedMLP), as
    // one indexed record per weight (Record::buffer_step). Engine: w13
    // [4, gate 6 rows | up 6 rows, 8] (vLLM FusedMoE); each message packs
    // from four buffers and unpacks into strided rows.
    const int64_t e = 4, inter = 6, h = 8, es = 2;
    src.world_size = dst.world_size = 1;
    for (SideLayout* s : {&src, &dst}) {
      for (const char* w : {"gate_proj", "up_proj"}) {
        AddTensor(s, absl::StrCat("layers.0.mlp.experts.{}.", w, ".weight"),
                  {e, inter, h});
        s->tensors.back().stacked = true;
      }
    }
    int32_t first = -1;
    for (int j = 0; j < e; ++j) {
      const int32_t b = AddBuffer(&src, 0, absl::StrCat("linear_fc1.weight", j),
                                  2 * inter * h * es);
      if (j == 0) first = b;
    }
    const int32_t c = AddBuffer(&dst, 0, "w13_weight", e * 2 * inter * h * es);
    for (int w = 0; w < 2; ++w) {
      DimMaps dims = RowMajorDims({e, inter, h});
      dims[0].splits[0].stride = 0;  // each buffer holds one expert
      AddRecord(&src, w, 0, first, Box::Unchecked({0, 0, 0}, {e, inter, h}),
                w * inter * h * es, dims);
      src.records.back().buffer_step = 1;
      AddRecord(&dst, w, 0, c, Box::Unchecked({0, 0, 0}, {e, inter, h}),
                w * inter * h * es, SubArrayDims({e, inter, h}, {e, 2 * inter, h}));
    }
  } else if (name == "pp") {
    // Trainer PP2: layers 0-1 on stage 0 (rank 0), 2-3 on stage 1 (rank 1);
    // engine TP2 row shards.
    src.world_size = dst.world_size = 2;
    src.stage_of_rank = {0, 1};
    for (int l = 0; l < 4; ++l) {
      for (SideLayout* s : {&src, &dst}) {
        AddTensor(s, absl::StrCat("layers.", l, ".mlp.down_proj.weight"),
                  {16, 12});
        AddTensor(s, absl::StrCat("layers.", l, ".norm.weight"), {12},
                  DType::kF32);
      }
    }
    for (int32_t t = 0; t < static_cast<int32_t>(src.tensors.size()); ++t) {
      const int r = t < 4 ? 0 : 1;
      const auto& sh = src.tensors[t].shape;
      const int32_t b =
          AddBuffer(&src, r, src.tensors[t].name, Prod(sh) * Es(src, t));
      AddRecord(&src, t, r, b,
                Box::Unchecked(std::vector<int64_t>(sh.size(), 0), sh), 0,
                RowMajorDims(sh));
    }
    ShardEach(&dst, 0, 2);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data-plane test pattern '", name, "'"));
  }
  for (const Record& r : src.records) {
    REFIT_RETURN_IF_ERROR(ValidateRecord(src, r));
  }
  for (const Record& r : dst.records) {
    REFIT_RETURN_IF_ERROR(ValidateRecord(dst, r));
  }
  return MakeHandPlan(src, dst, num_lanes, rounds_per_stage);
}

std::vector<std::vector<char>> AllocateRankBuffers(const SideLayout& side,
                                                   int32_t rank, char fill) {
  std::vector<std::vector<char>> out(side.buffers.size());
  for (size_t b = 0; b < side.buffers.size(); ++b) {
    if (side.buffers[b].rank == rank) {
      out[b].assign(side.buffers[b].byte_size, fill);
    }
  }
  return out;
}

std::vector<char*> Pointers(std::vector<std::vector<char>>& bufs) {
  std::vector<char*> p;
  for (auto& b : bufs) p.push_back(b.empty() ? nullptr : b.data());
  return p;
}

namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Calls fn(buffer, byte offset in buffer, value byte) for every byte of
// record r (an indexed record's dim-0 index picks the buffer).
template <typename Fn>
void ForEachRecordByte(const SideLayout& side, const Record& r, uint64_t step,
                       Fn fn) {
  const TensorSpec& t = side.tensors[r.tensor];
  const int64_t es = DTypeSize(t.dtype);
  const uint64_t th = Fnv1a64(t.name) ^ (step * 0x9E3779B97F4A7C15ull);
  const int n = r.box.rank();
  std::vector<int64_t> idx(n, 0);
  const int64_t count = UncheckedNumElements(r.box);
  for (int64_t e = 0; e < count; ++e) {
    int64_t lin = 0, off = 0;
    for (int d = 0; d < n; ++d) {
      lin = lin * t.shape[d] + r.box.origin(d) + idx[d];
      off += DimOffset(r.dims[d], idx[d]);
    }
    const uint64_t v = Mix(th + static_cast<uint64_t>(lin));
    const int32_t buffer = RecordBuffer(r, n > 0 ? idx[0] : 0);
    for (int64_t j = 0; j < es; ++j) {
      fn(buffer, r.byte_offset + off * es + j, static_cast<char>(v >> (8 * j)));
    }
    for (int d = n - 1; d >= 0; --d) {
      if (++idx[d] < r.box.shape(d)) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void FillRecords(const SideLayout& side, int32_t rank, uint64_t step,
                 std::vector<std::vector<char>>* bufs) {
  for (const Record& r : side.records) {
    if (r.rank != rank) continue;
    ForEachRecordByte(side, r, step, [&](int32_t buffer, int64_t o, char v) {
      (*bufs)[buffer][o] = v;
    });
  }
}

std::string CheckRecords(const SideLayout& side, int32_t rank, uint64_t step,
                         char fill,
                         const std::vector<std::vector<char>>& bufs) {
  std::vector<std::vector<bool>> claimed(bufs.size());
  for (size_t b = 0; b < bufs.size(); ++b) claimed[b].assign(bufs[b].size(), false);
  std::string err;
  for (const Record& r : side.records) {
    if (r.rank != rank) continue;
    ForEachRecordByte(side, r, step, [&](int32_t buffer, int64_t o, char v) {
      const std::vector<char>& b = bufs[buffer];
      claimed[buffer][o] = true;
      if (err.empty() && b[o] != v) {
        err = absl::StrCat("tensor ", side.tensors[r.tensor].name, " buffer ",
                           side.buffers[buffer].name, " byte ", o,
                           ": expected ", static_cast<int>(v), " got ",
                           static_cast<int>(b[o]));
      }
    });
  }
  if (!err.empty()) return err;
  for (size_t b = 0; b < bufs.size(); ++b) {
    for (size_t o = 0; o < bufs[b].size(); ++o) {
      if (!claimed[b][o] && bufs[b][o] != fill) {
        return absl::StrCat("buffer ", side.buffers[b].name, " byte ", o,
                            " outside every record was overwritten");
      }
    }
  }
  return "";
}

}  // namespace refit::testing
