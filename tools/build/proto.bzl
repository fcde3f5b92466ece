"""refit_proto_library: C++ code from .proto files with Debian's protoc.

Generates <x>.pb.{h,cc} (and <x>.grpc.pb.{h,cc} when grpc = True) for each
src and wraps them in a cc_library. Includes are rooted at the workspace, so
`import "proto/plan.proto";` and `#include "proto/plan.pb.h"`.
"""

def refit_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    proto_deps = [d + "_srcs" for d in deps]
    native.filegroup(name = name + "_srcs", srcs = srcs + proto_deps)
    cmd = "$(location @system_tools//:protoc) -I. --cpp_out=$(GENDIR) "
    tools = ["@system_tools//:protoc"]
    if grpc:
        cmd += ("--grpc_out=$(GENDIR) " +
                "--plugin=protoc-gen-grpc=$(location @system_tools//:grpc_cpp_plugin) ")
        tools.append("@system_tools//:grpc_cpp_plugin")
    cmd += " ".join(["%s/%s" % (pkg, s) for s in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs + proto_deps,
        outs = outs,
        tools = tools,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party/system:protobuf"] +
               (["//third_party/system:grpc"] if grpc else []),
        visibility = visibility,
    )
