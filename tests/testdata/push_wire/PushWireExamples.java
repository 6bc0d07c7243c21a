/*
 * Prints, one per line as "name hex", the bytes Spark 3.5.0's own classes put on the wire
 * for push-based shuffle's messages: the BlockTransferMessages by their encode(), the
 * transport frames by Spark's MessageEncoder, the bitmaps by RoaringBitmap's serialize().
 * The golden vectors of tests/common/spark/wire_test.cc (PushMessages*) are its output;
 * tests/testdata/push_wire/run prints them again.
 */
package ferry.testdata;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.WritableByteChannel;

import io.netty.buffer.ByteBuf;
import io.netty.channel.FileRegion;
import io.netty.channel.embedded.EmbeddedChannel;

import org.apache.spark.network.buffer.NioManagedBuffer;
import org.apache.spark.network.protocol.MergedBlockMetaRequest;
import org.apache.spark.network.protocol.MergedBlockMetaSuccess;
import org.apache.spark.network.protocol.Message;
import org.apache.spark.network.protocol.MessageEncoder;
import org.apache.spark.network.protocol.OneWayMessage;
import org.apache.spark.network.protocol.RpcRequest;
import org.apache.spark.network.protocol.RpcResponse;
import org.apache.spark.network.protocol.UploadStream;
import org.apache.spark.network.shuffle.protocol.BlockPushReturnCode;
import org.apache.spark.network.shuffle.protocol.BlockTransferMessage;
import org.apache.spark.network.shuffle.protocol.FetchShuffleBlockChunks;
import org.apache.spark.network.shuffle.protocol.FinalizeShuffleMerge;
import org.apache.spark.network.shuffle.protocol.MergeStatuses;
import org.apache.spark.network.shuffle.protocol.PushBlockStream;
import org.apache.spark.network.shuffle.protocol.RemoveShuffleMerge;
import org.roaringbitmap.RoaringBitmap;

public final class PushWireExamples {
  static final long REQUEST_ID = 0x0102030405060708L;

  static byte[] frame(Message m) throws Exception {
    EmbeddedChannel ch = new EmbeddedChannel(MessageEncoder.INSTANCE);
    ch.writeOutbound(m);
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    WritableByteChannel sink = Channels.newChannel(out);
    Object o;
    while ((o = ch.readOutbound()) != null) {
      if (o instanceof ByteBuf) {
        ByteBuf b = (ByteBuf) o;
        byte[] a = new byte[b.readableBytes()];
        b.readBytes(a);
        out.write(a);
        b.release();
      } else if (o instanceof FileRegion) {
        FileRegion r = (FileRegion) o;
        long pos = 0;
        for (int guard = 0; pos < r.count() && guard < 1000000; guard++) {
          pos += r.transferTo(sink, pos);
        }
        r.release();
      } else {
        throw new IllegalStateException("unexpected outbound object " + o.getClass());
      }
    }
    ch.finishAndReleaseAll();
    return out.toByteArray();
  }

  static byte[] bytes(ByteBuffer b) {
    byte[] a = new byte[b.remaining()];
    b.get(a);
    return a;
  }

  static byte[] bitmap(RoaringBitmap b) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    b.serialize(new DataOutputStream(out));
    return out.toByteArray();
  }

  static void print(String name, byte[] a) {
    StringBuilder sb = new StringBuilder(name).append(' ');
    for (byte x : a) sb.append(String.format("%02x", x & 0xff));
    System.out.println(sb);
  }

  public static void main(String[] args) throws Exception {
    PushBlockStream push = new PushBlockStream("app-1", 2, 3, 4, 5, 6, 7);
    print("PushBlockStream", bytes(push.toByteBuffer()));
    byte[] block = "block".getBytes("UTF-8");
    print("UploadStream", frame(new UploadStream(REQUEST_ID,
        new NioManagedBuffer(push.toByteBuffer()), new NioManagedBuffer(ByteBuffer.wrap(block)))));
    print("FinalizeShuffleMerge",
        frame(new RpcRequest(REQUEST_ID, new NioManagedBuffer(
            new FinalizeShuffleMerge("app-1", 2, 3, 4).toByteBuffer()))));
    RoaringBitmap a = RoaringBitmap.bitmapOf(0, 5, 70000);
    RoaringBitmap b = new RoaringBitmap();
    b.add(1L, 3000L);  // a run, dense enough to be a bitmap container
    b.runOptimize();
    print("BitmapSparse", bitmap(a));
    print("BitmapRun", bitmap(b));
    print("BitmapEmpty", bitmap(new RoaringBitmap()));
    MergeStatuses statuses = new MergeStatuses(3, 4, new RoaringBitmap[] {a, b},
        new int[] {0, 9}, new long[] {1000L, 1L << 33});
    print("MergeStatuses", frame(new RpcResponse(REQUEST_ID,
        new NioManagedBuffer(statuses.toByteBuffer()))));
    print("FetchShuffleBlockChunks", frame(new RpcRequest(REQUEST_ID, new NioManagedBuffer(
        new FetchShuffleBlockChunks("app-1", "0", 3, 4, new int[] {0, 9},
            new int[][] {{0, 1}, {2}}).toByteBuffer()))));
    print("BlockPushReturnCode", frame(new RpcResponse(REQUEST_ID, new NioManagedBuffer(
        new BlockPushReturnCode((byte) 3, "shufflePush_3_4_5_6").toByteBuffer()))));
    print("BlockPushReturnCodeSuccess", frame(new RpcResponse(REQUEST_ID, new NioManagedBuffer(
        new BlockPushReturnCode((byte) 0, "").toByteBuffer()))));
    print("RemoveShuffleMerge", frame(new OneWayMessage(new NioManagedBuffer(
        new RemoveShuffleMerge("app-1", 2, 3, 4).toByteBuffer()))));
    print("MergedBlockMetaRequest",
        frame(new MergedBlockMetaRequest(REQUEST_ID, "app-1", 3, 4, 5)));
    ByteArrayOutputStream meta = new ByteArrayOutputStream();
    a.serialize(new DataOutputStream(meta));
    b.serialize(new DataOutputStream(meta));
    print("MergedBlockMetaSuccess", frame(new MergedBlockMetaSuccess(REQUEST_ID, 2,
        new NioManagedBuffer(ByteBuffer.wrap(meta.toByteArray())))));
  }
}
