"""cuda_configure: exposes CUDA runtime, NCCL and nvcc when they are installed.

Looks for ${CUDA_PATH:-/usr/local/cuda}/bin/nvcc. When found, the generated
repository has real targets (:cuda_headers, :cudart, :nccl, :nvcc) and
defs.bzl says CUDA_FOUND = True; otherwise every target is a stub and
CUDA_FOUND = False, so CUDA targets become incompatible and are skipped.
REFIT_CUDA=off in the environment (or --define=cuda=off) forces it off.
"""

def _cuda_configure_impl(rctx):
    cuda_path = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    forced_off = rctx.os.environ.get("REFIT_CUDA", "") == "off"
    nvcc = rctx.path(cuda_path + "/bin/nvcc")
    found = (not forced_off) and nvcc.exists
    if found:
        inc = rctx.path(cuda_path + "/include")
        # Only what the runtime and NCCL need: globbing all of include/ is slow.
        for entry in inc.readdir():
            name = entry.basename
            if name.endswith(".h") or name.endswith(".hpp") or name in ["crt", "nv", "cuda"]:
                rctx.symlink(entry, "include/" + name)
        libdir = cuda_path + "/lib64"
        if not rctx.path(libdir).exists:
            libdir = cuda_path + "/targets/x86_64-linux/lib"
        for lib in ["libcudart.so", "libnccl.so", "libcudart_static.a"]:
            p = rctx.path(libdir + "/" + lib)
            if p.exists:
                rctx.symlink(p, "lib/" + lib)
        # nvcc must run from its real path (nvcc.profile is found relative to it).
        rctx.file("nvcc.sh", "#!/bin/sh\nexec %s \"$@\"\n" % str(nvcc), executable = True)
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/*.h", "include/*.hpp", "include/crt/**", "include/nv/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    srcs = ["lib/libcudart.so"],
    deps = [":cuda_headers"],
    linkopts = ["-Wl,-rpath,{libdir}"],
)

cc_library(
    name = "nccl",
    srcs = ["lib/libnccl.so"],
    deps = [":cuda_headers"],
    linkopts = ["-Wl,-rpath,{libdir}"],
)

sh_binary(
    name = "nvcc",
    srcs = ["nvcc.sh"],
)
""".format(libdir = libdir))
    else:
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda_headers")
cc_library(name = "cudart")
cc_library(name = "nccl")
sh_binary(name = "nvcc", srcs = ["nvcc.sh"])
""")
        rctx.file("nvcc.sh", "#!/bin/sh\necho 'CUDA not found' >&2\nexit 1\n", executable = True)
    rctx.file("defs.bzl", "CUDA_FOUND = %s\n" % ("True" if found else "False"))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "REFIT_CUDA"],
    local = True,
)
