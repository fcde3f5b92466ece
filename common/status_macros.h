// Status helpers shared by every library: this Abseil (20220623) predates the
// official RETURN_IF_ERROR / ASSIGN_OR_RETURN, so refit defines its own.
//
//   REFIT_RETURN_IF_ERROR(DoThing());
//   REFIT_ASSIGN_OR_RETURN(Box b, Box::Make(origin, shape));
//
// Both return the failing absl::Status from the enclosing function unchanged.
// AnnotateStatus() prefixes context ("tensor X, rank 3: ...") keeping the code.
#ifndef REFIT_COMMON_STATUS_MACROS_H_
#define REFIT_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace refit {

// Returns `status` with `context + ": "` prepended to its message; OK stays OK.
inline absl::Status AnnotateStatus(const absl::Status& status,
                                   absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

// The StatusOr form: the value passes through; an error is annotated.
template <typename T>
absl::StatusOr<T> AnnotateStatus(absl::StatusOr<T> v, absl::string_view context) {
  if (v.ok()) return v;
  return AnnotateStatus(v.status(), context);
}

namespace internal_status {
inline absl::Status AsStatus(absl::Status s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal_status

}  // namespace refit

#define REFIT_STATUS_CONCAT_INNER_(a, b) a##b
#define REFIT_STATUS_CONCAT_(a, b) REFIT_STATUS_CONCAT_INNER_(a, b)

#define REFIT_RETURN_IF_ERROR(expr)                                   \
  do {                                                                \
    absl::Status refit_status_ = ::refit::internal_status::AsStatus(  \
        (expr));                                                      \
    if (!refit_status_.ok()) return refit_status_;                    \
  } while (0)

#define REFIT_ASSIGN_OR_RETURN(lhs, rexpr)                                   \
  REFIT_ASSIGN_OR_RETURN_IMPL_(                                              \
      REFIT_STATUS_CONCAT_(refit_statusor_, __LINE__), lhs, rexpr)

#define REFIT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()

#endif  // REFIT_COMMON_STATUS_MACROS_H_
