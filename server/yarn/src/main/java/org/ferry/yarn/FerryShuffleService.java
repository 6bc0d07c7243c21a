package org.ferry.yarn;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.apache.hadoop.yarn.server.api.AuxiliaryService;
import org.apache.hadoop.yarn.server.api.ContainerInitializationContext;
import org.apache.hadoop.yarn.server.api.ContainerTerminationContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The NodeManager's {@code spark_shuffle} auxiliary service when ferry_server is the node's
 * shuffle service. It serves no shuffle data: ferry_server does, on
 * {@code spark.shuffle.service.port}. It hands ferry_server what only the NodeManager knows,
 * through files in a directory both share ({@code ferry.yarn.dir} here,
 * {@code --spark-yarn-dir} there; {@link HandOff} and docs/spark.md say what and how).
 *
 * <p>A shuffle service must not take a node's containers down with it: as Spark's own
 * ({@code spark.yarn.shuffle.stopOnFailure=false}), a configuration or disk it cannot use is
 * logged and the NodeManager goes on ({@code ferry.yarn.stop-on-failure=true} makes
 * {@code serviceInit} throw instead).
 */
public class FerryShuffleService extends AuxiliaryService {
  private static final Logger LOG = LoggerFactory.getLogger(FerryShuffleService.class);

  static final String DIR_KEY = "ferry.yarn.dir";
  static final String RETRY_INTERVAL_KEY = "ferry.yarn.retry-interval-ms";
  static final String RETRY_TIMEOUT_KEY = "ferry.yarn.retry-timeout-ms";
  static final String MAX_PENDING_KEY = "ferry.yarn.max-pending";
  static final String STOPPED_RETENTION_KEY = "ferry.yarn.stopped-retention-ms";
  static final String STOP_ON_FAILURE_KEY = "ferry.yarn.stop-on-failure";
  static final String LOCAL_DIRS_KEY = "yarn.nodemanager.local-dirs";

  private HandOff handOff;  // null: not configured, nothing is handed over

  public FerryShuffleService() {
    super("spark_shuffle");
  }

  @Override
  protected void serviceInit(Configuration conf) throws Exception {
    String dir = conf.getTrimmed(DIR_KEY, "");
    Path root = dir.isEmpty() ? null : Paths.get(dir);
    if (root == null || !root.isAbsolute()) {
      String problem = DIR_KEY + (dir.isEmpty() ? " is not set" : " " + dir + " is not absolute")
          + ": it must name the directory ferry_server's --spark-yarn-dir names";
      if (conf.getBoolean(STOP_ON_FAILURE_KEY, false)) throw new IllegalArgumentException(problem);
      LOG.error("{}; nothing is handed to ferry_server, so Spark applications that authenticate "
          + "cannot use it on this node", problem);
      super.serviceInit(conf);
      return;
    }
    handOff = new HandOff(root, Math.max(10, conf.getLong(RETRY_INTERVAL_KEY, 1000)),
        Math.max(0, conf.getLong(RETRY_TIMEOUT_KEY, 600_000)),
        Math.max(1, conf.getInt(MAX_PENDING_KEY, 10_000)),
        Math.max(0, conf.getLong(STOPPED_RETENTION_KEY, 3_600_000)));
    handOff.start();
    if (!handOff.ready() && conf.getBoolean(STOP_ON_FAILURE_KEY, false)) {
      throw new IllegalStateException("cannot make " + DIR_KEY + " " + root);
    }
    List<String> localDirs = new ArrayList<>();
    for (String d : conf.getTrimmedStrings(LOCAL_DIRS_KEY)) {
      // The NodeManager takes its local dirs as paths or file: URIs.
      localDirs.add(new org.apache.hadoop.fs.Path(d).toUri().getPath());
    }
    handOff.localDirs(localDirs);
    LOG.info("Ferry's spark_shuffle service: application secrets and ends go to {} for "
        + "ferry_server; NodeManager local dirs {}", root, localDirs);
    super.serviceInit(conf);
  }

  @Override
  protected void serviceStop() throws Exception {
    if (handOff != null) handOff.stop();
    super.serviceStop();
  }

  @Override
  public void initializeApplication(ApplicationInitializationContext context) {
    final String appId = context.getApplicationId().toString();
    ByteBuffer data = context.getApplicationDataForService();
    final byte[] bytes;
    if (data == null) {
      bytes = new byte[0];
    } else {
      ByteBuffer copy = data.duplicate();
      bytes = new byte[copy.remaining()];
      copy.get(bytes);
    }
    LOG.info("Application {} started on this node ({} bytes of service data)", appId,
        bytes.length);
    if (handOff != null) handOff.started(appId, bytes);
  }

  @Override
  public void stopApplication(ApplicationTerminationContext context) {
    final String appId = context.getApplicationId().toString();
    LOG.info("Application {} stopped on this node", appId);
    if (handOff != null) handOff.stopped(appId);
  }

  @Override
  public void initializeContainer(ContainerInitializationContext context) {
    LOG.info("Container {} of application {} initialized", context.getContainerId(),
        context.getContainerId().getApplicationAttemptId().getApplicationId());
  }

  @Override
  public void stopContainer(ContainerTerminationContext context) {
    LOG.info("Container {} of application {} stopped", context.getContainerId(),
        context.getContainerId().getApplicationAttemptId().getApplicationId());
  }

  @Override
  public ByteBuffer getMetaData() {
    return ByteBuffer.allocate(0);
  }
}
