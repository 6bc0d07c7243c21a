package org.ferry.yarn;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.service.Service;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

/** The aux service as a NodeManager starts it: a bad hand-off dir does not stop the node. */
public class FerryShuffleServiceTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  private static Configuration conf(Path dir) {
    Configuration conf = new Configuration(false);
    conf.set(FerryShuffleService.DIR_KEY, dir.toString());
    conf.set(FerryShuffleService.LOCAL_DIRS_KEY, "/data/1/yarn,file:///data/2/yarn");
    return conf;
  }

  @Test
  public void startsAndHandsOverTheLocalDirs() throws Exception {
    Path dir = tmp.getRoot().toPath().resolve("handoff");
    FerryShuffleService service = new FerryShuffleService();
    service.init(conf(dir));
    service.start();
    assertEquals(java.util.Arrays.asList("/data/1/yarn", "/data/2/yarn"),
        Files.readAllLines(dir.resolve(HandOff.LOCAL_DIRS_FILE)));
    service.stop();
  }

  @Test
  public void aDirThatCannotBeMadeDoesNotStopTheNodeManager() throws Exception {
    Path blocked = tmp.newFile("not-a-dir").toPath().resolve("handoff");
    FerryShuffleService service = new FerryShuffleService();
    service.init(conf(blocked));
    service.start();
    assertEquals(Service.STATE.STARTED, service.getServiceState());
    service.stop();

    Configuration strict = conf(blocked);
    strict.setBoolean(FerryShuffleService.STOP_ON_FAILURE_KEY, true);
    FerryShuffleService failing = new FerryShuffleService();
    try {
      failing.init(strict);
      fail("ferry.yarn.stop-on-failure=true and a dir that cannot be made: init succeeded");
    } catch (RuntimeException expected) {
      assertTrue(expected.toString(), expected.toString().contains("cannot make"));
    }
  }

  @Test
  public void noDirConfiguredIsLoggedNotThrown() throws Exception {
    FerryShuffleService service = new FerryShuffleService();
    service.init(new Configuration(false));
    service.start();
    assertEquals(Service.STATE.STARTED, service.getServiceState());
    service.stop();
  }
}
