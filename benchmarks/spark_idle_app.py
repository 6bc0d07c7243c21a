"""The application benchmarks/spark_jobs --k8s runs (spark-submit): a shuffle written
by many executors and then read by one for a long time, what keeps executors alive under
dynamic allocation's shuffle tracking.

  spark_idle_app.py MAPS MAP_SECONDS REDUCE_SECONDS PAUSE_SECONDS

Jobs, each its own job group:
  wide    MAPS map tasks, each taking MAP_SECONDS (the work a map task does, as a wait)
          and summing 400,000 generated rows into 997 keys, shuffled into 4 partitions:
          long enough for dynamic allocation to bring up more executors
  narrow  the shuffle read by one task (coalesce(1)) that takes REDUCE_SECONDS more
  again   after the driver waited PAUSE_SECONDS with the shuffle still referenced, the
          shuffle read again
Prints one line per job, RESULT {"job": ..., "wall_s": ..., "answer": ...}, the answer
being the sum of the shuffled values (it must not depend on the service), and last
RESULT {"job": "executors", ...}: from Spark's REST API, how many executors the
application had, at most how many at once, and their executor-seconds (from each one's
add time to its remove time, or to now for those alive).
"""
import datetime
import json
import operator
import sys
import time
import urllib.request

from pyspark.sql import SparkSession


def result(**values):
    # One write for the whole line: the driver's stdout is shared with the JVM's logs.
    sys.stdout.write("RESULT " + json.dumps(values, sort_keys=True) + "\n")
    sys.stdout.flush()


def run(sc, group, body):
    sc.setJobGroup(group, group)
    start = time.time()
    answer = body()
    result(job=group, start=start, wall_s=time.time() - start, answer=answer)


def executors(sc):
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/allexecutors"
    with urllib.request.urlopen(url, timeout=30) as reply:
        listed = [e for e in json.load(reply) if e["id"] != "driver"]

    def when(stamp):  # "2026-12-06T11:20:57.123GMT"
        return datetime.datetime.strptime(stamp[:-3], "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    now = time.time()
    spans = [(when(e["addTime"]), when(e["removeTime"]) if "removeTime" in e else now)
             for e in listed]
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    alive = peak = 0
    for _, step in events:
        alive += step
        peak = max(peak, alive)
    result(job="executors", executors=len(spans), peak=peak,
           executor_seconds=sum(b - a for a, b in spans))


def main():
    maps, map_seconds, reduce_seconds, pause_seconds = (int(a) for a in sys.argv[1:5])
    spark = SparkSession.builder.appName("ferry-spark-idle-benchmark").getOrCreate()
    sc = spark.sparkContext

    def rows(m):
        time.sleep(map_seconds)
        return ((i % 997, i) for i in range(m * 400_000, (m + 1) * 400_000))
    shuffled = sc.parallelize(range(maps), maps).flatMap(rows).reduceByKey(operator.add, 4)

    def slowly(pairs):
        total = sum(v for _, v in pairs)
        time.sleep(reduce_seconds)
        yield total
    run(sc, "wide", lambda: shuffled.values().sum())
    run(sc, "narrow", lambda: shuffled.coalesce(1).mapPartitions(slowly).sum())
    time.sleep(pause_seconds)
    run(sc, "again", lambda: shuffled.values().sum())
    executors(sc)
    spark.stop()


if __name__ == "__main__":
    main()
