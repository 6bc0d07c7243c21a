package org.ferry.bench;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.yarn.server.api.ApplicationInitializationContext;
import org.apache.hadoop.yarn.server.api.ApplicationTerminationContext;
import org.apache.hadoop.yarn.server.api.AuxiliaryService;
import org.apache.spark.network.TransportContext;
import org.apache.spark.network.crypto.AuthServerBootstrap;
import org.apache.spark.network.sasl.ShuffleSecretManager;
import org.apache.spark.network.server.TransportServer;
import org.apache.spark.network.server.TransportServerBootstrap;
import org.apache.spark.network.shuffle.ExternalBlockHandler;
import org.apache.spark.network.shuffle.MergedShuffleFileManager;
import org.apache.spark.network.shuffledb.DBBackend;
import org.apache.spark.network.util.ConfigProvider;
import org.apache.spark.network.util.TransportConf;

/**
 * Spark's own shuffle service in a NodeManager, for benchmarks/spark_jobs --yarn to measure
 * beside ferry_server: Spark's ExternalBlockHandler behind Spark's TransportServer, set up as
 * Spark's YarnShuffleService (spark-network-yarn, which pip's pyspark does not ship) sets them
 * up. Its configuration is the NodeManager's (yarn-site.xml): spark.shuffle.service.port,
 * spark.authenticate (each application's secret, from its service data in either of Spark's
 * formats, behind the AuthServerBootstrap that speaks both the AES AuthEngine and SASL), the
 * merger of push-based shuffle (spark.shuffle.push.server.mergedShuffleFileManagerImpl), the
 * executors' registrations and the merges kept in the NodeManager's recovery dir when it has one
 * (spark.shuffle.service.db.backend), and every spark.shuffle.* setting TransportConf reads.
 * Not kept across a NodeManager restart, unlike YarnShuffleService: the secrets (a benchmark
 * does not restart the NodeManager). The NodeManager loads it with its own class loader
 * (yarn.nodemanager.aux-services.NAME.classpath: this class and the Spark distribution's
 * jars), so Spark's netty and Jackson never meet Hadoop's.
 */
public class SparkShuffleHost extends AuxiliaryService {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Path recoveryPath;
  private ExternalBlockHandler handler;
  private TransportContext context;
  private TransportServer server;
  private ShuffleSecretManager secrets;

  public SparkShuffleHost() {
    super("spark_shuffle");
  }

  /** TransportConf's view of the NodeManager's configuration. */
  private static final class HadoopConfig extends ConfigProvider {
    private final Configuration conf;

    HadoopConfig(Configuration conf) {
      this.conf = conf;
    }

    @Override
    public String get(String name) {
      String value = conf.get(name);
      if (value == null) throw new NoSuchElementException(name);
      return value;
    }

    @Override
    public Iterable<Map.Entry<String, String>> getAll() {
      return conf;
    }
  }

  @Override
  public void setRecoveryPath(Path path) {
    recoveryPath = path;
  }

  @Override
  protected void serviceInit(Configuration conf) throws Exception {
    super.serviceInit(conf);
    TransportConf transport = new TransportConf("shuffle", new HadoopConfig(conf));
    File registered = null;
    File merges = null;
    if (recoveryPath != null) {
      DBBackend backend = DBBackend.byName(conf.get("spark.shuffle.service.db.backend", "LEVELDB"));
      registered = new File(recoveryPath.toUri().getPath(),
                            backend.fileName("registeredExecutors"));
      merges = new File(recoveryPath.toUri().getPath(),
                        backend.fileName("sparkShuffleMergeRecovery"));
    }
    handler = new ExternalBlockHandler(transport, registered, mergeManager(transport, merges));
    List<TransportServerBootstrap> bootstraps = new ArrayList<>();
    if (conf.getBoolean("spark.authenticate", false)) {
      secrets = new ShuffleSecretManager();
      bootstraps.add(new AuthServerBootstrap(transport, secrets));
    }
    context = new TransportContext(transport, handler, true);
    server = context.createServer(conf.getInt("spark.shuffle.service.port", 7337), bootstraps);
  }

  /**
   * The merger spark.shuffle.push.server.mergedShuffleFileManagerImpl names, made as
   * YarnShuffleService makes it: RemoteBlockPushResolver for push-based shuffle, the default
   * NoOpMergedShuffleFileManager refusing pushes. Unlike YarnShuffleService, a class that
   * cannot be made stops the service rather than quietly serving without push.
   */
  static MergedShuffleFileManager mergeManager(TransportConf transport, File recovery)
      throws ReflectiveOperationException {
    return Class.forName(transport.mergedShuffleFileManagerImpl(), true,
                         SparkShuffleHost.class.getClassLoader())
        .asSubclass(MergedShuffleFileManager.class)
        .getConstructor(TransportConf.class, File.class)
        .newInstance(transport, recovery);
  }

  /**
   * The secret in an application's service data: Spark sends it raw, or (3.4+) inside a JSON
   * object with its recovery setting.
   */
  static String secretOf(ByteBuffer data) {
    String payload = StandardCharsets.UTF_8.decode(data.duplicate()).toString();
    try {
      Map<String, Object> fields = JSON.readValue(payload, new TypeReference<Map<String, Object>>() {});
      Object secret = fields.get("secret");
      return secret == null ? payload : secret.toString();
    } catch (Exception notJson) {
      return payload;
    }
  }

  @Override
  public void initializeApplication(ApplicationInitializationContext app) {
    if (secrets != null) {
      secrets.registerApp(app.getApplicationId().toString(),
                          secretOf(app.getApplicationDataForService()));
    }
  }

  @Override
  public void stopApplication(ApplicationTerminationContext app) {
    String id = app.getApplicationId().toString();
    if (secrets != null) secrets.unregisterApp(id);
    handler.applicationRemoved(id, false);  // the local dirs are YARN's to delete
  }

  /** The port Spark's server listens on (spark.shuffle.service.port; 0 picks one). */
  int port() {
    return server.getPort();
  }

  @Override
  public ByteBuffer getMetaData() {
    return ByteBuffer.allocate(0);
  }

  @Override
  protected void serviceStop() throws Exception {
    if (server != null) server.close();
    if (context != null) context.close();
    if (handler != null) handler.close();
    super.serviceStop();
  }
}
