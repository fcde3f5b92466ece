"""Repository rules that expose Debian-installed tools and rules to Bazel."""

def _debian_rules_java_impl(rctx):
    # Debian's bazel-rules-java (rules_java 4.0.0) works with Bazel 4.2.3.
    root = rctx.os.environ.get("REFIT_RULES_JAVA", "/usr/share/bazel/rules/java")
    if not rctx.path(root + "/WORKSPACE").exists:
        fail("rules_java not found at %s: install Debian's bazel-rules-java (tools/setup)" % root)
    for entry in rctx.path(root).readdir():
        rctx.symlink(entry, entry.basename)

debian_rules_java = repository_rule(
    implementation = _debian_rules_java_impl,
    environ = ["REFIT_RULES_JAVA"],
    local = True,
)

def _system_tools_impl(rctx):
    protoc = rctx.which("protoc")
    plugin = rctx.which("grpc_cpp_plugin")
    if protoc == None or plugin == None:
        fail("protoc / grpc_cpp_plugin not found: run tools/setup")
    rctx.symlink(protoc, "protoc")
    rctx.symlink(plugin, "grpc_cpp_plugin")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
exports_files(["protoc", "grpc_cpp_plugin"])
""")

system_tools = repository_rule(
    implementation = _system_tools_impl,
    local = True,
)
