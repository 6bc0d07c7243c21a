package org.ferry.spark;

import java.io.File;
import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;

import org.apache.spark.network.util.JavaUtils;

/**
 * An executor's dirs in ferry_server's keeping: {@code <root>/ferry-<application>-<executor>}
 * beside each of its own local dirs (Spark's {@code blockmgr-*}, which Spark deletes when the
 * executor stops), on the same file system. A map output Spark has written and committed is
 * hard-linked into them at the place Spark's layout gives it (DiskBlockManager.getFile: the
 * name's hash picks the dir and its subdir), so ferry_server, told these dirs, finds it as it
 * finds any executor's, and it outlives the executor's own dirs.
 */
final class FerryDirs {
  private final File[] own;
  private final File[] kept;
  private final int subDirs;

  FerryDirs(File[] own, int subDirs, String appId, String execId) {
    this.own = own;
    this.subDirs = subDirs;
    kept = new File[own.length];
    for (int i = 0; i < own.length; i++) {
      // One dir each, which ferry_server deletes whole at the application's end.
      kept[i] = new File(own[i].getAbsoluteFile().getParentFile(), "ferry-" + appId + "-" + execId);
    }
  }

  /** The dirs to register with ferry_server. */
  String[] paths() {
    String[] paths = new String[kept.length];
    for (int i = 0; i < kept.length; i++) paths[i] = kept[i].getPath();
    return paths;
  }

  void make() throws IOException {
    for (File dir : kept) mkdirs(dir);
  }

  /**
   * Deletes the kept dirs while they are still empty (a registration that failed): a dir
   * holding anything stays. Best effort: the executor fails with its own reason anyway.
   */
  void unmake() {
    for (File dir : kept) {
      try {
        Files.deleteIfExists(dir.toPath());
      } catch (IOException e) {
        // Not empty, or not ours to delete: left as it is.
      }
    }
  }

  /** Where Spark's layout puts `name` beneath `dirs`. */
  File place(File[] dirs, String name) {
    int hash = JavaUtils.nonNegativeHash(name);
    int dir = hash % dirs.length;
    int sub = (hash / dirs.length) % subDirs;
    return new File(new File(dirs[dir], String.format("%02x", sub)), name);
  }

  /**
   * Links the committed files of map output (shuffleId, mapId) into the kept dirs: its data
   * (when it has any), its index and, when written, its checksum file of `checksumAlgorithm`.
   */
  void keep(int shuffleId, long mapId, String checksumAlgorithm) throws IOException {
    String base = "shuffle_" + shuffleId + "_" + mapId + "_0";
    link(base + ".data");
    link(base + ".index");
    if (checksumAlgorithm != null) link(base + ".checksum." + checksumAlgorithm);
  }

  private void link(String name) throws IOException {
    File from = place(own, name);
    File to = place(kept, name);
    mkdirs(to.getParentFile());
    try {
      Files.deleteIfExists(to.toPath());  // a task attempt's output committed again
      Files.createLink(to.toPath(), from.toPath());
    } catch (NoSuchFileException e) {
      if (from.exists()) throw e;  // not written (no data, or no checksums): nothing to keep
    } catch (FileAlreadyExistsException e) {
      // Another thread linked the same output: the same file.
    }
  }

  private static void mkdirs(File dir) throws IOException {
    if (!dir.isDirectory() && !dir.mkdirs() && !dir.isDirectory()) {
      throw new IOException("cannot make " + dir);
    }
  }
}
