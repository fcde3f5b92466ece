"""refit's cc macros: the project's common deps and test defaults.

refit_cc_library / refit_cc_test add Abseil and the status helpers to every
target (all of refit uses them) and make tests size "small" unless told.
"""

_COMMON = [
    "//common:status_macros",
    "//third_party/system:absl",
]

def refit_cc_library(name, deps = [], **kwargs):
    native.cc_library(name = name, deps = deps + _COMMON, **kwargs)

def refit_cc_binary(name, deps = [], **kwargs):
    native.cc_binary(name = name, deps = deps + _COMMON, **kwargs)

def refit_cc_test(name, deps = [], size = "small", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        deps = deps + _COMMON + ["//third_party/system:gtest_main"],
        **kwargs
    )
