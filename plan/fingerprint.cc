// PlanFingerprint and LayoutFingerprint: a 128-bit digest of a canonical
// serialization, hashed as it is written.
#include "plan/fingerprint.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace refit {
namespace {

// Canonical serialization for the fingerprint, hashed as it is written (a
// plan of a million segments is never held as one string): words go round
// robin to four independent 64-bit multiply-rotate lanes (no dependency
// chain between consecutive words), combined and finalized with a
// murmur3-style avalanche into 128 bits; not cryptographic. Digest()
// drains the words still buffered first.
class Writer {
 public:
  void I(int64_t v) { Mix(static_cast<uint64_t>(v)); }
  void S(const std::string& v) {
    I(static_cast<int64_t>(v.size()));
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, v.data() + i, 8);
      Mix(w);
    }
    if (i < v.size()) {
      uint64_t w = 0;
      std::memcpy(&w, v.data() + i, v.size() - i);
      Mix(w);
    }
  }
  void B(const Box& b) {
    I(b.rank());
    for (int d = 0; d < b.rank(); ++d) {
      I(b.origin(d));
      I(b.shape(d));
    }
  }
  std::string Digest() {
    Drain();
    const uint64_t a = Final(h_[0] ^ Rotl(h_[1], 17) ^ n_);
    const uint64_t b = Final(h_[2] ^ Rotl(h_[3], 29) ^ (n_ * 0x9E3779B97F4A7C15ULL));
    char buf[33];
    snprintf(buf, sizeof(buf), "%016llx%016llx",
             static_cast<unsigned long long>(Final(a ^ Rotl(b, 32))),
             static_cast<unsigned long long>(Final(b + a)));
    return buf;
  }

 private:
  static uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t Final(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return h;
  }
  static uint64_t Step(uint64_t h, uint64_t v) {
    return Rotl(h ^ (v * 0x87C37B91114253D5ULL), 31) * 0x4CF5AD432745937FULL + 0x52DCE729;
  }
  // Word n goes to lane n % 4. Words wait in buf_ and are mixed kBuf at a
  // time, the four lanes in registers.
  void Mix(uint64_t v) {
    buf_[pending_++] = v;
    if (pending_ == kBuf) Drain();
  }
  void Drain() {
    size_t i = 0;
    if ((n_ & 3) == 0) {
      uint64_t h0 = h_[0], h1 = h_[1], h2 = h_[2], h3 = h_[3];
      for (; i + 4 <= pending_; i += 4) {
        h0 = Step(h0, buf_[i]);
        h1 = Step(h1, buf_[i + 1]);
        h2 = Step(h2, buf_[i + 2]);
        h3 = Step(h3, buf_[i + 3]);
      }
      h_[0] = h0, h_[1] = h1, h_[2] = h2, h_[3] = h3;
      n_ += i;
    }
    for (; i < pending_; ++i, ++n_) h_[n_ & 3] = Step(h_[n_ & 3], buf_[i]);
    pending_ = 0;
  }
  static constexpr size_t kBuf = 256;  // a multiple of 4
  uint64_t h_[4] = {1469598103934665603ULL, 0x9E3779B97F4A7C15ULL,
                    0xC2B2AE3D27D4EB4FULL, 0x165667B19E3779F9ULL};
  uint64_t n_ = 0;  // words mixed
  uint64_t buf_[kBuf];
  size_t pending_ = 0;  // words in buf_
};

// Precedes a side's gpu_of_rank in the serialization ("gpus" in ASCII).
constexpr int64_t kGpuTag = 0x67707573;

void WriteRecord(Writer& w, const Record& r) {
  w.I(r.tensor);
  w.I(r.rank);
  w.I(r.buffer);
  w.B(r.box);
  w.I(r.byte_offset);
  w.I(r.dims.size());
  for (const DimMap& m : r.dims) {
    w.I(m.splits.size());
    for (const DimSplit& sp : m.splits) {
      w.I(sp.size);
      w.I(sp.stride);
    }
  }
  w.I(r.buffer_step);
}

void WriteSide(Writer& w, const SideLayout& s) {
  w.I(s.world_size);
  w.I(s.tensors.size());
  for (const TensorSpec& t : s.tensors) {
    w.S(t.name);
    w.I(t.shape.size());
    for (int64_t x : t.shape) w.I(x);
    w.I(static_cast<int64_t>(t.dtype));
    w.I(t.stacked);
    w.I(static_cast<int64_t>(t.transform));
    w.I(t.format ? static_cast<int64_t>(*t.format) : 0);
    w.I(static_cast<int64_t>(t.quant_role));
  }
  w.I(s.buffers.size());
  for (const BufferSpec& b : s.buffers) {
    w.I(b.rank);
    w.S(b.name);
    w.I(b.byte_size);
    w.I(b.padding.size());
    for (const ByteRange& p : b.padding) {
      w.I(p.begin);
      w.I(p.size);
    }
  }
  w.I(s.records.size());
  for (const Record& r : s.records) WriteRecord(w, r);
  w.I(s.host_of_rank.size());
  for (int32_t h : s.host_of_rank) w.I(h);
  w.I(s.stage_of_rank.size());
  for (int32_t h : s.stage_of_rank) w.I(h);
  // GPUs only when known, after a tag (the fingerprints of layouts without
  // them stay what they were).
  if (!s.gpu_of_rank.empty()) {
    w.I(kGpuTag);
    w.I(s.gpu_of_rank.size());
    for (int32_t g : s.gpu_of_rank) w.I(g);
  }
}

// Conversions and cut tiles, only when there are any (the fingerprints of
// plans without conversions stay what they were).
void WriteConversions(Writer& w, const Plan& p) {
  if (p.conversions.empty() && p.cut_tiles.empty()) return;
  w.I(p.options.fp8_block);
  w.I(p.conversions.size());
  for (const Conversion& c : p.conversions) {
    w.I(static_cast<int64_t>(c.kind));
    if (IsBlockQuantized(c.kind)) {
      w.I(static_cast<int64_t>(c.format));
      w.I(static_cast<int64_t>(c.swizzle));
    }
    w.I(static_cast<int64_t>(c.from_dtype));
    WriteRecord(w, c.from);
    w.I(c.to_buffer);
    w.I(c.scale_buffer);
    w.I(c.tile.size());
    for (int64_t t : c.tile) w.I(t);
    if (QuantizesTo(c, QuantFormat::kNvfp4)) {
      w.I(c.global_tensor);
      w.I(c.global_buffer);
      w.I(static_cast<int64_t>(c.recipe));
    }
    if (IsBlockQuantized(c.kind)) {
      w.I(c.one_pass ? 1 : 0);
      w.I(c.one_pass_cell_rows);
      w.I(c.one_pass_cell_cols);
    }
  }
  w.I(p.cut_tiles.size());
  for (const CutTileGroup& g : p.cut_tiles) {
    w.I(g.tensor);
    w.B(g.tiles);
    w.I(g.ranks.size());
    for (int32_t r : g.ranks) w.I(r);
  }
}

}  // namespace

std::string LayoutFingerprint(const SideLayout& layout) {
  Writer w;
  WriteSide(w, layout);
  return w.Digest();
}

std::string PlanFingerprint(const Plan& p) {
  Writer w;
  WriteSide(w, p.src);
  WriteSide(w, p.dst);
  for (int32_t x : p.dst_to_src_tensor) w.I(x);
  w.I(p.segments.size());
  for (const Segment& s : p.segments) {
    w.I(s.src_record);
    w.I(s.dst_record);
    w.B(s.box);
    w.I(s.bytes);
  }
  w.I(p.messages.size());
  for (const Message& m : p.messages) {
    for (int64_t v : {int64_t{m.src_rank}, int64_t{m.dst_rank}, int64_t{m.wave},
                      int64_t{m.first_segment}, int64_t{m.num_segments}, m.bytes,
                      int64_t{m.src_contiguous}, int64_t{m.src_buffer},
                      m.src_offset, int64_t{m.dst_contiguous},
                      int64_t{m.dst_buffer}, m.dst_offset}) {
      w.I(v);
    }
  }
  // Relays: the relay messages' indices, and the option (written only when
  // set, so that a plan without relays keeps its fingerprint).
  if (p.options.relay) {
    w.I(-1);
    for (size_t i = 0; i < p.messages.size(); ++i) {
      if (p.messages[i].relay) w.I(static_cast<int64_t>(i));
    }
    w.I(-1);
  }
  w.I(p.waves.size());
  for (const Wave& r : p.waves) {
    w.I(r.lane);
    w.I(r.stage);
    w.I(r.first_message);
    w.I(r.num_messages);
  }
  w.I(p.options.staging_budget_bytes);
  w.I(p.options.num_lanes);
  w.I(p.options.prefer_same_host);
  w.I(p.options.max_message_bytes);
  w.I(p.options.direct_min_bytes);
  w.I(p.options.max_wave_bytes);
  WriteConversions(w, p);
  return w.Digest();
}

}  // namespace refit
