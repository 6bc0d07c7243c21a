package org.ferry.yarn;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The hand-off dir as the NodeManager's side writes it (docs/spark.md, "YARN"): {@code
 * apps/<id>} at an application's start, {@code stopped/<id>} at its end, {@code
 * nodemanager-local-dirs} at the NodeManager's start. This side alone writes and deletes there:
 * ferry_server only reads, so the two may run as different users (ferry_server in the
 * NodeManager user's group).
 *
 * <ul>
 *   <li>Modes are set explicitly (dirs 0750, files 0640), whatever the NodeManager's umask.
 *   <li>Each file is written to a temporary name, synced, renamed, the dir synced.
 *   <li>A write that fails is kept for retries, at most one per file (a newer write of the same
 *       file replaces it: an application's end replaces its start), at most {@code maxPending}
 *       in all, every {@code retryIntervalMs} for up to {@code retryTimeoutMs}. A new write is
 *       always tried at once, whatever waits: one bad write never delays another.
 *   <li>A dir that cannot be made at start is made later, by the same retries.
 *   <li>Service data past {@link #MAX_SERVICE_DATA_BYTES} (what ferry_server reads) is not
 *       written.
 *   <li>{@code stopped/<id>} is deleted {@code stoppedRetentionMs} after it was written: by then
 *       a running ferry_server (which looks every few seconds) has handled it, and one that was
 *       down longer forgets the application when YARN deletes its dirs.
 * </ul>
 *
 * Secrets are never logged. Thread-safe.
 */
final class HandOff {
  private static final Logger LOG = LoggerFactory.getLogger(HandOff.class);

  static final int MAX_SERVICE_DATA_BYTES = 64 * 1024;
  static final String LOCAL_DIRS_FILE = "nodemanager-local-dirs";
  private static final Set<PosixFilePermission> DIR_MODE =
      PosixFilePermissions.fromString("rwxr-x---");
  private static final Set<PosixFilePermission> FILE_MODE =
      PosixFilePermissions.fromString("rw-r-----");

  private interface IoAction {
    void run() throws IOException;
  }

  /** A write that failed, waiting for its retry. */
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

  private final Path root;
  private final Path apps;
  private final Path stopped;
  private final long retryIntervalMs;
  private final long retryTimeoutMs;
  private final int maxPending;
  private final long stoppedRetentionMs;

  // Every write and delete, so that two of one file never interleave.
  private final Object io = new Object();
  // The queue; never held while writing.
  private final Object lock = new Object();
  private final Map<String, Pending> pending = new LinkedHashMap<>();
  private volatile boolean ready;
  private boolean closing;
  private Thread worker;
  private long lastPruneMs;

  HandOff(Path root, long retryIntervalMs, long retryTimeoutMs, int maxPending,
      long stoppedRetentionMs) {
    this.root = root;
    this.apps = root.resolve("apps");
    this.stopped = root.resolve("stopped");
    this.retryIntervalMs = retryIntervalMs;
    this.retryTimeoutMs = retryTimeoutMs;
    this.maxPending = maxPending;
    this.stoppedRetentionMs = stoppedRetentionMs;
  }

  /** Makes the dirs (or says why not, and leaves them to the retries) and starts the worker. */
  void start() {
    makeDirs();
    synchronized (lock) {
      lastPruneMs = System.currentTimeMillis();
      worker = new Thread(this::work, "ferry-yarn-handoff");
      worker.setDaemon(true);
      worker.start();
    }
  }

  boolean ready() {
    return ready;
  }

  int pending() {
    synchronized (lock) {
      return pending.size();
    }
  }

  void localDirs(List<String> dirs) {
    StringBuilder lines = new StringBuilder();
    for (String d : dirs) lines.append(d).append('\n');
    final byte[] bytes = lines.toString().getBytes(StandardCharsets.UTF_8);
    submit(LOCAL_DIRS_FILE, "the NodeManager's local dirs",
        () -> writeFile(root, LOCAL_DIRS_FILE, bytes));
  }

  void started(String appId, byte[] serviceData) {
    if (!AppIds.isValid(appId)) {
      LOG.error("Application id {} is not one ferry_server takes; not handed over", appId);
      return;
    }
    if (serviceData.length > MAX_SERVICE_DATA_BYTES) {
      LOG.error("Application {} carries {} bytes of service data, more than the {} ferry_server "
          + "reads: not handed over, so it cannot authenticate with ferry_server on this node",
          appId, serviceData.length, MAX_SERVICE_DATA_BYTES);
      return;
    }
    final byte[] bytes = serviceData.clone();
    submit(appId, "the start of application " + appId, () -> writeFile(apps, appId, bytes));
  }

  void stopped(String appId) {
    if (!AppIds.isValid(appId)) return;
    // The marker first: if the delete fails, ferry_server still learns of the end.
    submit(appId, "the end of application " + appId, () -> {
      writeFile(stopped, appId, new byte[0]);
      Files.deleteIfExists(apps.resolve(appId));
      syncDir(apps);
    });
  }

  /** Tries the write now; keeps it for retries if that fails. */
  private void submit(String file, String what, IoAction action) {
    synchronized (lock) {
      pending.remove(file);  // superseded
    }
    IOException failed = null;
    if (ready) {
      synchronized (io) {
        try {
          action.run();
          return;
        } catch (IOException e) {
          failed = e;
        }
      }
    }
    synchronized (lock) {
      if (pending.size() >= maxPending) {
        LOG.error("Dropped {}: it failed ({}) and {} writes for ferry_server already wait "
            + "(ferry.yarn.max-pending)", what, failed, pending.size());
        return;
      }
      pending.put(file, new Pending(what, action, System.currentTimeMillis()));
    }
    LOG.warn("Could not write {} for ferry_server ({}); retrying every {} ms for up to {} ms",
        what, failed == null ? "its dir is not ready" : failed.toString(), retryIntervalMs,
        retryTimeoutMs);
  }

  private void makeDirs() {
    synchronized (io) {
      try {
        for (Path p : new Path[] {root, apps, stopped}) {
          if (!Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS)) {
            Files.createDirectory(p);
            Files.setPosixFilePermissions(p, DIR_MODE);
          }
        }
        if (!ready) LOG.info("Ferry's hand-off dir {} is ready", root);
        ready = true;
      } catch (IOException e) {
        LOG.error("Cannot make Ferry's hand-off dir {} ({}); the NodeManager goes on, and the "
            + "dir is tried again every {} ms (writes wait until then)", root, e.toString(),
            retryIntervalMs);
      }
    }
  }

  /** Retries every waiting write once, in order. */
  void retryNow() {
    if (!ready) makeDirs();
    if (!ready) return;
    List<Map.Entry<String, Pending>> waiting;
    synchronized (lock) {
      waiting = new ArrayList<>(pending.entrySet());
    }
    for (Map.Entry<String, Pending> entry : waiting) {
      Pending p = entry.getValue();
      synchronized (io) {
        synchronized (lock) {
          if (pending.get(entry.getKey()) != p) continue;  // superseded or done
        }
        try {
          p.action.run();
          synchronized (lock) {
            pending.remove(entry.getKey(), p);
          }
          LOG.info("Wrote {} for ferry_server after retrying", p.what);
        } catch (IOException e) {
          if (System.currentTimeMillis() - p.firstTriedMs >= retryTimeoutMs) {
            synchronized (lock) {
              pending.remove(entry.getKey(), p);
            }
            LOG.error("Gave up writing {} for ferry_server after {} ms: {}", p.what,
                retryTimeoutMs, e.toString());
          } else {
            LOG.warn("Still cannot write {} for ferry_server: {}", p.what, e.toString());
          }
        }
      }
    }
  }

  /** Deletes end markers (and temporary files left by a crash) past the retention. */
  void pruneStopped() {
    if (!ready) return;
    final long cutoff = System.currentTimeMillis() - stoppedRetentionMs;
    int deleted = 0;
    synchronized (io) {
      try (DirectoryStream<Path> entries = Files.newDirectoryStream(stopped)) {
        for (Path p : entries) {
          BasicFileAttributes attrs =
              Files.readAttributes(p, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
          if (attrs.lastModifiedTime().toMillis() <= cutoff && Files.deleteIfExists(p)) {
            ++deleted;
          }
        }
        if (deleted > 0) syncDir(stopped);
      } catch (IOException e) {
        LOG.warn("Could not delete old end markers in {}: {}", stopped, e.toString());
      }
    }
    if (deleted > 0) LOG.info("Deleted {} end markers older than {} ms", deleted,
        stoppedRetentionMs);
  }

  private void work() {
    final long pruneEveryMs =
        Math.max(retryIntervalMs, Math.min(stoppedRetentionMs / 4, 60_000L));
    while (true) {
      boolean prune;
      synchronized (lock) {
        try {
          lock.wait(retryIntervalMs);
        } catch (InterruptedException e) {
          return;
        }
        if (closing) return;
        final long now = System.currentTimeMillis();
        prune = now - lastPruneMs >= pruneEveryMs;
        if (prune) lastPruneMs = now;
      }
      retryNow();
      if (prune) pruneStopped();
    }
  }

  /** Ends the worker (waiting up to 5 s for a write under way); what still waits is said. */
  void stop() throws InterruptedException {
    Thread t;
    synchronized (lock) {
      closing = true;
      lock.notifyAll();
      t = worker;
      if (!pending.isEmpty()) {
        LOG.error("Stopping with {} writes for ferry_server not done (first: {}); ferry_server "
            + "forgets an ended application's registrations once its local dirs are gone",
            pending.size(), pending.values().iterator().next().what);
      }
    }
    if (t != null) t.join(5000);
  }

  /** Writes dir/name whole: a temporary file of the file's mode, synced, renamed, dir synced. */
  private static void writeFile(Path dir, String name, byte[] bytes) throws IOException {
    Path tmp = dir.resolve("." + name + ".tmp");
    Files.deleteIfExists(tmp);
    try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW,
        StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)) {
      Files.setPosixFilePermissions(tmp, FILE_MODE);
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
