// refit's release version, as the Python package gives it (refit.__version__
// in client/python/refit/__init__.py; tests/e2e/operations_test.sh checks
// they agree) and refitd's refit_build_info metric shows.
#ifndef REFIT_COMMON_VERSION_H_
#define REFIT_COMMON_VERSION_H_

namespace refit {

inline constexpr char kRefitVersion[] = "0.1.0";

}  // namespace refit

#endif  // REFIT_COMMON_VERSION_H_
