package org.ferry.spark;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.nio.file.Files;

import org.apache.spark.SparkConf;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

public class FerryDirsTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  private File[] ownDirs(int n) throws Exception {
    File[] own = new File[n];
    for (int i = 0; i < n; i++) {
      own[i] = new File(tmp.newFolder("root" + i), "blockmgr-" + i);
      assertTrue(own[i].mkdir());
    }
    return own;
  }

  // Where Spark's DiskBlockManager.getFile puts a file, computed here as it does.
  private static File sparks(File[] dirs, int subDirs, String name) {
    int hash = name.hashCode() == Integer.MIN_VALUE ? 0 : Math.abs(name.hashCode());
    return new File(new File(dirs[hash % dirs.length],
        String.format("%02x", (hash / dirs.length) % subDirs)), name);
  }

  @Test
  public void keptDirsLieBesideTheExecutorsOwnOnesAndMirrorSparksLayout() throws Exception {
    File[] own = ownDirs(3);
    FerryDirs dirs = new FerryDirs(own, 64, "app-1", "7");
    dirs.make();
    String[] paths = dirs.paths();
    assertEquals(3, paths.length);
    for (int i = 0; i < 3; i++) {
      assertEquals(new File(own[i].getParentFile(), "ferry-app-1-7").getPath(), paths[i]);
      assertTrue(new File(paths[i]).isDirectory());
    }
    File[] kept = {new File(paths[0]), new File(paths[1]), new File(paths[2])};
    for (String name : new String[] {"shuffle_0_5_0.data", "shuffle_12_40000_0.index", "x"}) {
      assertEquals(sparks(own, 64, name), dirs.place(own, name));
      assertEquals(sparks(kept, 64, name), dirs.place(kept, name));
    }
  }

  @Test
  public void aCommittedMapOutputIsLinkedAndOutlivesTheExecutorsDirs() throws Exception {
    File[] own = ownDirs(2);
    FerryDirs dirs = new FerryDirs(own, 8, "app-2", "1");
    dirs.make();
    byte[] data = {1, 2, 3, 4};
    byte[] index = new byte[16];
    for (String name : new String[] {"shuffle_3_9_0.data", "shuffle_3_9_0.index"}) {
      File at = dirs.place(own, name);
      assertTrue(at.getParentFile().mkdirs() || at.getParentFile().isDirectory());
      Files.write(at.toPath(), name.endsWith(".data") ? data : index);
    }
    // No checksum file was written: none is kept, and that is no error.
    dirs.keep(3, 9, "ADLER32");
    // Committed again (another attempt of the task): the newer file is kept.
    byte[] newer = {9, 9};
    Files.write(dirs.place(own, "shuffle_3_9_0.data").toPath(), newer);
    dirs.keep(3, 9, "ADLER32");
    File[] kept = {new File(dirs.paths()[0]), new File(dirs.paths()[1])};
    // The executor stops: Spark deletes its own dirs.
    for (File dir : own) deleteTree(dir);
    assertArrayEquals(newer, Files.readAllBytes(dirs.place(kept, "shuffle_3_9_0.data").toPath()));
    assertArrayEquals(index, Files.readAllBytes(dirs.place(kept, "shuffle_3_9_0.index").toPath()));
    assertFalse(dirs.place(kept, "shuffle_3_9_0.checksum.ADLER32").exists());
  }

  // A failed registration: the empty kept dirs go, a dir holding anything stays.
  @Test
  public void unmakeDeletesTheKeptDirsOnlyWhileEmpty() throws Exception {
    File[] own = ownDirs(2);
    FerryDirs dirs = new FerryDirs(own, 8, "app-3", "2");
    dirs.make();
    File holding = new File(dirs.paths()[1], "something");
    Files.write(holding.toPath(), new byte[] {1});
    dirs.unmake();
    assertFalse(new File(dirs.paths()[0]).exists());
    assertTrue(holding.exists());
  }

  @Test
  public void theNodesHostIsTheSettingThenTheEnvironmentThenTheExecutorsOwn() {
    SparkConf conf = new SparkConf(false);
    assertEquals("10.0.0.5", FerryExecutorComponents.nodeHost(conf, null, "10.0.0.5"));
    assertEquals("192.0.2.1", FerryExecutorComponents.nodeHost(conf, "192.0.2.1", "10.0.0.5"));
    conf.set(FerryExecutorComponents.NODE_HOST_KEY, "198.51.100.7");
    assertEquals("198.51.100.7", FerryExecutorComponents.nodeHost(conf, "192.0.2.1", "10.0.0.5"));
  }

  private static void deleteTree(File f) {
    File[] children = f.listFiles();
    if (children != null) {
      for (File c : children) deleteTree(c);
    }
    assertTrue(f.delete());
  }
}
