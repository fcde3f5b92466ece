"""Macros for CUDA code: nvcc-compiled objects and CUDA-only targets.

cuda_library(name, srcs = [x.cu], hdrs, deps): compiles each .cu with nvcc
(sm_90 SASS + compute_90 PTX) into an object and wraps it in a cc_library.
Every target made here, and every target given cuda_only_compat(), is
incompatible (skipped by `bazel build //...`, `bazel test //...`) when CUDA
is absent or --define=cuda=off.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND")

def cuda_only_compat():
    """target_compatible_with value for targets that need CUDA."""
    if not CUDA_FOUND:
        return ["//third_party/cuda:incompatible"]
    return select({
        "//third_party/cuda:cuda_forced_off": ["//third_party/cuda:incompatible"],
        "//conditions:default": [],
    })

def cuda_enabled_select(if_true, if_false = []):
    """Picks if_true when CUDA is available and not forced off."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//third_party/cuda:cuda_forced_off": if_false,
        "//conditions:default": if_true,
    })

# `nvcc_hdrs`: headers of other packages the .cu files include (labels;
# their cc_library goes in `deps`).
def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], nvcc_hdrs = [], **kwargs):
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            tools = ["@local_cuda//:nvcc"],
            cmd = ("$(location @local_cuda//:nvcc) -c -std=c++17 -O3 -Xcompiler -fPIC " +
                   "-objtemp -I. -I$(GENDIR) " +
                   "-gencode arch=compute_90,code=sm_90 " +
                   "-gencode arch=compute_90,code=compute_90 " +
                   " ".join(copts) + " -o $@ $(location " + src + ")"),
            target_compatible_with = cuda_only_compat(),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        alwayslink = 1,
        target_compatible_with = cuda_only_compat(),
        **kwargs
    )
