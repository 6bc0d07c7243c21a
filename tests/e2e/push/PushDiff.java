/*
 * The same pushes into ferry_server and into Spark's own RemoteBlockPushResolver (behind
 * ExternalBlockHandler and TransportServer, as a NodeManager hosts it), both driven by
 * Spark's own push client (ExternalBlockStoreClient, OneForOneBlockPusher); then the same
 * finalize, and Spark's own reduce-side client reading ferry_server's merged chunks and
 * bitmaps. Four shuffles, one case each:
 *   3  many maps and partitions, a byte to 1.5 MiB, a duplicate, a push after finalize:
 *      codes, MergeStatuses and merged files (.data, .index, .meta) alike byte for byte;
 *   4  a pusher killed halfway through a block (a raw UploadStream, its connection
 *      closed), then the pushes that follow: the merged files alike byte for byte;
 *   5  a newer merge id: the older merge's files deleted on both, its pushes stale, its
 *      finalize refused, the newer merge's files alike byte for byte;
 *   6  concurrent pushers into one partition, each on its own connection: every block
 *      Ferry answers merged is merged whole, and it merges every one; Spark's resolver
 *      may answer some "collision" (counted), and merges the rest whole.
 * Exits 0 when everything agrees, 1 naming the first difference, 2 on bad usage.
 *
 *   PushDiff <ferry-port> <ferry-root> <spark-root> <min-chunk-bytes>
 *
 * Each root gets an executor's two local dirs (local<k>/blockmgr-1) and their merge
 * dirs (local<k>/merge_manager_1/<00..3f>), as DiskBlockManager makes them.
 */
package ferry.pushdiff;

import java.io.File;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.spark.network.TransportContext;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.buffer.NioManagedBuffer;
import org.apache.spark.network.protocol.Message;
import org.apache.spark.network.protocol.UploadStream;
import org.apache.spark.network.server.BlockPushNonFatalFailure;
import org.apache.spark.network.server.OneForOneStreamManager;
import org.apache.spark.network.server.TransportServer;
import org.apache.spark.network.shuffle.BlockFetchingListener;
import org.apache.spark.network.shuffle.BlockPushingListener;
import org.apache.spark.network.shuffle.ExecutorDiskUtils;
import org.apache.spark.network.shuffle.ExternalBlockHandler;
import org.apache.spark.network.shuffle.ExternalBlockStoreClient;
import org.apache.spark.network.shuffle.ExternalShuffleBlockResolver;
import org.apache.spark.network.shuffle.MergeFinalizerListener;
import org.apache.spark.network.shuffle.MergedBlockMeta;
import org.apache.spark.network.shuffle.MergedBlocksMetaListener;
import org.apache.spark.network.shuffle.RemoteBlockPushResolver;
import org.apache.spark.network.shuffle.protocol.ExecutorShuffleInfo;
import org.apache.spark.network.shuffle.protocol.MergeStatuses;
import org.apache.spark.network.shuffle.protocol.PushBlockStream;
import org.apache.spark.network.util.MapConfigProvider;
import org.apache.spark.network.util.TransportConf;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import org.roaringbitmap.RoaringBitmap;

public final class PushDiff {
  static final String APP = "app-20261205000000-0001";
  static final int SUB_DIRS = 64;
  static final String MANAGER = "org.apache.spark.shuffle.sort.SortShuffleManager:"
      + "{\"mergeDir\":\"merge_manager_1\",\"attemptId\":\"1\"}}}";

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

  static String[] mergeDirs(String root) {
    return new String[] {new File(root, "local0/merge_manager_1").getPath(),
                         new File(root, "local1/merge_manager_1").getPath()};
  }

  static File mergedFile(String root, int shuffle, int merge, int reduce, String suffix) {
    String name = "shuffleMerged_" + APP + "_" + shuffle + "_" + merge + "_" + reduce + "." + suffix;
    return new File(ExecutorDiskUtils.getFilePath(mergeDirs(root), SUB_DIRS, name));
  }

  static byte[] block(long seed, int size) {
    byte[] b = new byte[size];
    new Random(seed).nextBytes(b);
    return b;
  }

  static byte[] bytes(ManagedBuffer buffer) throws Exception {
    ByteBuffer nio = buffer.nioByteBuffer();
    byte[] out = new byte[nio.remaining()];
    nio.get(out);
    return out;
  }

  static void fail(String what) {
    System.out.println("DIFF: " + what);
    System.exit(1);
  }

  // One push's outcome: "ok", or the return code of a non-fatal failure, or the error.
  static String push(ExternalBlockStoreClient client, int port, int shuffle, int merge, int map,
      int reduce, byte[] b) throws Exception {
    CompletableFuture<String> done = new CompletableFuture<>();
    String id = "shufflePush_" + shuffle + "_" + merge + "_" + map + "_" + reduce;
    client.pushBlocks("127.0.0.1", port, new String[] {id},
        new ManagedBuffer[] {new NioManagedBuffer(ByteBuffer.wrap(b))},
        new BlockPushingListener() {
          @Override
          public void onBlockPushSuccess(String blockId, ManagedBuffer data) {
            done.complete("ok");
          }

          @Override
          public void onBlockPushFailure(String blockId, Throwable e) {
            done.complete(e instanceof BlockPushNonFatalFailure
                ? ((BlockPushNonFatalFailure) e).getReturnCode().toString()
                : "error: " + e);
          }
        });
    return done.get(30, TimeUnit.SECONDS);
  }

  static MergeStatuses finalizeMerge(ExternalBlockStoreClient client, int port, int shuffle,
      int merge) throws Exception {
    CompletableFuture<MergeStatuses> done = new CompletableFuture<>();
    client.finalizeShuffleMerge("127.0.0.1", port, shuffle, merge, new MergeFinalizerListener() {
      @Override
      public void onShuffleMergeSuccess(MergeStatuses statuses) {
        done.complete(statuses);
      }

      @Override
      public void onShuffleMergeFailure(Throwable e) {
        done.completeExceptionally(e);
      }
    });
    return done.get(30, TimeUnit.SECONDS);
  }

  // reduce id -> (bitmap, size)
  static Map<Integer, String> describe(MergeStatuses s) {
    Map<Integer, String> out = new TreeMap<>();
    for (int i = 0; i < s.reduceIds.length; i++) {
      out.put(s.reduceIds[i], s.bitmaps[i] + " " + s.sizes[i]);
    }
    return out;
  }

  // The two servers under test, and a client of each.
  final int ferryPort;
  final int sparkPort;
  final String ferryRoot;
  final String sparkRoot;
  final ExternalBlockStoreClient client;
  final TransportConf conf;

  PushDiff(int ferryPort, int sparkPort, String ferryRoot, String sparkRoot, TransportConf conf) {
    this.ferryPort = ferryPort;
    this.sparkPort = sparkPort;
    this.ferryRoot = ferryRoot;
    this.sparkRoot = sparkRoot;
    this.conf = conf;
    this.client = newClient();
  }

  ExternalBlockStoreClient newClient() {
    ExternalBlockStoreClient c = new ExternalBlockStoreClient(conf, null, false, 10000);
    c.init(APP);
    c.setAppAttemptId("1");
    return c;
  }

  // The same push to Spark's resolver, then to Ferry: both answers, or a difference.
  String pushBoth(int shuffle, int merge, int map, int reduce, byte[] b) throws Exception {
    String spark = push(client, sparkPort, shuffle, merge, map, reduce, b);
    String ferry = push(client, ferryPort, shuffle, merge, map, reduce, b);
    if (!ferry.equals(spark)) {
      fail("push of shuffle " + shuffle + " merge " + merge + " map " + map + " reduce " + reduce
          + ": Spark " + spark + ", Ferry " + ferry);
    }
    return spark;
  }

  Map<Integer, String> finalizeBoth(int shuffle, int merge) throws Exception {
    Map<Integer, String> spark = describe(finalizeMerge(client, sparkPort, shuffle, merge));
    Map<Integer, String> ferry = describe(finalizeMerge(client, ferryPort, shuffle, merge));
    if (!spark.equals(ferry)) fail("MergeStatuses: Spark " + spark + ", Ferry " + ferry);
    return spark;
  }

  void sameFiles(int shuffle, int merge, int reduce) throws Exception {
    for (String suffix : new String[] {"data", "index", "meta"}) {
      byte[] s = Files.readAllBytes(mergedFile(sparkRoot, shuffle, merge, reduce, suffix).toPath());
      byte[] f = Files.readAllBytes(mergedFile(ferryRoot, shuffle, merge, reduce, suffix).toPath());
      if (!Arrays.equals(s, f)) {
        fail(mergedFile(ferryRoot, shuffle, merge, reduce, suffix).getName() + ": Spark's "
            + s.length + " bytes, Ferry's " + f.length);
      }
    }
  }

  // A merged partition as a reducer reads it with Spark's own client: the chunk
  // bitmaps (MergedBlockMetaRequest), then each chunk (FetchShuffleBlockChunks).
  static final class Chunk {
    final RoaringBitmap maps;
    final byte[] data;

    Chunk(RoaringBitmap maps, byte[] data) {
      this.maps = maps;
      this.data = data;
    }
  }

  List<Chunk> readMerged(int port, int shuffle, int merge, int reduce) throws Exception {
    // The bitmaps are read in the callback: the buffer is released after it.
    CompletableFuture<RoaringBitmap[]> meta = new CompletableFuture<>();
    client.getMergedBlockMeta("127.0.0.1", port, shuffle, merge, reduce,
        new MergedBlocksMetaListener() {
          @Override
          public void onSuccess(int shuffleId, int mergeId, int reduceId, MergedBlockMeta m) {
            try {
              RoaringBitmap[] read = m.readChunkBitmaps();
              if (read.length != m.getNumChunks()) {
                throw new IllegalStateException(read.length + " bitmaps for "
                    + m.getNumChunks() + " chunks");
              }
              meta.complete(read);
            } catch (Exception e) {
              meta.completeExceptionally(e);
            }
          }

          @Override
          public void onFailure(int shuffleId, int mergeId, int reduceId, Throwable e) {
            meta.completeExceptionally(e);
          }
        });
    RoaringBitmap[] bitmaps = meta.get(30, TimeUnit.SECONDS);
    String[] ids = new String[bitmaps.length];
    for (int c = 0; c < ids.length; c++) {
      ids[c] = "shuffleChunk_" + shuffle + "_" + merge + "_" + reduce + "_" + c;
    }
    Map<String, byte[]> fetched = Collections.synchronizedMap(new HashMap<>());
    CompletableFuture<Void> all = new CompletableFuture<>();
    client.fetchBlocks("127.0.0.1", port, "1", ids, new BlockFetchingListener() {
      @Override
      public void onBlockFetchSuccess(String blockId, ManagedBuffer buffer) {
        try {
          fetched.put(blockId, bytes(buffer));
        } catch (Exception e) {
          all.completeExceptionally(e);
        }
        if (fetched.size() == ids.length) all.complete(null);
      }

      @Override
      public void onBlockFetchFailure(String blockId, Throwable e) {
        all.completeExceptionally(e);
      }
    }, null);
    all.get(60, TimeUnit.SECONDS);
    List<Chunk> chunks = new ArrayList<>();
    for (int c = 0; c < ids.length; c++) chunks.add(new Chunk(bitmaps[c], fetched.get(ids[c])));
    return chunks;
  }

  // Which maps' blocks a merged partition holds, each checked whole: each chunk must be
  // the blocks of the maps its bitmap names, one after another in some order.
  static TreeSet<Integer> blocksIn(String who, List<Chunk> chunks, Map<Integer, byte[]> blocks) {
    TreeSet<Integer> seen = new TreeSet<>();
    for (int c = 0; c < chunks.size(); c++) {
      Chunk chunk = chunks.get(c);
      List<Integer> left = new ArrayList<>();
      for (int m : chunk.maps) left.add(m);
      int at = 0;
      while (!left.isEmpty()) {
        Integer found = null;
        for (Integer m : left) {
          byte[] b = blocks.get(m);
          if (b != null && at + b.length <= chunk.data.length
              && Arrays.equals(b, Arrays.copyOfRange(chunk.data, at, at + b.length))) {
            found = m;
            break;
          }
        }
        if (found == null) fail(who + ": chunk " + c + " at " + at + " is none of " + left);
        if (!seen.add(found)) fail(who + ": map " + found + " merged twice");
        at += blocks.get(found).length;
        left.remove(found);
      }
      if (at != chunk.data.length) {
        fail(who + ": chunk " + c + " holds " + chunk.data.length + " bytes, its maps " + at);
      }
    }
    return seen;
  }

  // Shuffle 3: many maps into a few partitions, sequentially. Returns the blocks pushed.
  int manyMaps(int shuffle) throws Exception {
    Random sizes = new Random(7);
    int pushed = 0;
    for (int map = 0; map < 12; map++) {
      for (int reduce = 0; reduce < 4; reduce++) {
        int size = (map + reduce) % 5 == 0 ? 1 : 1 + sizes.nextInt(1536 * 1024);
        String code = pushBoth(shuffle, 0, map, reduce, block(map * 1000L + reduce, size));
        if (!code.equals("ok")) fail("push of map " + map + " reduce " + reduce + ": " + code);
        pushed++;
      }
    }
    // A duplicate (a retried push): success on both, nothing written.
    pushBoth(shuffle, 0, 0, 0, block(0, 1));
    Map<Integer, String> statuses = finalizeBoth(shuffle, 0);
    // After the finalize: too late, on both.
    if (pushBoth(shuffle, 0, 20, 1, block(20001, 100)).equals("ok")) fail("a push after finalize");
    for (int reduce : statuses.keySet()) {
      sameFiles(shuffle, 0, reduce);
      // Spark's reduce-side client reads Ferry's chunk bitmaps and chunks.
      List<Chunk> chunks = readMerged(ferryPort, shuffle, 0, reduce);
      byte[] data =
          Files.readAllBytes(mergedFile(sparkRoot, shuffle, 0, reduce, "data").toPath());
      int at = 0;
      for (int c = 0; c < chunks.size(); c++) {
        byte[] chunk = chunks.get(c).data;
        if (!Arrays.equals(chunk, Arrays.copyOfRange(data, at, at + chunk.length))) {
          fail("reduce " + reduce + " chunk " + c + " differs from Spark's merged bytes at " + at);
        }
        at += chunk.length;
      }
      if (at != data.length) {
        fail("reduce " + reduce + ": chunks cover " + at + " of " + data.length + " bytes");
      }
    }
    return pushed;
  }

  // A pusher killed halfway through a block: an UploadStream as Spark's client encodes
  // it, half its body, and the connection closed.
  static void killedPush(int port, int shuffle, int map, int reduce, byte[] b) throws Exception {
    ByteBuffer meta = new PushBlockStream(APP, 1, shuffle, 0, map, reduce, 0).toByteBuffer();
    UploadStream upload = new UploadStream(1, new NioManagedBuffer(meta),
        new NioManagedBuffer(ByteBuffer.wrap(b)));
    ByteBuf frame = Unpooled.buffer();
    // MessageEncoder's header: the frame's length, the type, the message (the body is
    // not in the frame: it follows).
    frame.writeLong(8 + upload.type().encodedLength() + upload.encodedLength());
    upload.type().encode(frame);
    upload.encode(frame);
    try (Socket socket = new Socket("127.0.0.1", port)) {
      OutputStream out = socket.getOutputStream();
      byte[] header = new byte[frame.readableBytes()];
      frame.readBytes(header);
      out.write(header);
      out.write(b, 0, b.length / 2);
      out.flush();
    }
  }

  // Shuffle 4: the pushes after a killed one, the killed map's again first (a retried
  // task's). Each server has taken the killed push's bytes (its data file holds them)
  // before the pushes that follow, but may not yet know of the close; until it does, a
  // push may be answered "collision" (Spark's resolver) or wait (Ferry): a collision is
  // pushed again, at most 100 times. Ferry must merge every block whole. Spark's resolver
  // answers a push of the killed map that comes before it learns of the close as a
  // duplicate, "ok", and never merges it: then its files cannot be compared, and that is
  // reported. Returns 1 when Spark's resolver lost the block so, 0 when both are alike.
  int killedPusher(int shuffle) throws Exception {
    Map<Integer, byte[]> blocks = new HashMap<>();
    for (int map = 0; map < 4; map++) blocks.put(map, block(40000 + map, 1000 + map * 70000));
    byte[] cut = block(40100, 300 * 1024);
    blocks.put(0, cut);
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    for (int port : new int[] {sparkPort, ferryPort}) {
      killedPush(port, shuffle, 0, 0, cut);
      File data = mergedFile(port == ferryPort ? ferryRoot : sparkRoot, shuffle, 0, 0, "data");
      while (data.length() < cut.length / 2 && System.nanoTime() < until) Thread.sleep(10);
      if (data.length() < cut.length / 2) fail(data + " never took the killed push's bytes");
    }
    for (int map = 0; map < 4; map++) {
      for (int port : new int[] {sparkPort, ferryPort}) {
        String code = "none";
        for (int tries = 0; tries < 100; tries++) {
          code = push(client, port, shuffle, 0, map, 0, blocks.get(map));
          if (!code.equals("BLOCK_APPEND_COLLISION_DETECTED")) break;
          Thread.sleep(10);  // the server has not yet learned of the close: at most 1 s
        }
        if (!code.equals("ok")) {
          fail("push of map " + map + " after a killed pusher, to "
              + (port == ferryPort ? "Ferry: " : "Spark: ") + code);
        }
      }
    }
    MergeStatuses spark = finalizeMerge(client, sparkPort, shuffle, 0);
    MergeStatuses ferry = finalizeMerge(client, ferryPort, shuffle, 0);
    TreeSet<Integer> read = blocksIn("Ferry", readMerged(ferryPort, shuffle, 0, 0), blocks);
    if (!read.equals(new TreeSet<>(blocks.keySet()))) {
      fail("after a killed pusher Ferry's merged chunks hold " + read);
    }
    long whole = 0;
    for (byte[] b : blocks.values()) whole += b.length;
    if (ferry.bitmaps[0].getCardinality() != blocks.size() || ferry.sizes[0] != whole) {
      fail("after a killed pusher Ferry merged " + describe(ferry) + " of " + whole + " bytes");
    }
    if (spark.bitmaps[0].getCardinality() == blocks.size() && spark.sizes[0] == whole) {
      if (!describe(spark).equals(describe(ferry))) {
        fail("MergeStatuses: Spark " + describe(spark) + ", Ferry " + describe(ferry));
      }
      sameFiles(shuffle, 0, 0);
      return 0;
    }
    // Spark's resolver lost the killed map's block: it answered its push "ok" as a
    // duplicate before it learned of the close and never merged it, or it merged it
    // while the killed push's bytes were still counted (its size then short of the
    // blocks'). Anything else is not one of its known races.
    final boolean unmerged = !spark.bitmaps[0].contains(0)
        && spark.bitmaps[0].getCardinality() == blocks.size() - 1;
    final boolean shortMerge =
        spark.bitmaps[0].getCardinality() == blocks.size() && spark.sizes[0] < whole;
    if (!unmerged && !shortMerge) {
      fail("after a killed pusher Spark's resolver merged " + describe(spark) + " of " + whole
          + " bytes");
    }
    return 1;
  }

  // Shuffle 5: a newer merge id (a retried stage) replaces the older merge.
  void newerMergeId(int shuffle) throws Exception {
    for (int map = 0; map < 4; map++) {
      for (int reduce = 0; reduce < 2; reduce++) {
        pushBoth(shuffle, 0, map, reduce, block(50000 + map * 10 + reduce, 5000 + map * 3000));
      }
    }
    for (int map = 0; map < 4; map++) {
      for (int reduce = 0; reduce < 2; reduce++) {
        String code =
            pushBoth(shuffle, 1, map, reduce, block(51000 + map * 10 + reduce, 7000 + map * 100));
        if (!code.equals("ok")) fail("push to the newer merge id: " + code);
      }
    }
    String stale = pushBoth(shuffle, 0, 5, 0, block(50500, 100));
    if (stale.equals("ok")) fail("a push of the older merge id was merged");
    // Spark deletes the older merge's files on its cleaner thread: wait for them, at most
    // 30 s, on both.
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    for (String root : new String[] {sparkRoot, ferryRoot}) {
      for (int reduce = 0; reduce < 2; reduce++) {
        for (String suffix : new String[] {"data", "index", "meta"}) {
          File old = mergedFile(root, shuffle, 0, reduce, suffix);
          while (old.exists() && System.nanoTime() < until) Thread.sleep(20);
          if (old.exists()) fail(old + " outlived a newer merge id");
        }
      }
    }
    boolean sparkRefused = false;
    boolean ferryRefused = false;
    try {
      finalizeMerge(client, sparkPort, shuffle, 0);
    } catch (Exception e) {
      sparkRefused = true;
    }
    try {
      finalizeMerge(client, ferryPort, shuffle, 0);
    } catch (Exception e) {
      ferryRefused = true;
    }
    if (!sparkRefused || !ferryRefused) {
      fail("finalize of the older merge id: Spark refused " + sparkRefused + ", Ferry refused "
          + ferryRefused);
    }
    Map<Integer, String> statuses = finalizeBoth(shuffle, 1);
    for (int reduce : statuses.keySet()) sameFiles(shuffle, 1, reduce);
  }

  // Shuffle 6: pushers on connections of their own, all into one partition at once.
  // Returns how many of Spark's answers were collisions.
  int concurrentPushers(int shuffle) throws Exception {
    final int pushers = 6;
    final int mapsEach = 4;
    Map<Integer, byte[]> blocks = new HashMap<>();
    Random sizes = new Random(11);
    for (int map = 0; map < pushers * mapsEach; map++) {
      blocks.put(map, block(60000 + map, 64 + sizes.nextInt(600 * 1024)));
    }
    Map<Integer, TreeSet<Integer>> merged = new HashMap<>();
    int collisions = 0;
    ExecutorService pool = Executors.newFixedThreadPool(pushers);
    for (int port : new int[] {sparkPort, ferryPort}) {
      String who = port == ferryPort ? "Ferry" : "Spark";
      List<Future<Map<Integer, String>>> done = new ArrayList<>();
      for (int p = 0; p < pushers; p++) {
        final int first = p * mapsEach;
        done.add(pool.submit(() -> {
          ExternalBlockStoreClient own = newClient();
          Map<Integer, String> codes = new HashMap<>();
          try {
            for (int map = first; map < first + mapsEach; map++) {
              codes.put(map, push(own, port, shuffle, 0, map, 0, blocks.get(map)));
            }
          } finally {
            own.close();
          }
          return codes;
        }));
      }
      TreeSet<Integer> ok = new TreeSet<>();
      for (Future<Map<Integer, String>> f : done) {
        for (Map.Entry<Integer, String> e : f.get(120, TimeUnit.SECONDS).entrySet()) {
          if (e.getValue().equals("ok")) {
            ok.add(e.getKey());
          } else if (port == sparkPort && e.getValue().equals("BLOCK_APPEND_COLLISION_DETECTED")) {
            collisions++;
          } else {
            fail(who + " answered map " + e.getKey() + " with " + e.getValue());
          }
        }
      }
      MergeStatuses statuses = finalizeMerge(client, port, shuffle, 0);
      TreeSet<Integer> finalized = new TreeSet<>();
      for (int m : statuses.bitmaps[0]) finalized.add(m);
      if (!finalized.equals(ok)) fail(who + " merged " + finalized + ", answered ok " + ok);
      TreeSet<Integer> read = blocksIn(who, readMerged(port, shuffle, 0, 0), blocks);
      if (!read.equals(ok)) fail(who + "'s merged chunks hold " + read + ", answered ok " + ok);
      merged.put(port, ok);
    }
    pool.shutdown();
    if (merged.get(ferryPort).size() != blocks.size()) {
      fail("Ferry merged " + merged.get(ferryPort).size() + " of " + blocks.size() + " blocks");
    }
    return collisions;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: PushDiff <ferry-port> <ferry-root> <spark-root> <min-chunk>");
      System.exit(2);
    }
    Map<String, String> settings = new HashMap<>();
    settings.put("spark.shuffle.push.server.minChunkSizeInMergedShuffleFile", args[3]);
    TransportConf conf = new TransportConf("shuffle", new MapConfigProvider(settings));
    RemoteBlockPushResolver resolver = new RemoteBlockPushResolver(conf, null);
    ExternalBlockHandler handler = new ExternalBlockHandler(new OneForOneStreamManager(),
        new ExternalShuffleBlockResolver(conf, null), resolver);
    TransportContext context = new TransportContext(conf, handler);
    TransportServer server = context.createServer("127.0.0.1", 0, Collections.emptyList());
    PushDiff diff =
        new PushDiff(Integer.parseInt(args[0]), server.getPort(), args[1], args[2], conf);
    diff.client.registerWithShuffleServer("127.0.0.1", diff.ferryPort, "1",
        new ExecutorShuffleInfo(localDirs(args[1]), SUB_DIRS, MANAGER));
    diff.client.registerWithShuffleServer("127.0.0.1", diff.sparkPort, "1",
        new ExecutorShuffleInfo(localDirs(args[2]), SUB_DIRS, MANAGER));

    int pushed = diff.manyMaps(3);
    int lost = diff.killedPusher(4);
    diff.newerMergeId(5);
    int collisions = diff.concurrentPushers(6);
    System.out.println("OK " + pushed + " blocks pushed alike; after a killed pusher "
        + (lost == 0 ? "alike" : "Ferry merged all, Spark's resolver lost the killed map's "
            + "block (answered a duplicate, or merged short)")
        + "; a newer merge id alike; concurrent pushers: Ferry merged all, Spark's resolver "
        + "answered " + collisions + " collisions");
    diff.client.close();
    server.close();
    context.close();
    System.exit(0);
  }
}
