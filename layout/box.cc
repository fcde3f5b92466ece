#include "layout/box.h"

#include <utility>

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace refit {

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

absl::StatusOr<Box> Box::Make(absl::Span<const int64_t> origin,
                              absl::Span<const int64_t> shape) {
  if (origin.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("box origin has rank ", origin.size(),
                     " but shape has rank ", shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("box shape[", d, "] = ", shape[d], " is negative"));
    }
    int64_t limit;
    if (!CheckedAdd(origin[d], shape[d], &limit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "box dimension ", d, ": origin ", origin[d], " + shape ", shape[d],
          " overflows int64"));
    }
  }
  return Unchecked(origin, shape);
}

absl::StatusOr<Box> Box::FromShape(absl::Span<const int64_t> shape) {
  Indices origin(shape.size(), 0);
  return Make(origin, shape);
}

Box Box::Unchecked(absl::Span<const int64_t> origin,
                   absl::Span<const int64_t> shape) {
  assert(origin.size() == shape.size());
  Box b;
  b.origin_.assign(origin.begin(), origin.end());
  b.shape_.assign(shape.begin(), shape.end());
  return b;
}

Box Box::UncheckedMove(Indices&& origin, Indices&& shape) {
  assert(origin.size() == shape.size());
  Box b;
  b.origin_ = std::move(origin);
  b.shape_ = std::move(shape);
  return b;
}

std::string Box::ToString() const {
  std::vector<std::string> parts;
  parts.reserve(shape_.size());
  for (size_t d = 0; d < shape_.size(); ++d) {
    parts.push_back(absl::StrCat(origin_[d], ":", origin_[d] + shape_[d]));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

bool IsEmpty(const Box& b) {
  for (int d = 0; d < b.rank(); ++d) {
    if (b.shape(d) == 0) return true;
  }
  return false;
}

absl::StatusOr<int64_t> NumElements(const Box& b) {
  int64_t n = 1;
  for (int d = 0; d < b.rank(); ++d) {
    if (!CheckedMul(n, b.shape(d), &n)) {
      return absl::OutOfRangeError(
          absl::StrCat("box ", b.ToString(), " has more than 2^63 elements"));
    }
  }
  return n;
}

int64_t UncheckedNumElements(const Box& b) {
  int64_t n = 1;
  for (int d = 0; d < b.rank(); ++d) n *= b.shape(d);
  return n;
}

Box Intersect(const Box& a, const Box& b) {
  assert(a.rank() == b.rank());
  // Written in place through raw pointers into a copy of `a` (copying
  // inline index vectors is about twice as fast as resizing empty ones):
  // the planner intersects millions of boxes, and building index vectors
  // element by element costs several times the arithmetic.
  const int n = a.rank();
  Box out = a;
  int64_t* o = out.origin_.data();
  int64_t* s = out.shape_.data();
  const int64_t* ao = a.origin_.data();
  const int64_t* as = a.shape_.data();
  const int64_t* bo = b.origin_.data();
  const int64_t* bs = b.shape_.data();
  for (int d = 0; d < n; ++d) {
    const int64_t lo = std::max(ao[d], bo[d]);
    const int64_t hi = std::min(ao[d] + as[d], bo[d] + bs[d]);
    o[d] = lo;
    s[d] = hi > lo ? hi - lo : 0;
  }
  return out;
}

bool Intersects(const Box& a, const Box& b) {
  assert(a.rank() == b.rank());
  for (int d = 0; d < a.rank(); ++d) {
    if (std::max(a.origin(d), b.origin(d)) >= std::min(a.limit(d), b.limit(d))) {
      return false;
    }
  }
  return true;
}

bool IsIntersection(const Box& a, const Box& b, const Box& c) {
  assert(a.rank() == b.rank());
  if (c.rank() != a.rank()) return false;
  for (int d = 0; d < a.rank(); ++d) {
    const int64_t lo = std::max(a.origin(d), b.origin(d));
    const int64_t hi = std::min(a.limit(d), b.limit(d));
    if (c.origin(d) != lo || c.shape(d) != (hi > lo ? hi - lo : 0)) return false;
  }
  return true;
}

bool Contains(const Box& outer, const Box& inner) {
  if (outer.rank() != inner.rank()) return false;
  if (IsEmpty(inner)) return true;
  for (int d = 0; d < outer.rank(); ++d) {
    if (inner.origin(d) < outer.origin(d) || inner.limit(d) > outer.limit(d)) {
      return false;
    }
  }
  return true;
}

}  // namespace refit
