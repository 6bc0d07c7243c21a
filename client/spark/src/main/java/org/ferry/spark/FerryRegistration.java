package org.ferry.spark;

import java.io.IOException;
import java.lang.reflect.Method;

import org.apache.spark.SecurityManager;
import org.apache.spark.SparkConf;
import org.apache.spark.network.netty.SparkTransportConf;
import org.apache.spark.network.shuffle.ExternalBlockStoreClient;
import org.apache.spark.network.shuffle.protocol.ExecutorShuffleInfo;
import org.apache.spark.network.util.TransportConf;

import scala.Option;

/**
 * An executor's registration of its kept dirs with the node's ferry_server: Spark's own
 * RegisterExecutor, sent by Spark's own client as Spark's shuffle client is set up (with
 * spark.authenticate as the application; on Spark 4 with spark.ssl.rpc.enabled over TLS).
 * Bounded in time: connecting and the answer each take at most
 * {@code spark.shuffle.registration.timeout} (5 s), unless
 * {@code spark.shuffle.io.connectionCreationTimeout} is set, so an address nothing answers on
 * fails the map task in seconds rather than after the network timeout. A failure names the
 * server and every cause, which Spark reports on the driver as the task's failure.
 */
final class FerryRegistration {
  static final String SORT_SHUFFLE_MANAGER = "org.apache.spark.shuffle.sort.SortShuffleManager";
  private static final String CONNECT_TIMEOUT = "spark.shuffle.io.connectionCreationTimeout";

  private FerryRegistration() {}

  /** `security` may be null: no spark.authenticate, no TLS. */
  static void register(SparkConf conf, SecurityManager security, String appId, String execId,
      String host, int port, String[] dirs, int subDirs) {
    long timeoutMs = conf.getTimeAsMs("spark.shuffle.registration.timeout", "5000ms");
    boolean authenticate = conf.getBoolean("spark.authenticate", false);
    ExternalBlockStoreClient client = null;
    try {
      client = new ExternalBlockStoreClient(
          transportConf(conf, security, timeoutMs), security, authenticate, timeoutMs);
      client.init(appId);
      client.registerWithShuffleServer(
          host, port, execId, new ExecutorShuffleInfo(dirs, subDirs, SORT_SHUFFLE_MANAGER));
    } catch (IOException | RuntimeException | ReflectiveOperationException e) {
      throw new IllegalStateException(failed(execId, host, port) + reasons(e), e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(failed(execId, host, port) + "interrupted", e);
    } finally {
      if (client != null) client.close();
    }
  }

  /**
   * The "shuffle" module's settings as Spark builds them for its own shuffle client
   * (SparkTransportConf), with connecting bounded, and on Spark 4 its TLS for RPC and
   * shuffle (spark.ssl.rpc.enabled): the one call whose form differs between the lines,
   * found by reflection so that one source builds both jars.
   */
  static TransportConf transportConf(SparkConf conf, SecurityManager security, long timeoutMs)
      throws ReflectiveOperationException {
    SparkConf bounded = conf.clone();
    if (!bounded.contains(CONNECT_TIMEOUT)) bounded.set(CONNECT_TIMEOUT, timeoutMs + "ms");
    // One usable core (the third argument): the client makes one connection.
    for (Method method : SparkTransportConf.class.getMethods()) {
      if (!method.getName().equals("fromSparkConf")) continue;
      if (method.getParameterCount() == 4) {
        return (TransportConf) method.invoke(null, bounded, "shuffle", 1, Option.empty());
      }
      if (method.getParameterCount() == 5) {
        Option<?> tls = Option.empty();
        if (security != null) {
          tls = Option.apply(SecurityManager.class.getMethod("getRpcSSLOptions").invoke(security));
        }
        return (TransportConf) method.invoke(null, bounded, "shuffle", 1, Option.empty(), tls);
      }
    }
    throw new NoSuchMethodException("SparkTransportConf.fromSparkConf of 4 or 5 parameters");
  }

  private static String failed(String execId, String host, int port) {
    return "Ferry's shuffle plugin: registering executor " + execId
        + " with the node's ferry_server at " + host + ":" + port + " failed: ";
  }

  /**
   * The causes' messages, outermost first, each said once (a wrapper's message often quotes
   * its cause's): what the server answered is usually the innermost.
   */
  static String reasons(Throwable error) {
    StringBuilder text = new StringBuilder();
    int depth = 0;
    for (Throwable e = error; e != null && depth < 8; e = e.getCause(), depth++) {
      String message = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
      if (text.indexOf(message) >= 0) continue;
      if (text.length() > 0) text.append(": ");
      text.append(message);
    }
    return text.toString();
  }
}
