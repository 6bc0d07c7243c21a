package org.ferry.yarn;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.regex.Pattern;

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
 * {@code --spark-yarn-dir} there; docs/spark.md):
 *
 * <ul>
 *   <li>{@code apps/<application id>}: the service data the application's containers carry for
 *       this service, exactly as the NodeManager handed them over (Spark's secret of the
 *       application, or its JSON payload; empty without spark.authenticate), written when the
 *       application starts on this node; mode 0640.
 *   <li>{@code stopped/<application id>}: an empty marker written when the application ends;
 *       ferry_server then forgets the application's registrations and removes both files.
 *   <li>{@code nodemanager-local-dirs}: the NodeManager's local dirs, one per line, which
 *       ferry_server takes as its roots when it is given none.
 * </ul>
 *
 * Each file is written to a temporary name, synced and renamed, so ferry_server never reads a
 * partial one; they outlive both processes, so neither a ferry_server that is down or
 * restarting nor a NodeManager restart (with or without recovery) loses an application's
 * secret or its end. Nothing crosses the network. A write that fails (a full or failing disk)
 * never fails the NodeManager's call: it is queued, in order, and retried every
 * {@code ferry.yarn.retry-interval-ms} until {@code ferry.yarn.retry-timeout-ms}, at most
 * {@code ferry.yarn.max-pending} writes at once, each step said in the NodeManager's log.
 * Secrets are never logged.
 */
public class FerryShuffleService extends AuxiliaryService {
  private static final Logger LOG = LoggerFactory.getLogger(FerryShuffleService.class);

  static final String DIR_KEY = "ferry.yarn.dir";
  static final String RETRY_INTERVAL_KEY = "ferry.yarn.retry-interval-ms";
  static final String RETRY_TIMEOUT_KEY = "ferry.yarn.retry-timeout-ms";
  static final String MAX_PENDING_KEY = "ferry.yarn.max-pending";
  static final String LOCAL_DIRS_KEY = "yarn.nodemanager.local-dirs";

  // What ferry_server accepts as an application id (a file name); YARN's are
  // application_<cluster timestamp>_<sequence>.
  private static final Pattern APP_ID = Pattern.compile("[A-Za-z0-9._-]{1,255}");

  private Path apps;
  private Path stopped;
  private long retryIntervalMs;
  private long retryTimeoutMs;
  private int maxPending;

  /** A write that failed, waiting for its retry; writes run in the order they were asked. */
  private static final class Pending {
    final String what;
    final IoAction action;
    final long firstTriedMs;

    Pending(String what, IoAction action, long firstTriedMs) {
      this.what = what;
      this.action = action;
      this.firstTriedMs = firstTriedMs;
    }
  }

  private interface IoAction {
    void run() throws IOException;
  }

  private final Object lock = new Object();
  private final ArrayDeque<Pending> pending = new ArrayDeque<>();
  private Thread retrier;
  private boolean stopping;

  public FerryShuffleService() {
    super("spark_shuffle");
  }

  @Override
  protected void serviceInit(Configuration conf) throws Exception {
    String dir = conf.getTrimmed(DIR_KEY, "");
    if (dir.isEmpty()) {
      throw new IllegalArgumentException(
          DIR_KEY + " is not set: it must name the directory ferry_server's --spark-yarn-dir names");
    }
    Path root = Paths.get(dir);
    if (!root.isAbsolute()) {
      throw new IllegalArgumentException(DIR_KEY + " " + dir + " is not an absolute path");
    }
    retryIntervalMs = Math.max(10, conf.getLong(RETRY_INTERVAL_KEY, 1000));
    retryTimeoutMs = Math.max(0, conf.getLong(RETRY_TIMEOUT_KEY, 600_000));
    maxPending = Math.max(1, conf.getInt(MAX_PENDING_KEY, 10_000));
    apps = root.resolve("apps");
    stopped = root.resolve("stopped");
    for (Path p : new Path[] {root, apps, stopped}) {
      if (!Files.isDirectory(p)) {
        Files.createDirectories(p, PosixFilePermissions.asFileAttribute(
            PosixFilePermissions.fromString("rwxr-x---")));
      }
    }
    List<String> localDirs = new ArrayList<>();
    for (String d : conf.getTrimmedStrings(LOCAL_DIRS_KEY)) {
      // The NodeManager takes its local dirs as paths or file: URIs.
      localDirs.add(new org.apache.hadoop.fs.Path(d).toUri().getPath());
    }
    StringBuilder lines = new StringBuilder();
    for (String d : localDirs) lines.append(d).append('\n');
    final byte[] dirsFile = lines.toString().getBytes(StandardCharsets.UTF_8);
    perform("the NodeManager's local dirs",
        () -> writeFile(root, "nodemanager-local-dirs", dirsFile));
    LOG.info("Ferry's spark_shuffle service: application secrets and ends go to {} for "
        + "ferry_server; NodeManager local dirs {}", root, localDirs);
    super.serviceInit(conf);
  }

  @Override
  protected void serviceStop() throws Exception {
    Thread t;
    synchronized (lock) {
      stopping = true;
      lock.notifyAll();
      t = retrier;
      if (!pending.isEmpty()) {
        LOG.error("Stopping with {} writes for ferry_server not done (first: {}); ferry_server "
            + "removes an ended application's registrations once its local dirs are gone",
            pending.size(), pending.peekFirst().what);
      }
    }
    if (t != null) t.join(5000);
    super.serviceStop();
  }

  @Override
  public void initializeApplication(ApplicationInitializationContext context) {
    final String appId = context.getApplicationId().toString();
    if (!APP_ID.matcher(appId).matches()) {
      LOG.error("Application id {} is not a file name; not handed to ferry_server", appId);
      return;
    }
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
    perform("the start of application " + appId, () -> writeFile(apps, appId, bytes));
  }

  @Override
  public void stopApplication(ApplicationTerminationContext context) {
    final String appId = context.getApplicationId().toString();
    if (!APP_ID.matcher(appId).matches()) return;
    LOG.info("Application {} stopped on this node", appId);
    // The marker first: ferry_server removes the application's file when it sees it, so a
    // crash between the two leaves nothing behind.
    perform("the end of application " + appId, () -> {
      writeFile(stopped, appId, new byte[0]);
      Files.deleteIfExists(apps.resolve(appId));
      syncDir(apps);
    });
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

  /** Runs `action` now if nothing waits before it; queues it for retries if that fails. */
  private void perform(String what, IoAction action) {
    synchronized (lock) {
      if (pending.isEmpty()) {
        try {
          action.run();
          return;
        } catch (IOException e) {
          LOG.warn("Could not write {} for ferry_server ({}); retrying every {} ms for up to {} ms",
              what, e.toString(), retryIntervalMs, retryTimeoutMs);
        }
      }
      if (pending.size() >= maxPending) {
        LOG.error("Dropped {}: {} writes for ferry_server already wait ({})", what,
            pending.size(), MAX_PENDING_KEY);
        return;
      }
      pending.addLast(new Pending(what, action, System.currentTimeMillis()));
      if (retrier == null) {
        retrier = new Thread(this::retryLoop, "ferry-yarn-retry");
        retrier.setDaemon(true);
        retrier.start();
      }
      lock.notifyAll();
    }
  }

  private void retryLoop() {
    synchronized (lock) {
      while (!stopping) {
        Pending p = pending.peekFirst();
        if (p == null) {
          try {
            lock.wait();
          } catch (InterruptedException e) {
            return;
          }
          continue;
        }
        try {
          lock.wait(retryIntervalMs);
        } catch (InterruptedException e) {
          return;
        }
        if (stopping) return;
        try {
          p.action.run();
          pending.removeFirst();
          LOG.info("Wrote {} for ferry_server after retrying ({} still waiting)", p.what,
              pending.size());
        } catch (IOException e) {
          if (System.currentTimeMillis() - p.firstTriedMs >= retryTimeoutMs) {
            pending.removeFirst();
            LOG.error("Gave up writing {} for ferry_server after {} ms: {}", p.what,
                retryTimeoutMs, e.toString());
          } else {
            LOG.warn("Still cannot write {} for ferry_server: {}", p.what, e.toString());
          }
        }
      }
    }
  }

  /** Writes dir/name whole: a temporary file, synced, renamed over it, the dir synced. */
  private static void writeFile(Path dir, String name, byte[] bytes) throws IOException {
    Path tmp = dir.resolve("." + name + ".tmp");
    Files.deleteIfExists(tmp);
    try (FileChannel ch = FileChannel.open(tmp,
        EnumSet.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE),
        PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-r-----")))) {
      ByteBuffer b = ByteBuffer.wrap(bytes);
      while (b.hasRemaining()) ch.write(b);
      ch.force(true);
    }
    try {
      Files.move(tmp, dir.resolve(name), StandardCopyOption.ATOMIC_MOVE,
          StandardCopyOption.REPLACE_EXISTING);
    } catch (AtomicMoveNotSupportedException e) {
      Files.deleteIfExists(tmp);
      throw e;
    }
    syncDir(dir);
  }

  private static void syncDir(Path dir) throws IOException {
    try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
      ch.force(true);
    }
  }
}
