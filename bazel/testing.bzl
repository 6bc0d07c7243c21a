"""ferry_cc_test: a cc_test with what every Ferry test needs in its runfiles."""

def ferry_cc_test(name, data = [], **kwargs):
    """A cc_test whose runfiles hold tests/testing/tsan.supp (read under --config=tsan).

    Args:
      name: the test's name.
      data: runfiles of the test's own.
      **kwargs: passed to cc_test.
    """
    native.cc_test(
        name = name,
        data = data + ["//tests/testing:tsan.supp"],
        **kwargs
    )
