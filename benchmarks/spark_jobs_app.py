"""The shuffle-heavy Spark application benchmarks/spark_jobs runs (spark-submit).

  spark_jobs_app.py SORT_ROWS JOIN_ROWS SMALL_MAPS SMALL_PARTITIONS

Jobs, each its own job group, all in Spark SQL (the JVM does the work, not Python):
  sort    SORT_ROWS generated rows (an 8-byte key, two 64-character strings: about 160
          bytes each as Spark holds them) sorted by key, written to the noop sink
  join    JOIN_ROWS rows joined on a key with a quarter as many (a sort-merge join: both
          sides shuffled), then aggregated
  small   2M rows in SMALL_MAPS partitions aggregated into SMALL_PARTITIONS reduce
          partitions, AQE's coalescing off: every reducer fetches SMALL_MAPS tiny blocks
Prints one line per job, RESULT {"job": ..., "wall_s": ..., ...}, with what Spark's REST
API (/api/v1/applications/<app>/stages) says of the job's stages: shuffle read bytes
(remote and local), blocks, records, the reducers' fetch wait and push-based shuffle's
merged reads, summed over every stage attempt; and "answer", what the job computed (the sort: the rows its reducers
read), which must not depend on the shuffle service.
"""
import json
import sys
import time
import urllib.request

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def stage_metrics(spark, group):
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    ids = {s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds}
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
    with urllib.request.urlopen(url, timeout=30) as reply:
        stages = [s for s in json.load(reply) if s["stageId"] in ids]
    total = lambda key: sum(s.get(key, 0) for s in stages)  # noqa: E731
    return dict(stages=len(stages),
                fetch_wait_ms=total("shuffleFetchWaitTime"),
                read_bytes=total("shuffleReadBytes"),
                remote_bytes=total("shuffleRemoteBytesRead"),
                remote_to_disk_bytes=total("shuffleRemoteBytesReadToDisk"),
                local_bytes=total("shuffleLocalBytesRead"),
                remote_blocks=total("shuffleRemoteBlocksFetched"),
                read_records=total("shuffleReadRecords"),
                write_bytes=total("shuffleWriteBytes"),
                executor_run_ms=total("executorRunTime"),
                # Push-based shuffle's reads: merged blocks and chunks, from the disk (the
                # merger on the reducer's host) or the network, and the fallbacks to the
                # unmerged blocks. Zero without push.
                merged_blocks=total("shuffleMergedLocalBlocksFetched")
                + total("shuffleMergedRemoteBlocksFetched"),
                merged_chunks=total("shuffleMergedLocalChunksFetched")
                + total("shuffleMergedRemoteChunksFetched"),
                merged_bytes=total("shuffleMergedLocalBytesRead")
                + total("shuffleMergedRemoteBytesRead"),
                merged_fallbacks=total("shuffleMergedFetchFallbackCount"))


def run(spark, group, body):
    spark.sparkContext.setJobGroup(group, group)
    start = time.time()
    answer = body()
    wall = time.time() - start
    metrics = stage_metrics(spark, group)
    if answer is None:
        answer = metrics["read_records"]
    # One write for the whole line: the driver runs unbuffered (PYTHONUNBUFFERED), where
    # print() writes the line and its newline apart, and the JVM's log lines share stdout.
    sys.stdout.write("RESULT " + json.dumps(dict(job=group, start=start, wall_s=wall,
                                                 answer=answer, **metrics), sort_keys=True)
                     + "\n")
    sys.stdout.flush()


def main():
    sort_rows, join_rows, small_maps, small_partitions = (int(a) for a in sys.argv[1:5])
    spark = SparkSession.builder.appName("ferry-spark-jobs-benchmark").getOrCreate()
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")

    def sort():
        rows = spark.range(0, sort_rows, numPartitions=16).select(
            F.xxhash64("id").alias("k"), F.sha2(F.col("id").cast("string"), 256).alias("a"),
            F.sha2(F.col("id").cast("string"), 256).alias("b"))
        rows.orderBy("k").write.format("noop").mode("overwrite").save()
        return None  # the rows read by the reducers, from the REST API

    def join():
        big = spark.range(0, join_rows, numPartitions=16).select(
            (F.col("id") % (join_rows // 4)).alias("k"),
            F.sha2(F.col("id").cast("string"), 256).alias("a"))
        keys = spark.range(0, join_rows // 4, numPartitions=8).select(
            F.col("id").alias("k"), F.sha2(F.col("id").cast("string"), 224).alias("b"))
        row = big.join(keys, "k").agg(F.count("*").alias("n"),
                                      F.sum(F.length("a") + F.length("b")).alias("chars"),
                                      F.sum(F.col("k") % 1000003).alias("keys")).collect()[0]
        return [row["n"], row["chars"], row["keys"]]

    def small():
        spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
        spark.conf.set("spark.sql.shuffle.partitions", str(small_partitions))
        rows = spark.range(0, 2_000_000, numPartitions=small_maps).groupBy(
            (F.col("id") % 100_000).alias("g")).agg(F.count("*").alias("n"))
        row = rows.agg(F.count("*").alias("groups"), F.sum("n").alias("n")).collect()[0]
        return [row["groups"], row["n"]]

    run(spark, "sort", sort)
    run(spark, "join", join)
    run(spark, "small", small)
    spark.stop()


if __name__ == "__main__":
    main()
