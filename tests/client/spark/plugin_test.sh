#!/usr/bin/env bash
# Compiles the plugin and its JUnit tests against each installed Spark line's jars, and runs
# them.
set -euo pipefail
junit=/opt/ferry-yarn/m2/junit/junit/4.13.2/junit-4.13.2.jar
hamcrest=/opt/ferry-yarn/m2/org/hamcrest/hamcrest-core/1.3/hamcrest-core-1.3.jar
ran=0
for spark in 3.5.9 4.3.0; do
  jars=/opt/ferry-spark/$spark/lib/python3.11/site-packages/pyspark/jars
  [[ -d "$jars" ]] || continue
  classes="${TEST_TMPDIR:-$(mktemp -d)}/classes-$spark"
  mkdir -p "$classes"
  javac -nowarn -Xlint:all,-path,-processing -Werror --release 17 -cp "$jars/*:$junit" -d "$classes" \
    client/spark/src/main/java/org/ferry/spark/*.java client/spark/src/test/java/org/ferry/spark/*.java
  echo "Spark $spark:"
  java -cp "$classes:$jars/*:$junit:$hamcrest" org.junit.runner.JUnitCore org.ferry.spark.FerryDirsTest \
    org.ferry.spark.FerryRegistrationTest
  ran=$((ran + 1))
done
((ran > 0)) || { echo "no Spark installed (scripts/setup)" >&2; exit 1; }
