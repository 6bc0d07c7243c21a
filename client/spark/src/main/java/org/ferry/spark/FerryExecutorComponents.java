package org.ferry.spark;

import java.io.IOException;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.shuffle.api.ShuffleExecutorComponents;
import org.apache.spark.shuffle.api.ShuffleMapOutputWriter;
import org.apache.spark.shuffle.api.ShufflePartitionWriter;
import org.apache.spark.shuffle.api.SingleSpillShuffleMapOutputWriter;
import org.apache.spark.shuffle.api.metadata.MapOutputCommitMessage;
import org.apache.spark.shuffle.sort.io.LocalDiskShuffleExecutorComponents;
import org.apache.spark.storage.BlockManager;
import org.apache.spark.storage.BlockManagerId$;

import scala.Option;

/**
 * An executor's side: Spark's own local-disk writers, whose committed map outputs are then
 * linked into dirs ferry_server keeps (FerryDirs). At its first map task (Spark makes these
 * components then) it registers those dirs with the node's ferry_server (FerryRegistration;
 * if it cannot, the map task fails with the reason and the dirs go), and names that ferry_server as its map outputs' location, so that
 * reducers fetch them there with Spark's own client.
 *
 * The node's ferry_server is at {@code spark.ferry.node.host} (default: the environment's
 * {@code FERRY_NODE_HOST}, which a pod sets from {@code status.hostIP}; else the executor's own
 * host) and {@code spark.shuffle.service.port}.
 */
final class FerryExecutorComponents implements ShuffleExecutorComponents {
  static final String NODE_HOST_KEY = "spark.ferry.node.host";
  static final String NODE_HOST_ENV = "FERRY_NODE_HOST";

  private final SparkConf conf;
  private final LocalDiskShuffleExecutorComponents local;
  private final String checksumAlgorithm;  // null without checksums
  private FerryDirs dirs;

  FerryExecutorComponents(SparkConf conf) {
    this.conf = conf;
    local = new LocalDiskShuffleExecutorComponents(conf);
    checksumAlgorithm = conf.getBoolean("spark.shuffle.checksum.enabled", true)
        ? conf.get("spark.shuffle.checksum.algorithm", "ADLER32")
        : null;
  }

  @Override
  public void initializeExecutor(String appId, String execId, Map<String, String> extraConfigs) {
    local.initializeExecutor(appId, execId, extraConfigs);
    BlockManager blockManager = SparkEnv.get().blockManager();
    String ownHost = blockManager.blockManagerId().host();
    String host = nodeHost(conf, System.getenv(NODE_HOST_ENV), ownHost);
    int port = conf.getInt("spark.shuffle.service.port", 7337);
    if (host.equals(ownHost) && conf.getBoolean("spark.shuffle.readHostLocalDisk", true)) {
      throw new IllegalStateException("Ferry's shuffle plugin: set spark.shuffle.readHostLocalDisk="
          + "false (reducers on " + host + " would look for map outputs in other executors'"
          + " own dirs, which go with them)");
    }
    dirs = new FerryDirs(blockManager.diskBlockManager().localDirs(),
        blockManager.diskBlockManager().subDirsPerLocalDir(), appId, execId);
    try {
      dirs.make();
    } catch (IOException e) {
      throw new IllegalStateException("Ferry's shuffle plugin: " + e.getMessage(), e);
    }
    try {
      FerryRegistration.register(conf, SparkEnv.get().securityManager(), appId, execId, host,
          port, dirs.paths(), blockManager.diskBlockManager().subDirsPerLocalDir());
    } catch (IllegalStateException e) {
      dirs.unmake();  // empty: nothing of this executor's is kept where nothing serves it
      throw e;
    }
    // What each map status names as where its output is served (the field Spark keeps for
    // its own shuffle service's address).
    blockManager.shuffleServerId_$eq(
        BlockManagerId$.MODULE$.apply(execId, host, port, Option.<String>empty()));
  }

  /** The node's ferry_server's host: the setting, else the environment, else `ownHost`. */
  static String nodeHost(SparkConf conf, String fromEnv, String ownHost) {
    String set = conf.get(NODE_HOST_KEY, "");
    if (!set.isEmpty()) return set;
    if (fromEnv != null && !fromEnv.isEmpty()) return fromEnv;
    return ownHost;
  }

  @Override
  public ShuffleMapOutputWriter createMapOutputWriter(
      int shuffleId, long mapTaskId, int numPartitions) throws IOException {
    ShuffleMapOutputWriter writer = local.createMapOutputWriter(shuffleId, mapTaskId, numPartitions);
    return new ShuffleMapOutputWriter() {
      @Override
      public ShufflePartitionWriter getPartitionWriter(int partition) throws IOException {
        return writer.getPartitionWriter(partition);
      }

      @Override
      public MapOutputCommitMessage commitAllPartitions(long[] checksums) throws IOException {
        MapOutputCommitMessage committed = writer.commitAllPartitions(checksums);
        dirs.keep(shuffleId, mapTaskId, checksumAlgorithm);
        return committed;
      }

      @Override
      public void abort(Throwable error) throws IOException {
        writer.abort(error);
      }
    };
  }

  @Override
  public Optional<SingleSpillShuffleMapOutputWriter> createSingleFileMapOutputWriter(
      int shuffleId, long mapId) throws IOException {
    Optional<SingleSpillShuffleMapOutputWriter> single =
        local.createSingleFileMapOutputWriter(shuffleId, mapId);
    return single.map(writer -> (spill, lengths, checksums) -> {
      writer.transferMapSpillFile(spill, lengths, checksums);
      dirs.keep(shuffleId, mapId, checksumAlgorithm);
    });
  }
}
