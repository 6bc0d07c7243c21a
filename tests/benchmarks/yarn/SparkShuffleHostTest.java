package org.ferry.bench;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.apache.spark.network.sasl.SecretKeyHolder;
import org.apache.spark.network.shuffle.ExternalBlockStoreClient;
import org.apache.spark.network.shuffle.NoOpMergedShuffleFileManager;
import org.apache.spark.network.shuffle.RemoteBlockPushResolver;
import org.apache.spark.network.shuffle.protocol.ExecutorShuffleInfo;
import org.apache.spark.network.util.MapConfigProvider;
import org.apache.spark.network.util.TransportConf;
import org.junit.After;
import org.junit.Test;

/**
 * benchmarks/yarn/SparkShuffleHost, the NodeManager's host of Spark's own shuffle service in
 * benchmarks/spark_jobs --yarn: the secret it reads from an application's service data in
 * either of Spark's formats, the merger it makes, and, on a real socket, that an application
 * registers with the secret YARN handed over and with no other, until its end.
 */
public class SparkShuffleHostTest {
  private final SparkShuffleHost host = new SparkShuffleHost();

  @After
  public void stop() {
    host.stop();
  }

  private static ByteBuffer utf8(String text) {
    return ByteBuffer.wrap(text.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  public void secretIsTheRawDataOrTheJsonObjectsSecretField() {
    assertEquals("s3cret", SparkShuffleHost.secretOf(utf8("s3cret")));
    assertEquals("s3cret",
                 SparkShuffleHost.secretOf(utf8("{\"secret\":\"s3cret\",\"recovery\":true}")));
    // A JSON object without a secret, or text that only starts like JSON: the data itself.
    assertEquals("{\"other\":1}", SparkShuffleHost.secretOf(utf8("{\"other\":1}")));
    assertEquals("{not json", SparkShuffleHost.secretOf(utf8("{not json")));
    // The service data is read, not consumed.
    ByteBuffer data = utf8("s3cret");
    SparkShuffleHost.secretOf(data);
    assertEquals(6, data.remaining());
  }

  private static TransportConf transport(Map<String, String> settings) {
    return new TransportConf("shuffle", new MapConfigProvider(settings));
  }

  @Test
  public void theMergerIsTheOneTheConfigurationNames() throws Exception {
    File recovery = Files.createTempDirectory("merges").resolve("merges.ldb").toFile();
    assertTrue(SparkShuffleHost.mergeManager(transport(new HashMap<>()), null)
                   instanceof NoOpMergedShuffleFileManager);
    Map<String, String> push = new HashMap<>();
    push.put("spark.shuffle.push.server.mergedShuffleFileManagerImpl",
             RemoteBlockPushResolver.class.getName());
    RemoteBlockPushResolver resolver =
        (RemoteBlockPushResolver) SparkShuffleHost.mergeManager(transport(push), recovery);
    resolver.close();
    // A class that cannot be made stops the service.
    push.put("spark.shuffle.push.server.mergedShuffleFileManagerImpl", "org.ferry.NoSuchMerger");
    assertThrows(ClassNotFoundException.class,
                 () -> SparkShuffleHost.mergeManager(transport(push), null));
  }

  /** Registers an executor of `app` with the host, authenticating with `secret`. */
  private void register(String app, String secret, File localDir) throws Exception {
    Map<String, String> settings = new HashMap<>();
    settings.put("spark.shuffle.io.maxRetries", "0");
    SecretKeyHolder keys = new SecretKeyHolder() {
      @Override
      public String getSaslUser(String appId) {
        return "sparkSaslUser";
      }

      @Override
      public String getSecretKey(String appId) {
        return secret;
      }
    };
    try (ExternalBlockStoreClient client =
             new ExternalBlockStoreClient(transport(settings), keys, true, 10_000)) {
      client.init(app);
      client.registerWithShuffleServer(
          "127.0.0.1", host.port(), "1",
          new ExecutorShuffleInfo(new String[] {localDir.getPath()}, 64,
                                  "org.apache.spark.shuffle.sort.SortShuffleManager"));
    }
  }

  @Test
  public void anApplicationRegistersWithTheSecretYarnHandedOverUntilItsEnd() throws Exception {
    Configuration conf = new Configuration(false);
    conf.setBoolean("spark.authenticate", true);
    conf.setInt("spark.shuffle.service.port", 0);
    host.init(conf);
    host.start();
    ApplicationId id = ApplicationId.newInstance(1_700_000_000_000L, 1);
    String app = id.toString();
    host.initializeApplication(new ApplicationInitializationContext(
        "user", id, utf8("{\"secret\":\"yarn-secret\",\"recovery\":false}")));
    File localDir = Files.createTempDirectory("blockmgr").toFile();

    register(app, "yarn-secret", localDir);
    // Refused by the server's SASL, not for want of a server: the secret does not match.
    Exception wrong = assertThrows(Exception.class, () -> register(app, "another secret", localDir));
    assertTrue(wrong.toString(), messages(wrong).contains("DIGEST-MD5"));
    // Its end takes its secret away: the server has none to check against.
    host.stopApplication(new ApplicationTerminationContext(id));
    Exception ended = assertThrows(Exception.class, () -> register(app, "yarn-secret", localDir));
    assertTrue(ended.toString(), messages(ended).contains("Password cannot be null"));
  }

  /** The messages of `t` and its causes. */
  private static String messages(Throwable t) {
    StringBuilder all = new StringBuilder();
    for (; t != null; t = t.getCause()) all.append(t.getMessage()).append('\n');
    return all.toString();
  }
}
