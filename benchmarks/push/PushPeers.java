/*
 * The Spark ends of benchmarks/push_merge, on a Spark line's own classes:
 *
 *   PushPeers serve <port-file> <min-chunk-bytes>
 *       Spark's RemoteBlockPushResolver behind ExternalBlockHandler and TransportServer,
 *       as a NodeManager hosts it (YarnShuffleService), on 127.0.0.1; its port written
 *       to <port-file>; serves until its stdin closes.
 *   PushPeers push <port> <root> <app> <shuffle> <pushers> <maps> <reduces> <block-bytes>
 *                  [<warm-up-app> <warm-up-reduces>]
 *       with a warm-up application, first pushes it the same way (its root a sibling of
 *       <root>), waits until the JIT has compiled nothing for a second (at most 60 s:
 *       compiling takes the time it takes, so a faster server would otherwise leave
 *       more of the pushers' code interpreted), prints its line and waits for a line on
 *       stdin: the pushers are then as in an executor that has pushed before, and the
 *       caller can sample the server between the two. Then registers an executor whose local and merge dirs are made under <root>, then
 *       <pushers> pushers, each with an ExternalBlockStoreClient (a connection) of its
 *       own, push the blocks of their share of the maps as ShuffleBlockPusher does: a
 *       map's blocks go in requests of consecutive reduce ids of at most 3 MiB
 *       (spark.shuffle.push.maxBlockBatchSize), each pusher's requests in a random
 *       order, one request in flight per pusher; then one finalize. Prints one JSON
 *       line: the push phase's seconds and this process's CPU seconds in it, bytes and
 *       blocks pushed, the blocks answered merged, collision and otherwise, the
 *       finalize's seconds, and what MergeStatuses says was merged (blocks, bytes).
 * Exits 2 on bad usage, 1 when a request fails outright.
 */
package ferry.pushbench;

import java.io.File;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.network.TransportContext;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.buffer.NioManagedBuffer;
import org.apache.spark.network.server.BlockPushNonFatalFailure;
import org.apache.spark.network.server.OneForOneStreamManager;
import org.apache.spark.network.server.TransportServer;
import org.apache.spark.network.shuffle.BlockPushingListener;
import org.apache.spark.network.shuffle.ExternalBlockHandler;
import org.apache.spark.network.shuffle.ExternalBlockStoreClient;
import org.apache.spark.network.shuffle.ExternalShuffleBlockResolver;
import org.apache.spark.network.shuffle.MergeFinalizerListener;
import org.apache.spark.network.shuffle.RemoteBlockPushResolver;
import org.apache.spark.network.shuffle.protocol.ExecutorShuffleInfo;
import org.apache.spark.network.shuffle.protocol.MergeStatuses;
import org.apache.spark.network.util.MapConfigProvider;
import org.apache.spark.network.util.TransportConf;

public final class PushPeers {
  static final int SUB_DIRS = 64;
  static final long MAX_BATCH_BYTES = 3L << 20;

  static TransportConf conf(String minChunk) {
    Map<String, String> settings = new HashMap<>();
    settings.put("spark.shuffle.push.server.minChunkSizeInMergedShuffleFile", minChunk);
    return new TransportConf("shuffle", new MapConfigProvider(settings));
  }

  static void serve(String portFile, String minChunk) throws Exception {
    TransportConf conf = conf(minChunk);
    ExternalBlockHandler handler = new ExternalBlockHandler(new OneForOneStreamManager(),
        new ExternalShuffleBlockResolver(conf, null), new RemoteBlockPushResolver(conf, null));
    TransportContext context = new TransportContext(conf, handler);
    TransportServer server = context.createServer("127.0.0.1", 0, Collections.emptyList());
    File tmp = new File(portFile + ".tmp");
    Files.write(tmp.toPath(), Integer.toString(server.getPort()).getBytes(StandardCharsets.UTF_8));
    if (!tmp.renameTo(new File(portFile))) throw new IllegalStateException("rename " + tmp);
    while (System.in.read() >= 0) {
    }
    server.close();
    context.close();
  }

  static ExternalBlockStoreClient client(TransportConf conf, String app) {
    ExternalBlockStoreClient c = new ExternalBlockStoreClient(conf, null, false, 10000);
    c.init(app);
    c.setAppAttemptId("1");
    return c;
  }

  static String[] localDirs(String root) throws Exception {
    String[] dirs = new String[2];
    for (int k = 0; k < 2; k++) {
      File local = new File(root, "local" + k);
      dirs[k] = new File(local, "blockmgr-1").getPath();
      Files.createDirectories(new File(dirs[k]).toPath());
      for (int s = 0; s < SUB_DIRS; s++) {
        Files.createDirectories(
            new File(new File(local, "merge_manager_1"), String.format("%02x", s)).toPath());
      }
    }
    return dirs;
  }

  // One request: consecutive reduce ids of one map.
  static final class Request {
    final int map;
    final int firstReduce;
    final int count;

    Request(int map, int firstReduce, int count) {
      this.map = map;
      this.firstReduce = firstReduce;
      this.count = count;
    }
  }

  static void push(String[] a) throws Exception {
    int port = Integer.parseInt(a[1]);
    String root = a[2];
    int shuffle = Integer.parseInt(a[4]);
    int pushers = Integer.parseInt(a[5]);
    int maps = Integer.parseInt(a[6]);
    int blockBytes = Integer.parseInt(a[8]);
    if (a.length == 11) {
      String warmUpRoot = new File(new File(root).getParentFile(), a[9]).getPath();
      pushApp(port, warmUpRoot, a[9], shuffle, pushers, maps, Integer.parseInt(a[10]), blockBytes);
      awaitJitQuiet();
      if (System.in.read() < 0) throw new IllegalStateException("stdin closed after the warm-up");
    }
    pushApp(port, root, a[3], shuffle, pushers, maps, Integer.parseInt(a[7]), blockBytes);
  }

  // Returns once the JIT's total compilation time has not grown for a second, or after
  // 60 s.
  static void awaitJitQuiet() throws InterruptedException {
    java.lang.management.CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    long last = jit.getTotalCompilationTime();
    long quietSince = System.nanoTime();
    while (System.nanoTime() < deadline) {
      Thread.sleep(100);
      long now = jit.getTotalCompilationTime();
      if (now != last) {
        last = now;
        quietSince = System.nanoTime();
      } else if (System.nanoTime() - quietSince >= TimeUnit.SECONDS.toNanos(1)) {
        return;
      }
    }
  }

  // Pushes one application's blocks and prints its JSON line.
  static void pushApp(int port, String root, String app, int shuffle, int pushers, int maps,
      int reduces, int blockBytes) throws Exception {
    TransportConf conf = conf("2m");
    String manager = "org.apache.spark.shuffle.sort.SortShuffleManager:"
        + "{\"mergeDir\":\"merge_manager_1\",\"attemptId\":\"1\"}}}";
    ExternalBlockStoreClient driver = client(conf, app);
    driver.registerWithShuffleServer("127.0.0.1", port, "1",
        new ExecutorShuffleInfo(localDirs(root), SUB_DIRS, manager));
    // The bytes pushed: slices of one random buffer (what they hold is not measured).
    byte[] pool = new byte[blockBytes + 4096];
    new Random(1).nextBytes(pool);
    int perRequest = (int) Math.max(1, Math.min(reduces, MAX_BATCH_BYTES / blockBytes));
    AtomicLong ok = new AtomicLong();
    AtomicLong collisions = new AtomicLong();
    AtomicLong others = new AtomicLong();
    ExecutorService threads = Executors.newFixedThreadPool(pushers);
    List<Future<?>> done = new ArrayList<>();
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    long cpuStart = os.getProcessCpuTime();
    long start = System.nanoTime();
    for (int p = 0; p < pushers; p++) {
      final int pusher = p;
      done.add(threads.submit(() -> {
        ExternalBlockStoreClient own = client(conf, app);
        try {
          List<Request> requests = new ArrayList<>();
          for (int map = pusher; map < maps; map += pushers) {
            for (int r = 0; r < reduces; r += perRequest) {
              requests.add(new Request(map, r, Math.min(perRequest, reduces - r)));
            }
          }
          Collections.shuffle(requests, new Random(pusher));
          for (Request q : requests) {
            String[] ids = new String[q.count];
            ManagedBuffer[] buffers = new ManagedBuffer[q.count];
            for (int i = 0; i < q.count; i++) {
              int reduce = q.firstReduce + i;
              ids[i] = "shufflePush_" + shuffle + "_0_" + q.map + "_" + reduce;
              int at = (q.map * 31 + reduce * 7) % 4096;
              buffers[i] = new NioManagedBuffer(ByteBuffer.wrap(pool, at, blockBytes).slice());
            }
            CountDownLatch answered = new CountDownLatch(q.count);
            own.pushBlocks("127.0.0.1", port, ids, buffers, new BlockPushingListener() {
              @Override
              public void onBlockPushSuccess(String blockId, ManagedBuffer data) {
                ok.incrementAndGet();
                answered.countDown();
              }

              @Override
              public void onBlockPushFailure(String blockId, Throwable e) {
                if (e instanceof BlockPushNonFatalFailure && ((BlockPushNonFatalFailure) e)
                    .getReturnCode() == BlockPushNonFatalFailure.ReturnCode
                        .BLOCK_APPEND_COLLISION_DETECTED) {
                  collisions.incrementAndGet();
                } else {
                  others.incrementAndGet();
                  System.err.println(blockId + ": " + e);
                }
                answered.countDown();
              }
            });
            if (!answered.await(120, TimeUnit.SECONDS)) {
              throw new IllegalStateException("no answer to a push request in 120 s");
            }
          }
        } catch (Exception e) {
          throw new RuntimeException(e);
        } finally {
          own.close();
        }
        return null;
      }));
    }
    for (Future<?> f : done) f.get();
    double pushSeconds = (System.nanoTime() - start) / 1e9;
    double pushCpuSeconds = (os.getProcessCpuTime() - cpuStart) / 1e9;
    threads.shutdown();
    long finalizeStart = System.nanoTime();
    CompletableFuture<MergeStatuses> statuses = new CompletableFuture<>();
    driver.finalizeShuffleMerge("127.0.0.1", port, shuffle, 0, new MergeFinalizerListener() {
      @Override
      public void onShuffleMergeSuccess(MergeStatuses s) {
        statuses.complete(s);
      }

      @Override
      public void onShuffleMergeFailure(Throwable e) {
        statuses.completeExceptionally(e);
      }
    });
    MergeStatuses s = statuses.get(120, TimeUnit.SECONDS);
    double finalizeSeconds = (System.nanoTime() - finalizeStart) / 1e9;
    long mergedBlocks = 0;
    long mergedBytes = 0;
    for (int i = 0; i < s.reduceIds.length; i++) {
      mergedBlocks += s.bitmaps[i].getLongCardinality();
      mergedBytes += s.sizes[i];
    }
    long blocks = (long) maps * reduces;
    System.out.println(String.format(
        "{\"push_seconds\": %.4f, \"pusher_cpu_seconds\": %.4f, \"bytes\": %d, \"blocks\": %d, \"ok\": %d, \"collisions\": %d,"
            + " \"other_failures\": %d, \"finalize_seconds\": %.4f, \"merged_blocks\": %d,"
            + " \"merged_bytes\": %d}",
        pushSeconds, pushCpuSeconds, blocks * blockBytes, blocks, ok.get(), collisions.get(), others.get(),
        finalizeSeconds, mergedBlocks, mergedBytes));
    System.out.flush();
    driver.close();
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 3 && args[0].equals("serve")) {
      serve(args[1], args[2]);
    } else if ((args.length == 9 || args.length == 11) && args[0].equals("push")) {
      push(args);
    } else {
      System.err.println("usage: PushPeers serve <port-file> <min-chunk-bytes>\n"
          + "       PushPeers push <port> <root> <app> <shuffle> <pushers> <maps> <reduces>"
          + " <block-bytes> [<warm-up-app> <warm-up-reduces>]");
      System.exit(2);
    }
    System.exit(0);
  }
}
