"""ferry_flags_library: a package's flags.cc (common/option_flags.h)."""

def ferry_flags_library(deps):
    """The package's `flags` target: its flags.cc, which only registers flags.

    Linked by a binary that takes the flags (server/flags.h applies them); alwayslink,
    because nothing calls into it.

    Args:
      deps: the options structs' libraries the flags bind to.
    """
    native.cc_library(
        name = "flags",
        srcs = ["flags.cc"],
        visibility = ["//server:__pkg__", "//tests:__subpackages__"],
        deps = deps + ["//common:option_flags", "//third_party:absl"],
        alwayslink = True,
    )
