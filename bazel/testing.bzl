"""ferry_cc_test: a cc_test with what every Ferry test needs in its runfiles.

Every test names its size, as Bazel means it (small: under a minute, in-process; medium:
under five; large: under fifteen), and tags what it needs beyond a build, so that a
developer and CI can pick tiers (`scripts/test --fast` leaves out spark, yarn, jvm, root,
kubernetes and soak):
  spark:  real Spark applications on a real cluster (scripts/setup's distributions);
  yarn:   Spark applications on a real YARN cluster (scripts/setup's Hadoop jars);
  jvm:    JVM peers: Spark's own shuffle service and client (../shared/spark-ess);
  root:   root for what it is about (network namespaces, loop devices, another user);
          without root it skips, saying why;
  soak:   a load or soak test, longer with FERRY_SOAK_SECONDS;
  spawns: starts the ferry_server binary as a process of its own;
  kubernetes: a real one-node Kubernetes (tests/testing/kube_cluster.h; one at a time
          on the host, which KubeCluster sees to).
"""

_TAGS = ["spark", "yarn", "jvm", "root", "soak", "spawns", "kubernetes"]

def ferry_cc_test(name, size, data = [], tags = [], **kwargs):
    """A cc_test whose runfiles hold tests/testing/tsan.supp (read under --config=tsan).

    Args:
      name: the test's name.
      size: small, medium or large.
      data: runfiles of the test's own.
      tags: of _TAGS.
      **kwargs: passed to cc_test.
    """
    for tag in tags:
        if tag not in _TAGS:
            fail("%s: tag %s is not one of %s" % (name, tag, _TAGS))
    native.cc_test(
        name = name,
        size = size,
        data = data + ["//tests/testing:tsan.supp"],
        tags = tags,
        **kwargs
    )
