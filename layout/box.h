// Box: a half-open N-dimensional index region, origin + shape, any rank.
//
// A Box is the unit of the layout algebra: the part of a logical tensor a
// rank holds, the part a transfer moves. Invariants of a Box made by Make():
// origin.size() == shape.size(), every shape[d] >= 0, and origin[d] +
// shape[d] does not overflow int64. The product of the shape (NumElements)
// is checked separately because a valid box may still have too many elements.
#ifndef REFIT_LAYOUT_BOX_H_
#define REFIT_LAYOUT_BOX_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace refit {

class Box {
 public:
  // The rank-0 box (one element).
  Box() = default;

  // Returns the box [origin, origin + shape).
  // Fails with INVALID_ARGUMENT if the ranks differ, a shape is negative, or
  // origin + shape overflows int64.
  static absl::StatusOr<Box> Make(absl::Span<const int64_t> origin,
                                  absl::Span<const int64_t> shape);

  // Returns the box [0, shape). Fails like Make().
  static absl::StatusOr<Box> FromShape(absl::Span<const int64_t> shape);

  // Index vectors stay inline (no heap) up to rank 4.
  using Indices = absl::InlinedVector<int64_t, 4>;

  // No validation beyond debug asserts: for inputs already validated.
  static Box Unchecked(absl::Span<const int64_t> origin,
                       absl::Span<const int64_t> shape);
  // The same, taking the index vectors over (no copy).
  static Box UncheckedMove(Indices&& origin, Indices&& shape);

  int rank() const { return static_cast<int>(shape_.size()); }
  absl::Span<const int64_t> origin() const { return origin_; }
  absl::Span<const int64_t> shape() const { return shape_; }
  int64_t origin(int d) const { return origin_[d]; }
  int64_t shape(int d) const { return shape_[d]; }
  int64_t limit(int d) const { return origin_[d] + shape_[d]; }

  std::string ToString() const;  // "[0:4, 8:16]"

  friend bool operator==(const Box& a, const Box& b) {
    return a.origin_ == b.origin_ && a.shape_ == b.shape_;
  }
  friend bool operator!=(const Box& a, const Box& b) { return !(a == b); }
  friend bool operator<(const Box& a, const Box& b) {
    if (a.origin_ != b.origin_) return a.origin_ < b.origin_;
    return a.shape_ < b.shape_;
  }
  friend std::ostream& operator<<(std::ostream& os, const Box& b) {
    return os << b.ToString();
  }
  friend Box Intersect(const Box& a, const Box& b);

// True if a and b share at least one element (Intersect(a, b) is not
// empty), without building the intersection. Ranks must match.
bool Intersects(const Box& a, const Box& b);

 private:
  Indices origin_;
  Indices shape_;
};

// True if some shape[d] == 0.
bool IsEmpty(const Box& b);

// Number of elements; fails with OUT_OF_RANGE on int64 overflow.
absl::StatusOr<int64_t> NumElements(const Box& b);

// Number of elements of a box known not to overflow (debug-checked).
int64_t UncheckedNumElements(const Box& b);

// The intersection of a and b (possibly empty; then every empty dimension
// has shape 0 and origin max(a.origin, b.origin)). Ranks must match
// (debug-checked; callers validate ranks before).
Box Intersect(const Box& a, const Box& b);

// True if a and b share at least one element (Intersect(a, b) is not
// empty), without building the intersection. Ranks must match.
bool Intersects(const Box& a, const Box& b);

// True if c == Intersect(a, b), without building the intersection; false
// when c's rank differs. a and b's ranks must match.
bool IsIntersection(const Box& a, const Box& b, const Box& c);

// True if every element of inner lies in outer (an empty inner is contained
// in any box of the same rank).
bool Contains(const Box& outer, const Box& inner);

// Overflow-checked int64 helpers: return false on overflow.
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);
bool CheckedMul(int64_t a, int64_t b, int64_t* out);

}  // namespace refit

#endif  // REFIT_LAYOUT_BOX_H_
