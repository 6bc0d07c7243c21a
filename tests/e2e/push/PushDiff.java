/*
 * The same pushes into ferry_server and into Spark 3.5.0's own RemoteBlockPushResolver
 * (behind ExternalBlockHandler and TransportServer, as a NodeManager hosts it), both
 * driven by Spark's own push client (ExternalBlockStoreClient, OneForOneBlockPusher);
 * then the same finalize, and Spark's own reduce-side client reading ferry_server's
 * merged chunks and bitmaps. Exits 0 when everything agrees, 1 naming the first
 * difference, 2 on bad usage.
 *
 *   PushDiff <ferry-port> <ferry-root> <spark-root> <min-chunk-bytes>
 *
 * Each root gets an executor's two local dirs (local<k>/blockmgr-1) and their merge
 * dirs (local<k>/merge_manager_1/<00..3f>), as DiskBlockManager makes them.
 */
package ferry.pushdiff;

import java.io.File;
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
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.spark.network.TransportContext;
import org.apache.spark.network.buffer.ManagedBuffer;
import org.apache.spark.network.buffer.NioManagedBuffer;
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
import org.apache.spark.network.util.MapConfigProvider;
import org.apache.spark.network.util.TransportConf;
import org.roaringbitmap.RoaringBitmap;

public final class PushDiff {
  static final String APP = "app-20261205000000-0001";
  static final int SHUFFLE = 3;
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

  static byte[] block(int map, int reduce, int size) {
    byte[] b = new byte[size];
    new Random(map * 1000L + reduce).nextBytes(b);
    return b;
  }

  static byte[] bytes(ManagedBuffer buffer) throws Exception {
    ByteBuffer nio = buffer.nioByteBuffer();
    byte[] out = new byte[nio.remaining()];
    nio.get(out);
    return out;
  }

  // A push's outcome: "ok", or the return code of a non-fatal failure, or the error.
  static String push(ExternalBlockStoreClient client, int port, int map, int reduce, byte[] b)
      throws Exception {
    CompletableFuture<String> done = new CompletableFuture<>();
    String id = "shufflePush_" + SHUFFLE + "_0_" + map + "_" + reduce;
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

  static MergeStatuses finalizeMerge(ExternalBlockStoreClient client, int port) throws Exception {
    CompletableFuture<MergeStatuses> done = new CompletableFuture<>();
    client.finalizeShuffleMerge("127.0.0.1", port, SHUFFLE, 0, new MergeFinalizerListener() {
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

  static void fail(String what) {
    System.out.println("DIFF: " + what);
    System.exit(1);
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: PushDiff <ferry-port> <ferry-root> <spark-root> <min-chunk>");
      System.exit(2);
    }
    int ferryPort = Integer.parseInt(args[0]);
    Map<String, String> settings = new HashMap<>();
    settings.put("spark.shuffle.push.server.minChunkSizeInMergedShuffleFile", args[3]);
    TransportConf conf = new TransportConf("shuffle", new MapConfigProvider(settings));
    RemoteBlockPushResolver resolver = new RemoteBlockPushResolver(conf, null);
    ExternalBlockHandler handler = new ExternalBlockHandler(new OneForOneStreamManager(),
        new ExternalShuffleBlockResolver(conf, null), resolver);
    TransportContext context = new TransportContext(conf, handler);
    TransportServer server = context.createServer("127.0.0.1", 0, Collections.emptyList());
    int sparkPort = server.getPort();

    ExternalBlockStoreClient client = new ExternalBlockStoreClient(conf, null, false, 10000);
    client.init(APP);
    client.setAppAttemptId("1");
    client.registerWithShuffleServer("127.0.0.1", ferryPort, "1",
        new ExecutorShuffleInfo(localDirs(args[1]), SUB_DIRS, MANAGER));
    client.registerWithShuffleServer("127.0.0.1", sparkPort, "1",
        new ExecutorShuffleInfo(localDirs(args[2]), SUB_DIRS, MANAGER));

    // Blocks of 12 maps into 4 partitions, from a byte to 1.5 MiB, each pushed to Spark's
    // resolver and then to Ferry: the same order, so the same merged bytes.
    Random sizes = new Random(7);
    int pushed = 0;
    for (int map = 0; map < 12; map++) {
      for (int reduce = 0; reduce < 4; reduce++) {
        int size = (map + reduce) % 5 == 0 ? 1 : 1 + sizes.nextInt(1536 * 1024);
        byte[] b = block(map, reduce, size);
        String spark = push(client, sparkPort, map, reduce, b);
        String ferry = push(client, ferryPort, map, reduce, b);
        if (!spark.equals("ok") || !ferry.equals(spark)) {
          fail("push of map " + map + " reduce " + reduce + ": Spark " + spark + ", Ferry " + ferry);
        }
        pushed++;
      }
    }
    // A duplicate (a retried push): success on both, nothing written.
    byte[] again = block(0, 0, 1);
    String spark = push(client, sparkPort, 0, 0, again);
    String ferry = push(client, ferryPort, 0, 0, again);
    if (!spark.equals(ferry)) fail("duplicate push: Spark " + spark + ", Ferry " + ferry);

    Map<Integer, String> sparkStatuses = describe(finalizeMerge(client, sparkPort));
    Map<Integer, String> ferryStatuses = describe(finalizeMerge(client, ferryPort));
    if (!sparkStatuses.equals(ferryStatuses)) {
      fail("MergeStatuses: Spark " + sparkStatuses + ", Ferry " + ferryStatuses);
    }
    // After the finalize: too late, on both.
    spark = push(client, sparkPort, 20, 1, block(20, 1, 100));
    ferry = push(client, ferryPort, 20, 1, block(20, 1, 100));
    if (!spark.equals(ferry) || spark.equals("ok")) {
      fail("push after finalize: Spark " + spark + ", Ferry " + ferry);
    }

    // The merged files, byte for byte.
    int chunks = 0;
    for (int reduce : sparkStatuses.keySet()) {
      for (String suffix : new String[] {"data", "index", "meta"}) {
        String name = "shuffleMerged_" + APP + "_" + SHUFFLE + "_0_" + reduce + "." + suffix;
        byte[] s = Files.readAllBytes(
            new File(ExecutorDiskUtils.getFilePath(mergeDirs(args[2]), SUB_DIRS, name)).toPath());
        byte[] f = Files.readAllBytes(
            new File(ExecutorDiskUtils.getFilePath(mergeDirs(args[1]), SUB_DIRS, name)).toPath());
        if (!Arrays.equals(s, f)) {
          fail(name + ": Spark's " + s.length + " bytes, Ferry's " + f.length);
        }
      }
      // Spark's reduce-side client reads Ferry's chunk bitmaps and chunks.
      // The bitmaps are read in the callback: the buffer is released after it.
      CompletableFuture<RoaringBitmap[]> meta = new CompletableFuture<>();
      client.getMergedBlockMeta("127.0.0.1", ferryPort, SHUFFLE, 0, reduce,
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
      String dataName = "shuffleMerged_" + APP + "_" + SHUFFLE + "_0_" + reduce + ".data";
      byte[] data = Files.readAllBytes(new File(
          ExecutorDiskUtils.getFilePath(mergeDirs(args[2]), SUB_DIRS, dataName)).toPath());
      String[] ids = new String[bitmaps.length];
      for (int c = 0; c < ids.length; c++) {
        ids[c] = "shuffleChunk_" + SHUFFLE + "_0_" + reduce + "_" + c;
      }
      Map<String, byte[]> fetched = Collections.synchronizedMap(new HashMap<>());
      CompletableFuture<Void> all = new CompletableFuture<>();
      client.fetchBlocks("127.0.0.1", ferryPort, "1", ids, new BlockFetchingListener() {
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
      int at = 0;
      for (int c = 0; c < ids.length; c++) {
        byte[] chunk = fetched.get(ids[c]);
        if (!Arrays.equals(chunk, Arrays.copyOfRange(data, at, at + chunk.length))) {
          fail(ids[c] + " differs from Spark's merged bytes at " + at);
        }
        at += chunk.length;
      }
      if (at != data.length || bitmaps.length != ids.length) {
        fail("reduce " + reduce + ": chunks cover " + at + " of " + data.length + " bytes, "
            + bitmaps.length + " bitmaps for " + ids.length + " chunks");
      }
      chunks += ids.length;
    }
    System.out.println("OK " + pushed + " blocks pushed, " + sparkStatuses.size()
        + " partitions and " + chunks + " chunks alike");
    client.close();
    server.close();
    context.close();
    System.exit(0);
  }
}
