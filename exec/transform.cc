// Destination-side transforms: host version (see transform.h).
#include "exec/transform.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace refit {
namespace {

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint16_t FloatToBf16(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7F800000u | (man << 13));
  return BitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;           // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;          // rounds to inf
  if (a < 0x38800000u) {                                // subnormal or zero
    const float v = std::fabs(f) * 16777216.0f;         // in units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t m = a + 0xC8000FFFu + ((a >> 13) & 1u);  // rebias, round to even
  return sign | static_cast<uint16_t>(m >> 13);
}

float Apply(Transform t, float x) {
  switch (t) {
    case Transform::kNegExp:
      // exp in double, one rounding to float: what the CUDA kernel does too
      // (transform_kernels.cu), so the two agree within 1 ulp.
      return static_cast<float>(-std::exp(static_cast<double>(x)));
    case Transform::kNone:
      break;
  }
  return x;
}

}  // namespace

uint32_t TransformElement(Transform t, DType dtype, uint32_t bits) {
  switch (dtype) {
    case DType::kF32:
      return FloatToBits(Apply(t, BitsToFloat(bits)));
    case DType::kBF16:
      return FloatToBf16(Apply(t, BitsToFloat(bits << 16)));
    case DType::kF16:
      return FloatToHalf(Apply(t, HalfToFloat(static_cast<uint16_t>(bits))));
    default:
      return bits;
  }
}

bool TransformMatches(DType dtype, uint32_t want, uint32_t got) {
  if (want == got) return true;
  const int shift = dtype == DType::kF32 ? 0 : 16;
  const float w = BitsToFloat(want << shift), g = BitsToFloat(got << shift);
  if (dtype == DType::kF16) {
    const float hw = HalfToFloat(static_cast<uint16_t>(want));
    const float hg = HalfToFloat(static_cast<uint16_t>(got));
    if (std::isnan(hw) && std::isnan(hg)) return true;
  } else if (std::isnan(w) && std::isnan(g)) {
    return true;
  }
  const uint32_t sign = dtype == DType::kF32 ? 0x80000000u : 0x8000u;
  if ((want & sign) != (got & sign)) return false;
  const uint32_t d = want > got ? want - got : got - want;
  return d <= 1u;
}

absl::Status ApplyTransformHost(Transform t, DType dtype, char* p,
                                int64_t elements) {
  if (t == Transform::kNone) return absl::OkStatus();
  switch (dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < elements; ++i) {
        float x;
        std::memcpy(&x, p + 4 * i, 4);
        x = Apply(t, x);
        std::memcpy(p + 4 * i, &x, 4);
      }
      return absl::OkStatus();
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < elements; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        h = static_cast<uint16_t>(TransformElement(t, dtype, h));
        std::memcpy(p + 2 * i, &h, 2);
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("transform ", TransformName(t), " does not take ",
                       DTypeName(dtype), " elements"));
  }
}

std::vector<TransformRun> TransformRuns(const SideLayout& side, int32_t rank) {
  std::vector<TransformRun> out;
  for (const Record& r : side.records) {
    if (rank >= 0 && r.rank != rank) continue;
    const TensorSpec& t = side.tensors[r.tensor];
    if (t.transform == Transform::kNone || IsEmpty(r.box)) continue;
    const int64_t es = DTypeSize(t.dtype);
    ForEachBufferPart(r, r.box, [&](int32_t buffer, const Box& part) {
      for (const ByteRange& br :
           ByteRuns(r, es, part, std::numeric_limits<int64_t>::max() / 8)) {
        if (!out.empty() && out.back().buffer == buffer &&
            out.back().transform == t.transform && out.back().dtype == t.dtype &&
            out.back().offset + out.back().elements * es == br.begin) {
          out.back().elements += br.size / es;
          continue;
        }
        out.push_back(TransformRun{t.transform, t.dtype, buffer, br.begin,
                                   br.size / es});
      }
    });
  }
  return out;
}

absl::Status ApplyTransformRunsHost(absl::Span<const TransformRun> runs,
                                    absl::Span<char* const> buffers) {
  for (const TransformRun& r : runs) {
    if (r.buffer < 0 || static_cast<size_t>(r.buffer) >= buffers.size() ||
        buffers[r.buffer] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("transform run in buffer ", r.buffer,
                       ", which has no registered pointer"));
    }
    absl::Status s = ApplyTransformHost(r.transform, r.dtype,
                                        buffers[r.buffer] + r.offset, r.elements);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace refit
