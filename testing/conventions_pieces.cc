// Checkpoint pieces and their slicing: the vocabulary the conventions
// statements of conventions_reference.h are written in.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/conventions_reference.h"

namespace refit::testing {

using testing_mapping::Arr;
using testing_mapping::Bufs;
using testing_mapping::Cat;
using testing_mapping::Member;
using testing_mapping::PadRows;
using testing_mapping::Slice;
using testing_mapping::Stack;

Piece Checkpoint::P(const std::string& name, std::vector<int64_t> shape) {
  auto it = ck_.find(name);
  if (it == ck_.end()) {
    ADD_FAILURE() << "checkpoint has no tensor " << name;
    return {testing_mapping::Zeros(shape, DType::kBF16)};
  }
  used_.insert(name);
  EXPECT_EQ(it->second.shape, shape) << name;
  Piece p{it->second};
  std::string sname = name;
  size_t pos = sname.rfind("weight");
  if (pos != std::string::npos) {
    sname.insert(pos + 6, "_scale_inv");
    auto s = ck_.find(sname);
    if (s != ck_.end()) {
      used_.insert(sname);
      p.fp8 = true;
      p.s = s->second;
    }
    std::string pname = name;
    pname.insert(pos + 6, "_scale");
    auto ps = ck_.find(pname);
    if (ps != ck_.end()) {
      used_.insert(pname);
      p.pt = true;
      p.s = ps->second;
      p.s.shape.push_back(1);  // [] -> [1], [E] -> [E, 1]
    }
  }
  return p;
}

std::vector<std::string> Checkpoint::Unused() const {
  std::vector<std::string> out;
  for (const auto& kv : ck_) {
    if (!used_.count(kv.first)) out.push_back(kv.first);
  }
  return out;
}

// Slices dim `d` counted from the end (1 = last, 2 = second to last).
Piece SliceEnd(const Piece& p, int from_end, int64_t b, int64_t n) {
  Piece out;
  const int d = static_cast<int>(p.w.shape.size()) - from_end;
  out.w = Slice(p.w, d, b, n);
  out.fp8 = p.fp8;
  out.pt = p.pt;
  if (p.pt) out.s = p.s;
  if (p.fp8) {
    out.s = Slice(p.s, d, b / kBlock, CeilDiv(b + n, kBlock) - b / kBlock);
  }
  return out;
}
// Rows of a matrix (or of a stacked matrix's members), or of a vector.
Piece Rows(const Piece& p, int64_t b, int64_t n) {
  return SliceEnd(p, p.w.shape.size() >= 2 ? 2 : 1, b, n);
}
Piece Cols(const Piece& p, int64_t b, int64_t n) { return SliceEnd(p, 1, b, n); }
// vLLM's A: the f32 parameter its loader fills with -exp(A_log.float()).
Piece NegExpF32(const Piece& p) {
  Piece out;
  out.w.shape = p.w.shape;
  out.w.dtype = DType::kF32;
  const int64_t n = static_cast<int64_t>(p.w.bytes.size()) / 2;
  out.w.bytes.resize(n * 4);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(p.w.bytes[2 * i]) |
                    static_cast<uint32_t>(p.w.bytes[2 * i + 1]) << 8;
    bits <<= 16;
    float x;
    std::memcpy(&x, &bits, 4);
    const float v = static_cast<float>(-std::exp(static_cast<double>(x)));
    std::memcpy(out.w.bytes.data() + 4 * i, &v, 4);
  }
  return out;
}

Piece RowsOf(const Piece& p, int64_t parts, int64_t i) {
  const int64_t n = p.w.shape[p.w.shape.size() >= 2 ? p.w.shape.size() - 2 : 0] / parts;
  return Rows(p, i * n, n);
}
Piece ColsOf(const Piece& p, int64_t parts, int64_t i) {
  const int64_t n = p.w.shape.back() / parts;
  return Cols(p, i * n, n);
}
// Concatenation of rows (scales concatenated too, as vLLM's merged params).
Piece CatRows(const std::vector<Piece>& ps) {
  Piece out;
  std::vector<Arr> w, s;
  for (const Piece& p : ps) {
    w.push_back(p.w);
    if (p.fp8 || p.pt) s.push_back(p.s);
  }
  const int d = static_cast<int>(ps[0].w.shape.size()) >= 2
                    ? static_cast<int>(ps[0].w.shape.size()) - 2
                    : 0;
  out.w = Cat(d, w);
  out.fp8 = ps[0].fp8;
  out.pt = ps[0].pt;
  if (out.fp8) out.s = Cat(d, s);
  if (out.pt) out.s = Cat(static_cast<int>(s[0].shape.size()) - 1, s);
  return out;
}
Piece StackP(const std::vector<Piece>& ps) {
  Piece out;
  std::vector<Arr> w, s;
  for (const Piece& p : ps) {
    w.push_back(p.w);
    if (p.fp8 || p.pt) s.push_back(p.s);
  }
  out.w = Stack(w);
  out.fp8 = ps[0].fp8;
  out.pt = ps[0].pt;
  if (out.fp8 || out.pt) out.s = Stack(s);
  return out;
}
Piece MemberP(const Piece& p, int64_t e) {
  Piece out{Member(p.w, e), p.fp8};
  out.pt = p.pt;
  if (p.fp8 || p.pt) out.s = Member(p.s, e);
  return out;
}
Piece Vocab(const Piece& p, int64_t vocab, int64_t padded, int64_t tp,
            int64_t r) {
  Piece q{PadRows(p.w, padded - vocab)};
  return Rows(q, r * padded / tp, padded / tp);
}

void Put(Bufs& b, const std::string& name, const Piece& p) {
  EXPECT_EQ(b.count(name), 0u) << "expectation puts " << name << " twice";
  b[name] = p.w;
  if (p.fp8) {
    std::string s = name;
    s.insert(s.rfind("weight") + 6, "_scale_inv");
    b[s] = p.s;
  }
  if (p.pt) {
    std::string s = name;
    s.insert(s.rfind("weight") + 6, "_scale");
    Arr a = p.s;
    // Grouped experts with one scale each: [E_local] rather than [E_local, 1].
    if (a.shape.size() == 2 && a.shape[1] == 1) a.shape.pop_back();
    b[s] = a;
  }
}

}  // namespace refit::testing
