package org.ferry.spark;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkConf;
import org.junit.Test;

public class FerryRegistrationTest {
  private static final String[] DIRS = {"/nonexistent/ferry-app-1-1"};

  private static String failure(SparkConf conf, int port) {
    try {
      FerryRegistration.register(conf, null, "app-1", "1", "127.0.0.1", port, DIRS, 64);
    } catch (IllegalStateException e) {
      return e.getMessage();
    }
    fail("registered with nothing to register with on port " + port);
    return null;
  }

  @Test
  public void nothingListeningFailsAtOnceNamingTheServer() throws IOException {
    int port;
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = socket.getLocalPort();
    }
    String message = failure(new SparkConf(false), port);
    assertTrue(message, message.startsWith("Ferry's shuffle plugin: registering executor 1 with "
        + "the node's ferry_server at 127.0.0.1:" + port + " failed: "));
    assertTrue(message, message.contains("Connection refused"));
  }

  private static SparkConf oneSecond() {
    return new SparkConf(false).set("spark.shuffle.registration.timeout", "1s");
  }

  private static long secondsSince(long startNanos) {
    return (System.nanoTime() - startNanos) / 1_000_000_000L;
  }

  // A peer that takes the connection and never answers: the registration's timeout ends it.
  @Test
  public void aServerThatNeverAnswersFailsWithinTheRegistrationTimeout() throws IOException {
    try (ServerSocket silent = new ServerSocket(0, 8, InetAddress.getLoopbackAddress())) {
      long start = System.nanoTime();
      String message = failure(oneSecond(), silent.getLocalPort());
      long seconds = secondsSince(start);
      assertTrue(message, message.contains("127.0.0.1:" + silent.getLocalPort()));
      assertTrue(message, message.toLowerCase().contains("timeout"));
      assertTrue("took " + seconds + " s", seconds < 30);
    }
  }

  // An address whose SYNs go unanswered, as a host that is gone or filtered: a listener
  // whose accept queue is full drops them. Connecting ends at the registration's timeout,
  // not at Spark's network timeout (120 s).
  @Test
  public void anAddressThatNeverAcceptsFailsWithinTheRegistrationTimeout() throws IOException {
    List<Socket> queued = new ArrayList<>();
    try (ServerSocket full = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      InetSocketAddress address = new InetSocketAddress(InetAddress.getLoopbackAddress(),
          full.getLocalPort());
      boolean filled = false;
      for (int i = 0; i < 16 && !filled; i++) {
        Socket socket = new Socket();
        queued.add(socket);
        try {
          socket.connect(address, 300);
        } catch (SocketTimeoutException e) {
          filled = true;
        }
      }
      assertTrue("the accept queue never filled", filled);
      long start = System.nanoTime();
      String message = failure(oneSecond(), full.getLocalPort());
      long seconds = secondsSince(start);
      assertTrue(message, message.contains("127.0.0.1:" + full.getLocalPort()));
      assertTrue("took " + seconds + " s: " + message, seconds < 30);
    } finally {
      for (Socket socket : queued) socket.close();
    }
  }

  @Test
  public void reasonsSayEachCauseOnce() {
    Exception inner = new IOException("Connection refused: /127.0.0.1:1");
    Exception middle = new IOException("Failed to connect to /127.0.0.1:1", inner);
    Exception outer = new RuntimeException("java.io.IOException: Connection refused: /127.0.0.1:1",
        middle);
    assertEquals("java.io.IOException: Connection refused: /127.0.0.1:1: "
            + "Failed to connect to /127.0.0.1:1",
        FerryRegistration.reasons(outer));
    assertEquals("RuntimeException", FerryRegistration.reasons(new RuntimeException()));
  }
}
