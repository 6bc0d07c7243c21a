package org.ferry.yarn;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;

import org.junit.After;
import org.junit.Before;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

/** The hand-off dir as the aux service writes it, on real files (failures: block()). */
public class HandOffTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  private Path root;
  private HandOff handOff;

  @Before
  public void setUp() throws IOException {
    root = tmp.getRoot().toPath().resolve("handoff");
  }

  @After
  public void tearDown() throws Exception {
    if (handOff != null) handOff.stop();
  }

  private HandOff open(long retentionMs, int maxPending) {
    // Retries by hand (retryNow), never by the worker within a test's time.
    handOff = new HandOff(root, 3_600_000, 600_000, maxPending, retentionMs);
    handOff.start();
    return handOff;
  }

  /**
   * Makes apps/&lt;appId&gt; unwritable as a failing disk would: a directory with something in
   * it stands where the file goes, so the rename fails. Returns that directory.
   */
  private Path block(String appId) throws IOException {
    Path blocker = root.resolve("apps").resolve(appId);
    Files.createDirectories(blocker.resolve("x"));
    return blocker;
  }

  private static String mode(Path p) throws IOException {
    return PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
  }

  @Test
  public void writesAnApplicationsStartAndEndWithItsModesWhateverTheUmask() throws Exception {
    open(3_600_000, 10);
    assertTrue(handOff.ready());
    handOff.started("application_1_0001", "s3cret".getBytes(StandardCharsets.UTF_8));
    Path app = root.resolve("apps/application_1_0001");
    assertArrayEquals("s3cret".getBytes(StandardCharsets.UTF_8), Files.readAllBytes(app));
    // Set, not asked of the umask: a NodeManager with umask 077 still hands over.
    assertEquals("rw-r-----", mode(app));
    for (String dir : new String[] {"", "apps", "stopped"}) {
      assertEquals(dir, "rwxr-x---", mode(root.resolve(dir)));
    }
    handOff.stopped("application_1_0001");
    assertFalse(Files.exists(app));
    assertTrue(Files.exists(root.resolve("stopped/application_1_0001")));
    assertEquals("rw-r-----", mode(root.resolve("stopped/application_1_0001")));
    handOff.localDirs(Arrays.asList("/data/1/yarn", "/data/2/yarn"));
    assertEquals(Arrays.asList("/data/1/yarn", "/data/2/yarn"),
        Files.readAllLines(root.resolve("nodemanager-local-dirs")));
  }

  @Test
  public void serviceDataPastWhatFerryReadsIsNotWritten() throws Exception {
    open(3_600_000, 10);
    handOff.started("application_1_0001", new byte[HandOff.MAX_SERVICE_DATA_BYTES + 1]);
    assertFalse(Files.exists(root.resolve("apps/application_1_0001")));
    handOff.started("application_1_0002", new byte[HandOff.MAX_SERVICE_DATA_BYTES]);
    assertEquals(HandOff.MAX_SERVICE_DATA_BYTES,
        Files.size(root.resolve("apps/application_1_0002")));
    handOff.started(".hidden", new byte[1]);
    handOff.started("../x", new byte[1]);
    assertFalse(Files.exists(root.resolve("apps/.hidden")));
    assertEquals(0, handOff.pending());
  }

  @Test
  public void aFailedWriteNeverDelaysANewOneAndIsRetried() throws Exception {
    open(3_600_000, 10);
    Path blocker = block("application_1_0001");
    handOff.started("application_1_0001", new byte[] {1});
    assertEquals(1, handOff.pending());
    // Eleven more applications start: each is written at once.
    for (int i = 2; i <= 12; ++i) {
      String id = String.format("application_1_%04d", i);
      handOff.started(id, new byte[] {(byte) i});
      assertTrue(id, Files.exists(root.resolve("apps").resolve(id)));
    }
    assertEquals(1, handOff.pending());
    handOff.retryNow();
    assertEquals("still blocked", 1, handOff.pending());
    Files.delete(blocker.resolve("x"));
    Files.delete(blocker);
    handOff.retryNow();
    assertEquals(0, handOff.pending());
    assertArrayEquals(new byte[] {1}, Files.readAllBytes(blocker));
  }

  @Test
  public void anApplicationsEndReplacesItsStartThatWaits() throws Exception {
    open(3_600_000, 10);
    Path blocker = block("application_1_0001");
    handOff.started("application_1_0001", new byte[] {1});
    handOff.stopped("application_1_0001");  // its marker is written; the delete fails
    assertTrue(Files.exists(root.resolve("stopped/application_1_0001")));
    assertEquals(1, handOff.pending());
    Files.delete(blocker.resolve("x"));
    handOff.retryNow();
    assertEquals(0, handOff.pending());
    assertFalse("the start is not written after the end", Files.exists(blocker));
  }

  @Test
  public void aFullQueueDropsOnlyWritesThatFail() throws Exception {
    open(3_600_000, 2);
    for (int i = 1; i <= 3; ++i) {
      block(String.format("application_1_%04d", i));
      handOff.started(String.format("application_1_%04d", i), new byte[] {1});
    }
    assertEquals(2, handOff.pending());
    handOff.started("application_1_0009", new byte[] {9});
    assertTrue(Files.exists(root.resolve("apps/application_1_0009")));
  }

  @Test
  public void aDirThatCannotBeMadeLeavesTheServiceUpAndIsMadeLater() throws Exception {
    Files.write(root, new byte[0]);  // a file where the dir goes
    open(3_600_000, 10);
    assertFalse(handOff.ready());
    handOff.started("application_1_0001", new byte[] {1});
    assertEquals(1, handOff.pending());
    Files.delete(root);
    handOff.retryNow();
    assertTrue(handOff.ready());
    assertEquals(0, handOff.pending());
    assertTrue(Files.exists(root.resolve("apps/application_1_0001")));
  }

  @Test
  public void endMarkersAreDeletedPastTheirRetention() throws Exception {
    open(60_000, 10);
    handOff.stopped("application_1_0001");
    handOff.stopped("application_1_0002");
    Path old = root.resolve("stopped/application_1_0001");
    Files.setLastModifiedTime(old, FileTime.fromMillis(System.currentTimeMillis() - 120_000));
    handOff.pruneStopped();
    assertFalse(Files.exists(old));
    assertTrue(Files.exists(root.resolve("stopped/application_1_0002")));
  }
}
