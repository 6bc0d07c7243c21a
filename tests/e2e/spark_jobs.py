"""Shuffle-heavy Spark jobs whose answers do not depend on how the shuffle was served.

  spark-submit spark_jobs.py JOB...

Each job prints one line, RESULT {"job": ..., ...}: counts and sums of what it computed,
which a test compares across runs with no external shuffle service, Spark's own and
ferry_server. Jobs:
  rdd   reduceByKey, groupByKey and sortByKey over generated pairs
  sql   a join and an aggregation with adaptive query execution on (coalesced
        partitions: batch fetches of contiguous blocks), and a skewed join (partial map
        ranges)
"""
import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def result(job, **values):
    print("RESULT " + json.dumps(dict(job=job, **values), sort_keys=True), flush=True)


def rdd_jobs(spark):
    sc = spark.sparkContext
    pairs = sc.parallelize(range(300_000), 8).map(lambda i: ((i * 7919) % 5003, i))
    reduced = pairs.reduceByKey(lambda a, b: a + b, 6).collect()
    result("reduceByKey", keys=len(reduced), total=sum(v for _, v in reduced),
           weighted=sum(k * v for k, v in reduced) % 1_000_000_007)
    grouped = pairs.groupByKey(5).mapValues(lambda vs: (len(vs), max(vs))).collect()
    result("groupByKey", keys=len(grouped), values=sum(n for _, (n, _) in grouped),
           maxes=sum(m for _, (_, m) in grouped))
    ordered = pairs.map(lambda kv: (kv[1] * 2654435761 % 1_000_003, kv[1])).sortByKey(
        numPartitions=7).map(lambda kv: kv[0]).collect()
    result("sortByKey", n=len(ordered), sorted=all(a <= b for a, b in zip(ordered, ordered[1:])),
           first=ordered[0], last=ordered[-1], checksum=sum(ordered) % 1_000_000_007)


def sql_jobs(spark):
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "true")
    spark.conf.set("spark.sql.shuffle.partitions", "40")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    orders = spark.range(0, 400_000, numPartitions=8).select(
        F.col("id").alias("order"), (F.col("id") % 20_000).alias("customer"),
        ((F.col("id") * 37) % 1000).alias("amount"))
    customers = spark.range(0, 20_000, numPartitions=4).select(
        F.col("id").alias("customer"), (F.col("id") % 17).alias("region"))
    by_region = (orders.join(customers, "customer").groupBy("region")
                 .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
                 .orderBy("region").collect())
    result("join-aggregate", regions=len(by_region), n=sum(r["n"] for r in by_region),
           total=sum(r["total"] for r in by_region),
           per_region=[[r["region"], r["n"], r["total"]] for r in by_region])
    # Skew: a third of the rows share one key, so AQE splits that partition by map ranges.
    spark.conf.set("spark.sql.adaptive.skewJoin.enabled", "true")
    spark.conf.set("spark.sql.adaptive.skewJoin.skewedPartitionFactor", "2")
    spark.conf.set("spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes", "64k")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "64k")
    skewed = spark.range(0, 300_000, numPartitions=8).select(
        F.when(F.col("id") % 3 == 0, F.lit(7)).otherwise(F.col("id") % 5000).alias("k"),
        F.col("id").alias("v"))
    keys = spark.range(0, 5000, numPartitions=4).select(F.col("id").alias("k"),
                                                         (F.col("id") * 3).alias("w"))
    joined = skewed.join(keys, "k").agg(F.count("*").alias("n"), F.sum("v").alias("sv"),
                                        F.sum("w").alias("sw")).collect()[0]
    result("skew-join", n=joined["n"], sv=joined["sv"], sw=joined["sw"])


def main():
    spark = SparkSession.builder.appName("ferry-spark-jobs").getOrCreate()
    jobs = {"rdd": rdd_jobs, "sql": sql_jobs}
    for name in sys.argv[1:]:
        jobs[name](spark)
    spark.stop()


if __name__ == "__main__":
    main()
