"""ferry_fuzz_test: a fuzz target that is a corpus regression test outside --config=fuzz."""

def ferry_fuzz_test(name, corpus, deps):
    """A cc_test of `name`.cc: libFuzzer's main under --config=fuzz, corpus_main otherwise.

    Args:
      name: the target, and its source file without ".cc".
      corpus: the folder under corpus/ holding its inputs.
      deps: the units it fuzzes.
    """
    native.cc_test(
        name = name,
        srcs = [name + ".cc"],
        deps = deps + select({
            ":fuzzing": [],
            "//conditions:default": [":corpus_main"],
        }),
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        args = ["tests/fuzz/corpus/" + corpus],
        data = native.glob(["corpus/" + corpus + "/*"]),
        size = "small",
    )
