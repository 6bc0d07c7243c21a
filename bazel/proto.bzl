"""Protobuf + gRPC C++ code generation with Debian's protoc and grpc_cpp_plugin.

Bazel 4.2.3 cannot fetch rules_proto or gRPC's own rules here, so a genrule runs the
system tools and a cc_library compiles the four generated files.
"""

def ferry_cc_grpc_library(name, src, deps = [], visibility = None):
    """Generates and compiles `<src>.pb.{h,cc}` and `<src>.grpc.pb.{h,cc}`.

    Args:
      name: the cc_library's name; include the headers as "<package>/<base>.pb.h".
      src: one .proto file in this package (imports resolve from the workspace root
        and /usr/include, where Debian puts the well-known types).
      deps: other cc_library targets the generated code needs (e.g. imported protos).
      visibility: of the cc_library.
    """
    if not src.endswith(".proto"):
        fail("src must be a .proto file")
    base = src[:-len(".proto")]
    outs = [
        base + ".pb.h",
        base + ".pb.cc",
        base + ".grpc.pb.h",
        base + ".grpc.pb.cc",
    ]
    native.genrule(
        name = name + "_codegen",
        srcs = [src],
        outs = outs,
        cmd = " ".join([
            "protoc",
            "--proto_path=.",
            "--proto_path=/usr/include",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
            "$(location " + src + ")",
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [base + ".pb.h", base + ".grpc.pb.h"],
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
        deps = deps + [
            "//third_party:grpc",
            "//third_party:protobuf",
        ],
    )
