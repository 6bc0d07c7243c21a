#!/usr/bin/env bash
# Runs the aux service's JUnit tests (server/yarn/src/test) with Maven, offline.
set -euo pipefail
# As a NodeManager with umask 077 runs it: the modes the hand-off needs are set, not
# asked of the umask.
umask 077
build="${TEST_TMPDIR:-$(mktemp -d)}/mvn"
mvn -B -q -o -Dstyle.color=never -Dmaven.repo.local=/opt/ferry-yarn/m2 -Dferry.build.dir="$build" \
  -Dferry.app.ids="$PWD/tests/testdata/app_ids.tsv" -f server/yarn/pom.xml test || {
  cat "$build"/surefire-reports/*.txt 2>/dev/null || true
  exit 1
}
cat "$build"/surefire-reports/*.txt
