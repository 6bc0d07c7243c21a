#!/usr/bin/env bash
# benchmarks/yarn/SparkShuffleHost.java's JUnit tests (SparkShuffleHostTest.java), compiled
# and run against each installed Spark's jars (FERRY_SPARK_VERSIONS: a comma-separated
# subset), as benchmarks/yarn_cluster.py compiles the host; JUnit 4 from the Maven
# repository scripts/setup fills. Skipped (exit 0, said) without them.
set -euo pipefail
root="${FERRY_SPARK_ROOT:-/opt/ferry-spark}"
m2=/opt/ferry-yarn/m2
java_home="${JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}"
junit="$m2/junit/junit/4.13.2/junit-4.13.2.jar:$m2/org/hamcrest/hamcrest-core/1.3/hamcrest-core-1.3.jar"
if [[ ! -x "$java_home/bin/javac" || ! -f "${junit%%:*}" ]]; then
  echo "SKIPPED: no JDK or JUnit (scripts/setup installs them)"
  exit 0
fi
ran=0
for home_file in "$root"/*/SPARK_HOME; do
  [[ -f "$home_file" ]] || continue
  version=$(basename "$(dirname "$home_file")")
  if [[ -n "${FERRY_SPARK_VERSIONS:-}" && ",$FERRY_SPARK_VERSIONS," != *",$version,"* ]]; then
    continue
  fi
  jars="$(cat "$home_file")/jars/*"
  classes="${TEST_TMPDIR:-$(mktemp -d)}/classes-$version"
  mkdir -p "$classes"
  "$java_home/bin/javac" --release 17 -nowarn -d "$classes" -cp "$jars:$junit" \
    benchmarks/yarn/SparkShuffleHost.java tests/benchmarks/yarn/SparkShuffleHostTest.java
  echo "Spark $version:"
  # The temp dirs the tests make go under the test's own. JUnit's report and Spark's log
  # (the refused handshakes' stack traces) are shown whole when a test fails.
  log="$classes/junit.log"
  "$java_home/bin/java" -Djava.io.tmpdir="${TEST_TMPDIR:-/tmp}" -cp "$classes:$jars:$junit" \
    org.junit.runner.JUnitCore org.ferry.bench.SparkShuffleHostTest >"$log" 2>&1 || {
    cat "$log"
    exit 1
  }
  grep '^OK (' "$log"
  ran=$((ran + 1))
done
if [[ $ran == 0 ]]; then
  echo "SKIPPED: no Spark distribution under $root (scripts/setup installs them)"
fi
