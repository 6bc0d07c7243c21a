"""Shuffle-heavy Spark jobs whose answers do not depend on how the shuffle was served.

  spark-submit spark_jobs.py JOB...

Each job prints lines RESULT {"job": ..., ...}: counts and sums of what it computed,
which a test compares across runs with no external shuffle service, Spark's own and
ferry_server. Jobs:
  rdd   reduceByKey, groupByKey and sortByKey over generated pairs
  sql   a join and an aggregation with adaptive query execution on (coalesced
        partitions: batch fetches of contiguous blocks), and a skewed join (partial map
        ranges)
        (each of their RESULT lines follows one of job "expected-<job>", the same fields
        computed without Spark)
  checked
        a reduceByKey checked against the same sums computed without Spark
  lifecycle=DIR
        the same shuffle read again and again while its executors come and go, under
        dynamic allocation, with the test acting between the jobs (see lifecycle_jobs)
  cached
        a disk-persisted RDD read again once the executors that cached it are gone
        (see cached_jobs)
  hold=DIR
        the checked shuffle, then a wait while the test acts on its map outputs, and
        the shuffle read again (see hold_jobs)
  hold-idle=DIR
        the same, the wait once dynamic allocation has released every executor: new
        ones read the shuffle again
  stop-mid-push=DIR
        a pushed shuffle whose map tasks take their time, for the test to stop the
        application while its blocks are being merged (see stop_mid_push)
  kill-mid-push=DIR
        the same checked, for the test to kill an executor while the map stage pushes
        (see kill_mid_push)
  pod-deleted=DIR
        on Kubernetes, a checked shuffle whose map stage waits for the test to delete an
        executor's pod (see pod_deleted)
  late-push=DIR
        a checked pushed shuffle whose last map task's blocks reach the merger after the
        finalize (see late_push)
  push-read=DIR
        what Spark's reducers read of push-based shuffle's merges in the application:
        the sums over its tasks of Spark's push-read metrics, from its event log in DIR
        (spark.eventLog.dir), read once the application has stopped
"""
import glob
import json
import operator
import os
import sys
import time

from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def result(job, **values):
    # One write for the whole line: spark-submit runs the driver unbuffered
    # (PYTHONUNBUFFERED), where print() writes the line and its newline apart, and the
    # JVM's log lines share the file.
    sys.stdout.write("RESULT " + json.dumps(dict(job=job, **values), sort_keys=True) + "\n")
    sys.stdout.flush()


def rdd_results(reduced, grouped, ordered):
    """The RESULT lines of rdd_jobs, from what its three jobs collected."""
    return [
        ("reduceByKey", summary(reduced)),
        ("groupByKey", dict(keys=len(grouped), values=sum(n for _, (n, _) in grouped),
                            maxes=sum(m for _, (_, m) in grouped))),
        ("sortByKey", dict(n=len(ordered), sorted=all(a <= b for a, b in zip(ordered, ordered[1:])),
                           first=ordered[0], last=ordered[-1], checksum=sum(ordered) % MODULUS)),
    ]


def rdd_jobs(spark):
    sc = spark.sparkContext
    rows = 300_000

    def keyed(i):
        return ((i * 7919) % 5003, i)

    def sort_key(i):
        return i * 2654435761 % 1_000_003
    by_key = {}
    for k, v in map(keyed, range(rows)):
        by_key.setdefault(k, []).append(v)
    expected = rdd_results([(k, sum(vs)) for k, vs in by_key.items()],
                           [(k, (len(vs), max(vs))) for k, vs in by_key.items()],
                           sorted(map(sort_key, range(rows))))
    pairs = sc.parallelize(range(rows), 8).map(keyed)
    reduced = pairs.reduceByKey(lambda a, b: a + b, 6).collect()
    grouped = pairs.groupByKey(5).mapValues(lambda vs: (len(vs), max(vs))).collect()
    ordered = pairs.map(lambda kv: (sort_key(kv[1]), kv[1])).sortByKey(
        numPartitions=7).map(lambda kv: kv[0]).collect()
    for (job, want), (_, got) in zip(expected, rdd_results(reduced, grouped, ordered)):
        result("expected-" + job, **want)
        result(job, **got)


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
    expected = {}
    for order in range(400_000):
        n, total = expected.get((order % 20_000) % 17, (0, 0))
        expected[(order % 20_000) % 17] = (n + 1, total + (order * 37) % 1000)
    result("expected-join-aggregate", **join_aggregate(
        [dict(region=r, n=n, total=t) for r, (n, t) in sorted(expected.items())]))
    result("join-aggregate", **join_aggregate(by_region))
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
    result("expected-skew-join", n=300_000, sv=sum(range(300_000)),
           sw=sum(3 * (7 if i % 3 == 0 else i % 5000) for i in range(300_000)))
    result("skew-join", n=joined["n"], sv=joined["sv"], sw=joined["sw"])


def join_aggregate(by_region):
    """The RESULT of sql_jobs' join and aggregation, from its rows (region, n, total)."""
    return dict(regions=len(by_region), n=sum(r["n"] for r in by_region),
                total=sum(r["total"] for r in by_region),
                per_region=[[r["region"], r["n"], r["total"]] for r in by_region])


MODULUS = 1_000_000_007


def summary(pairs):
    pairs = list(pairs)
    return dict(keys=len(pairs), total=sum(v for _, v in pairs),
                weighted=sum(k * v for k, v in pairs) % MODULUS)


def sums_by_key(values, key):
    sums = {}
    for v in values:
        sums[key(v)] = sums.get(key(v), 0) + v
    return sums.items()


def checked_jobs(spark, rows=200_000, maps=8, reduces=6):
    """A shuffle whose answer is checked against the same sums computed without Spark
    (RESULT "expected" and "shuffled" must agree), for runs with no other to compare with."""
    sc = spark.sparkContext
    data = list(range(rows))
    result("expected", **summary(sums_by_key(data, lambda i: (i * 7919) % 5003)))
    shuffled = sc.parallelize(data, maps).map(lambda i: ((i * 7919) % 5003, i)).reduceByKey(
        operator.add, reduces)
    result("shuffled", **summary(shuffled.collect()))
    return shuffled


def many_reduces_jobs(spark):
    """The checked shuffle with 240 reduce tasks: a reduce stage that fetches for a few
    seconds, long enough for the test to hand ferry_server over again and again."""
    checked_jobs(spark, rows=400_000, maps=16, reduces=240)


def wait_for(ready, seconds=60):
    """Until `ready()` holds, for at most `seconds`; whether it held. What the test or
    another task does is polled every 50 ms."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def handshake(directory, step, timeout=240):
    """Tells the test `step` is reached (DIR/step.ready) and waits for DIR/step.done."""
    open(os.path.join(directory, step + ".ready"), "w").close()
    done = os.path.join(directory, step + ".done")
    if not wait_for(lambda: os.path.exists(done), timeout):
        raise RuntimeError(f"the test did not answer {step} in {timeout} s")


def wait_for_executors(sc, n, timeout=120):
    """Waits until exactly n executors are alive (dynamic allocation adds and removes them)."""
    # The driver is one of them.
    if not wait_for(lambda: sc._jsc.sc().getExecutorMemoryStatus().size() - 1 == n, timeout):
        raise RuntimeError(f"{n} executors were not alive after {timeout} s")


def attempts(sc, group):
    """The job group's most re-attempted stage, and its stages' failed tasks."""
    tracker = sc.statusTracker()
    stages = [tracker.getStageInfo(s) for j in tracker.getJobIdsForGroup(group)
              for s in tracker.getJobInfo(j).stageIds]
    return dict(max_attempt=max(s.currentAttemptId for s in stages),
                failed_tasks=sum(s.numFailedTasks for s in stages))


def lifecycle_jobs(spark, directory):
    """One application whose shuffles outlive the executors that wrote them.

    Run with dynamic allocation (executors released when idle). The test waits at each
    handshake and acts: restarts the shuffle service ("restart"), flips a byte in the
    newest shuffle's data files ("corrupt"), SIGKILLs the executor of the first reduce
    task that writes DIR/reducing.<pid> in the "kill" job, and looks at what is left of
    the shuffles once the driver removed them ("removed"). Every answer is checked here
    against the same sums computed without Spark (RESULT "expected-...").
    """
    sc = spark.sparkContext
    data = list(range(200_000))

    def keyed(i):
        return ((i * 7919) % 5003, i)
    result("expected", **summary(sums_by_key(data, lambda i: keyed(i)[0])))
    shuffled = sc.parallelize(data, 8).map(keyed).reduceByKey(operator.add, 6)
    result("written", **summary(shuffled.collect()))
    # The executors that wrote the map outputs leave; new ones read them from the service.
    wait_for_executors(sc, 0)
    result("executors-gone", **summary(shuffled.collect()))
    handshake(directory, "restart")
    result("service-restarted", **summary(shuffled.collect()))

    # An executor that wrote map outputs is killed while the reducers run: its output is
    # still the service's to serve, so no fetch fails and no map stage runs again.
    def map_slowly(rows):
        time.sleep(0.5)  # so that both executors take map tasks
        return (((i * 31) % 4001, i) for i in rows)

    def reduce_slowly(_, rows):
        marker = os.path.join(directory, f"reducing.{os.getpid()}")
        if not glob.glob(os.path.join(directory, "reducing.*")):
            open(marker, "w").close()
        time.sleep(1.5)
        return rows
    result("expected-kill", **summary(sums_by_key(data, lambda i: (i * 31) % 4001)))
    sc.setJobGroup("kill", "an executor SIGKILLed mid-reduce")
    killed = sc.parallelize(data, 8).mapPartitions(map_slowly).reduceByKey(operator.add, 6)
    result("kill", **summary(killed.mapPartitionsWithIndex(reduce_slowly).collect()),
           **attempts(sc, "kill"))

    # A byte flipped on disk in every data file of a shuffle: the reducers' checksum
    # diagnosis blames the disk, and the map stage is run again.
    result("expected-corrupt", **summary(sums_by_key(data, lambda i: (i * 13) % 3001)))
    corrupted = sc.parallelize(data, 8).map(lambda i: ((i * 13) % 3001, i)).reduceByKey(
        operator.add, 6)
    result("before-corruption", **summary(corrupted.collect()))
    wait_for_executors(sc, 0)
    handshake(directory, "corrupt")
    sc.setJobGroup("corrupt", "a shuffle read after a byte of each data file flipped")
    result("corrupt", **summary(corrupted.collect()), **attempts(sc, "corrupt"))

    # The driver removes the three shuffles (spark.shuffle.service.removeShuffle), as its
    # ContextCleaner does when their RDDs are gone: the files of map outputs whose
    # executors are gone are the service's to delete. A failure is the driver's log line
    # "Error cleaning shuffle N".
    wait_for_executors(sc, 0)
    cleaner = sc._jsc.sc().cleaner().get()
    for shuffle in range(3):
        cleaner.doCleanupShuffle(shuffle, True)
    handshake(directory, "removed")


def cached_jobs(spark):
    """A disk-persisted RDD read again once the executors that cached it are gone. Run
    with dynamic allocation and spark.shuffle.service.fetch.rdd.enabled: the new
    executors fetch its blocks from the shuffle service rather than compute them again
    (an accumulator counts the partitions computed; RESULT "cached-after-executors-gone"
    has recomputed=0 when none was)."""
    sc = spark.sparkContext
    computed = sc.accumulator(0)

    def compute(rows):
        computed.add(1)
        return ((i * 2654435761) % 1_000_003 for i in rows)
    data = list(range(200_000))
    result("expected-cached", n=len(data), total=sum((i * 2654435761) % 1_000_003 for i in data))
    cached = sc.parallelize(data, 8).mapPartitions(compute).persist(StorageLevel.DISK_ONLY)
    result("cached", n=cached.count(), total=cached.sum(), computed=computed.value)
    wait_for_executors(sc, 0)
    before = computed.value
    result("cached-after-executors-gone", n=cached.count(), total=cached.sum(),
           recomputed=computed.value - before)


def hold_jobs(spark, directory, idle=False):
    """The checked shuffle, held: once it is written the test looks at its map outputs
    (DIR/held.ready) while the application lives, and the shuffle is read again after
    the test is done (DIR/held.done), saying how many stages that ran (1: the map stage
    was skipped). idle: the test is told once dynamic allocation has released every
    executor, so executors that did not write it read it again."""
    sc = spark.sparkContext
    shuffled = checked_jobs(spark)
    if idle:
        wait_for_executors(sc, 0)
    handshake(directory, "held")
    sc.setJobGroup("read-again", "the held shuffle read again")
    rows = shuffled.collect()
    # Its map stage is skipped (1 stage run) while its map outputs stay registered.
    tracker = sc.statusTracker()
    stages_run = sum(1 for j in tracker.getJobIdsForGroup("read-again")
                     for s in tracker.getJobInfo(j).stageIds
                     if (info := tracker.getStageInfo(s)) is not None and info.numCompletedTasks > 0)
    result("read-again", stages_run=stages_run, **summary(rows))


def start_mergers(sc):
    """Spark picks a shuffle's mergers (the hosts of the executors it has had) when its
    map stage starts, and pushes nothing of it without one: a job that brings executors
    up first."""
    sc.parallelize(range(8), 8).count()


def stop_mid_push(spark, directory):
    """A shuffle of 32 map tasks of a second each, pushed as each ends: the test SIGKILLs
    the driver, the JVM running this Python whose pid names DIR/driver.<pid>, while the
    pushes are being merged. Reaching the end is the test's failure ("not-stopped")."""
    open(os.path.join(directory, f"driver.{os.getppid()}"), "w").close()
    start_mergers(spark.sparkContext)

    def slowly(rows):
        time.sleep(1)
        yield from (((i * 7919) % 5003, i) for i in rows)
    reduced = spark.sparkContext.parallelize(range(400_000), 32).mapPartitions(slowly) \
        .reduceByKey(operator.add, 6).count()
    result("not-stopped", keys=reduced)


def lost_mid_map(sc, directory, group, maps, partitions, rows, waiter, answer):
    """A checked shuffle of `rows` rows in `maps` map tasks into `partitions`, job group
    `group`: the first half of the maps end at once; the others write
    DIR/mapping.<waiter()> and wait for DIR/<answer> (a minute at most), which the test
    writes once it has taken that executor away, so that it goes while they run, and
    those run again after it go on at once. RESULT expected-<group> and <group>, with
    the attempts."""
    data = list(range(rows))
    taken = os.path.join(directory, answer)

    def key(i):
        return (i * 7919) % 5003

    def mapping(index, rows):
        if index >= maps // 2 and not os.path.exists(taken):
            open(os.path.join(directory, f"mapping.{waiter()}"), "w").close()
            wait_for(lambda: os.path.exists(taken))
        return ((key(i), i) for i in rows)
    result(f"expected-{group}", **summary(sums_by_key(data, key)))
    sc.setJobGroup(group, group)
    shuffled = sc.parallelize(data, maps).mapPartitionsWithIndex(mapping) \
        .reduceByKey(operator.add, partitions)
    result(group, **summary(shuffled.collect()), **attempts(sc, group))


def kill_mid_push(spark, directory):
    """A checked pushed shuffle of 16 map tasks into 60 partitions (lost_mid_map): the
    test SIGKILLs the executor above a waiting map task's Python worker (DIR/mapping.<pid>)
    once ferry_server has merged some of the stage's blocks, then writes DIR/killed. Spark
    runs the lost tasks again on another executor, whose pushes of the same map indexes
    merge or are duplicates, and the reducers read the merges."""
    start_mergers(spark.sparkContext)
    lost_mid_map(spark.sparkContext, directory, "killed-mid-push", 16, 60, 400_000,
                 os.getpid, "killed")


def hand_over_mid_push(spark, directory):
    """A checked pushed shuffle of 16 map tasks into 60 partitions (lost_mid_map): half
    the maps push at once, the others wait for DIR/handed-over, which the test writes once
    it has handed ferry_server over with their merges open, and push while it hands over
    again."""
    start_mergers(spark.sparkContext)
    lost_mid_map(spark.sparkContext, directory, "handed-over-mid-push", 16, 60, 400_000,
                 os.getpid, "handed-over")


def pod_deleted(spark, directory):
    """A checked shuffle of 8 map tasks on Kubernetes (lost_mid_map): the waiting tasks
    name their executor's pod (DIR/mapping.<pod>), which the test deletes, then writes
    DIR/deleted. Spark runs the lost tasks again on another executor; the deleted
    executor's finished map outputs are read from the shuffle service, no stage run again
    (attempts say so)."""
    lost_mid_map(spark.sparkContext, directory, "pod-deleted", 8, 6, 200_000,
                 lambda: os.environ["SPARK_EXECUTOR_POD_NAME"], "deleted")


def late_push(spark, directory):
    """A checked pushed shuffle whose last map task ends last and pushes 36 MB, run with
    the finalize at the map stage's end (spark.shuffle.push.finalize.timeout=0s) and one
    push request in flight (spark.reducer.maxSizeInFlight=1m): its blocks reach the merger
    after the finalize, answered too late, and the reducers read them unmerged beside the
    others' merges. No combine on the map side (partitionBy), so the blocks stay large.
    Map 7 starts its rows once the other maps have made theirs (DIR/made.<map>)."""
    sc = spark.sparkContext
    start_mergers(sc)

    def rows(m):
        return range(m * 100_000, m * 100_000 + (6_000 if m == 7 else 600))

    def key(i):
        return (i * 7919) % 5003

    def generate(m):
        if m == 7:
            wait_for(lambda: len(glob.glob(os.path.join(directory, "made.*"))) == 7)
        # Bytes the shuffle's compression cannot shrink; the sums do not read them.
        size = 6_000 if m == 7 else 100
        for i in rows(m):
            yield key(i), (i, os.urandom(size))
        if m != 7:
            open(os.path.join(directory, f"made.{m}"), "w").close()

    def sums(pairs):
        out = {}
        for k, (i, _) in pairs:
            out[k] = out.get(k, 0) + i
        return out.items()
    data = [i for m in range(8) for i in rows(m)]
    result("expected-late-push", **summary(sums_by_key(data, key)))
    shuffled = sc.parallelize(range(8), 8).flatMap(generate).partitionBy(60).mapPartitions(sums)
    result("late-push", **summary(shuffled.collect()))


# The event log's names of the push-read metrics (under a task's "Shuffle Read Metrics",
# "Push Based Shuffle"), and the names the REST API gives them.
PUSH_READ_METRICS = {
    "Merged Fetch Fallback Count": "shuffleMergedFetchFallbackCount",
    "Merged Remote Blocks Fetched": "shuffleMergedRemoteBlocksFetched",
    "Merged Local Blocks Fetched": "shuffleMergedLocalBlocksFetched",
    "Merged Remote Chunks Fetched": "shuffleMergedRemoteChunksFetched",
    "Merged Local Chunks Fetched": "shuffleMergedLocalChunksFetched",
    "Merged Remote Bytes Read": "shuffleMergedRemoteBytesRead",
    "Merged Local Bytes Read": "shuffleMergedLocalBytesRead",
    "Corrupt Merged Block Chunks": "shuffleCorruptMergedBlockChunks"}


def push_read(directory, app_id):
    """The sums of the push-read metrics of every task in the application's event log,
    blocksFetched (every block read, merged or not: Spark counts each map's block in a
    merged chunk), and last_stage_chunks: the merged chunks its last stage read."""
    sums = dict.fromkeys(PUSH_READ_METRICS.values(), 0)
    sums["blocksFetched"] = 0
    tasks = 0
    chunks_by_stage = {}
    paths = [os.path.join(d, f) for d, _, files in os.walk(directory) for f in files
             if app_id in f]
    for path in paths:
        with open(path) as log:
            for line in log:
                event = json.loads(line)
                if event.get("Event") != "SparkListenerTaskEnd":
                    continue
                tasks += 1
                read = event.get("Task Metrics", {}).get("Shuffle Read Metrics", {})
                sums["blocksFetched"] += read.get("Remote Blocks Fetched", 0) + \
                    read.get("Local Blocks Fetched", 0)
                push = read.get("Push Based Shuffle", {})
                for name, key in PUSH_READ_METRICS.items():
                    sums[key] += push.get(name, 0)
                stage = event.get("Stage ID", -1)
                chunks_by_stage[stage] = chunks_by_stage.get(stage, 0) + \
                    push.get("Merged Local Chunks Fetched", 0) + \
                    push.get("Merged Remote Chunks Fetched", 0)
    last = chunks_by_stage[max(chunks_by_stage)] if chunks_by_stage else 0
    result("push-read", tasks=tasks, last_stage_chunks=last, **sums)


def main():
    spark = SparkSession.builder.appName("ferry-spark-jobs").getOrCreate()
    jobs = {"rdd": rdd_jobs, "sql": sql_jobs, "checked": checked_jobs, "cached": cached_jobs,
            "many-reduces": many_reduces_jobs}
    event_log = None
    for arg in sys.argv[1:]:
        name, _, value = arg.partition("=")
        if name == "lifecycle":
            lifecycle_jobs(spark, value)
        elif name in ("hold", "hold-idle"):
            hold_jobs(spark, value, idle=name == "hold-idle")
        elif name == "stop-mid-push":
            stop_mid_push(spark, value)
        elif name == "kill-mid-push":
            kill_mid_push(spark, value)
        elif name == "hand-over-mid-push":
            hand_over_mid_push(spark, value)
        elif name == "late-push":
            late_push(spark, value)
        elif name == "pod-deleted":
            pod_deleted(spark, value)
        elif name == "push-read":
            event_log = value
        else:
            jobs[name](spark)
    app_id = spark.sparkContext.applicationId
    spark.stop()
    # The event log is whole once the application has stopped.
    if event_log is not None:
        push_read(event_log.removeprefix("file://"), app_id)


if __name__ == "__main__":
    main()
