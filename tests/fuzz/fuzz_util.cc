// Fuzz helpers (see fuzz_util.h).
#include "tests/fuzz/fuzz_util.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exec/program/copy_program.h"
#include "google/protobuf/descriptor.h"
#include "plan/plan_codec.h"
#include "plan/plan_stats.h"

namespace refit {
namespace fuzz {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Reflection;
using PbMessage = google::protobuf::Message;

// A scalar field somewhere in a message tree: (message, field, index or -1).
struct Leaf {
  PbMessage* msg;
  const FieldDescriptor* field;
  int index;
};
struct Repeated {
  PbMessage* msg;
  const FieldDescriptor* field;
};

void Collect(PbMessage* m, std::vector<Leaf>* leaves, std::vector<Repeated>* reps) {
  const Reflection* r = m->GetReflection();
  const auto* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      reps->push_back({m, f});
      const int n = r->FieldSize(*m, f);
      for (int k = 0; k < n; ++k) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          Collect(r->MutableRepeatedMessage(m, f, k), leaves, reps);
        } else {
          leaves->push_back({m, f, k});
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (r->HasField(*m, f)) Collect(r->MutableMessage(m, f), leaves, reps);
    } else {
      leaves->push_back({m, f, -1});
    }
  }
}

int64_t Edge(std::mt19937_64& rng, int64_t v) {
  const int64_t edges[] = {0, 1, -1, 2, v + 1, v - 1, v * 2, v / 2, 7, 4096,
                           std::numeric_limits<int32_t>::max(),
                           std::numeric_limits<int32_t>::min(),
                           std::numeric_limits<int64_t>::max(),
                           std::numeric_limits<int64_t>::min(),
                           int64_t{1} << 40};
  const size_t n = sizeof(edges) / sizeof(edges[0]);
  const uint64_t pick = rng() % (n + 1);
  if (pick < n) return edges[pick];
  return static_cast<int64_t>(rng() % 256) - 16;
}

void SetLeaf(std::mt19937_64& rng, const Leaf& l) {
  const Reflection* r = l.msg->GetReflection();
  const FieldDescriptor* f = l.field;
  const bool rep = l.index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v = rep ? r->GetRepeatedInt32(*l.msg, f, l.index) : r->GetInt32(*l.msg, f);
      v = static_cast<int32_t>(Edge(rng, v));
      rep ? r->SetRepeatedInt32(l.msg, f, l.index, v) : r->SetInt32(l.msg, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = rep ? r->GetRepeatedInt64(*l.msg, f, l.index) : r->GetInt64(*l.msg, f);
      v = Edge(rng, v);
      rep ? r->SetRepeatedInt64(l.msg, f, l.index, v) : r->SetInt64(l.msg, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v = rep ? r->GetRepeatedUInt64(*l.msg, f, l.index) : r->GetUInt64(*l.msg, f);
      v = static_cast<uint64_t>(Edge(rng, static_cast<int64_t>(v)));
      rep ? r->SetRepeatedUInt64(l.msg, f, l.index, v) : r->SetUInt64(l.msg, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!rep) r->SetBool(l.msg, f, !r->GetBool(*l.msg, f));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      if (!rep) r->SetString(l.msg, f, (rng() & 1) ? "" : "x");
      break;
    default:
      break;
  }
}

}  // namespace

void MutateInPlace(std::mt19937_64& rng, PbMessage* m) {
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    std::vector<Leaf> leaves;
    std::vector<Repeated> reps;
    Collect(m, &leaves, &reps);
    if (rng() % 5 == 0 && !reps.empty()) {
      const Repeated& rp = reps[rng() % reps.size()];
      const Reflection* r = rp.msg->GetReflection();
      const int n = r->FieldSize(*rp.msg, rp.field);
      if (n == 0) continue;
      if (rng() % 2) {
        r->RemoveLast(rp.msg, rp.field);
      } else if (rp.field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        r->AddMessage(rp.msg, rp.field)
            ->CopyFrom(r->GetRepeatedMessage(*rp.msg, rp.field, static_cast<int>(rng() % n)));
      }
    } else if (!leaves.empty()) {
      SetLeaf(rng, leaves[rng() % leaves.size()]);
    }
  }
}

std::string MutateBytes(std::mt19937_64& rng, std::string bytes) {
  if (bytes.empty()) return bytes;
  if (rng() % 2) {
    bytes.resize(rng() % bytes.size());
  } else {
    for (int k = 0; k < 4; ++k) bytes[rng() % bytes.size()] ^= 1 << (rng() % 8);
  }
  return bytes;
}

namespace {

// lo <= off, off + (rows-1)*stride + row_bytes <= size, in 128-bit arithmetic.
bool RowsInside(int64_t off, int64_t rows, int64_t stride, int64_t row_bytes,
                int64_t size) {
  if (rows == 0 || row_bytes == 0) return true;
  if (off < 0 || rows < 0 || row_bytes < 0) return false;
  const __int128 first = off;
  const __int128 last = first + static_cast<__int128>(rows - 1) * stride;
  return std::min(first, last) >= 0 && std::max(first, last) + row_bytes <= size;
}

// Every task of `tasks` inside its buffers (`side`) and the stream (bytes).
std::string CheckTasks(const std::vector<CopyTask>& tasks, const SideLayout& side,
                       int64_t stream_bytes) {
  for (const CopyTask& t : tasks) {
    for (int which = 0; which < 2; ++which) {
      const int32_t b = which == 0 ? t.src_buffer : t.dst_buffer;
      const int64_t off = which == 0 ? t.src_offset : t.dst_offset;
      const int64_t stride = which == 0 ? t.src_row_stride : t.dst_row_stride;
      int64_t size = stream_bytes;
      if (b != kStream) {
        if (b < 0 || b >= static_cast<int32_t>(side.buffers.size())) {
          return absl::StrCat("task names buffer ", b, " of ", side.buffers.size());
        }
        size = side.buffers[b].byte_size;
      }
      if (!RowsInside(off, t.rows, stride, t.row_bytes, size)) {
        return absl::StrCat("task outside ", b == kStream ? "the stream" : "buffer ",
                            b == kStream ? "" : absl::StrCat(b), ": offset ", off,
                            " rows ", t.rows, " x ", t.row_bytes, " stride ", stride,
                            " size ", size);
      }
    }
  }
  return "";
}

}  // namespace

std::string CheckPlanInBounds(const Plan& p) {
  for (const Message& m : p.messages) {
    if (m.src_contiguous &&
        (m.src_buffer < 0 || m.src_buffer >= static_cast<int32_t>(p.src.buffers.size()) ||
         !RowsInside(m.src_offset, 1, 0, m.bytes, p.src.buffers[m.src_buffer].byte_size))) {
      return "zero-copy source range outside its buffer";
    }
    if (m.dst_contiguous &&
        (m.dst_buffer < 0 || m.dst_buffer >= static_cast<int32_t>(p.dst.buffers.size()) ||
         !RowsInside(m.dst_offset, 1, 0, m.bytes, p.dst.buffers[m.dst_buffer].byte_size))) {
      return "zero-copy destination range outside its buffer";
    }
    absl::StatusOr<std::vector<CopyTask>> pack = PackProgram(p, m);
    if (pack.ok()) {
      std::string e = CheckTasks(*pack, p.src, m.bytes);
      if (!e.empty()) return "pack: " + e;
    }
    absl::StatusOr<std::vector<CopyTask>> unpack = UnpackProgram(p, m);
    if (unpack.ok()) {
      std::string e = CheckTasks(*unpack, p.dst, m.bytes);
      if (!e.empty()) return "unpack: " + e;
    }
  }
  // What a member does next with its slice must not crash either.
  (void)ToProto(p);
  (void)ComputePlanStats(p);
  return "";
}

}  // namespace fuzz
}  // namespace refit
