// SparkShuffleClient on its own against a scripted peer over loopback: a thread that
// takes the client's first frame and answers it as the case says. What the client does
// with a peer that is wrong (refuses, lies about the stream, sends an absurd frame,
// never answers, hangs up) is decided here, not only against real services.
#include "client/spark_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/block_sink.h"
#include "common/spark/wire.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"
#include "tests/testing/loopback.h"

namespace ferry {
namespace {

namespace sw = spark;

// Accepts one connection, reads what the client sends first, writes `reply` (none:
// `hang_up` closes at once, otherwise the peer stays silent until the client leaves).
class ScriptedPeer {
 public:
  ScriptedPeer(std::string reply, bool hang_up = false) {
    listener_ = testing::ListenLoopback(&port_, 4);
    thread_ = std::thread([this, reply = std::move(reply), hang_up] {
      UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn.valid()) return;
      char buf[65536];
      if (::recv(conn.get(), buf, sizeof(buf), 0) <= 0) return;
      if (hang_up) return;
      if (!reply.empty()) {
        if (::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
      }
      // Until the client closes its side.
      while (::recv(conn.get(), buf, sizeof(buf), 0) > 0) {
      }
    });
  }
  ~ScriptedPeer() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  uint16_t port_ = 0;
  UniqueFd listener_;
  std::thread thread_;
};

absl::Status FetchFrom(const ScriptedPeer& peer, absl::Duration io_timeout = absl::Seconds(10)) {
  SparkShuffleClient client;
  SparkFetchOptions options;
  options.io_timeout = io_timeout;
  BuffersSink sink(2);
  return client.Fetch(peer.address(), "app-1", "0", {{0, 7, 0, 1}, {0, 7, 1, 2}}, sink, options)
      .status();
}

TEST(SparkClientTest, TheServicesRefusalIsTheError) {
  // Request ids are the client's; the peer answers the only one it could have sent.
  ScriptedPeer peer(sw::EncodeRpcFailure(0, "java.lang.RuntimeException: no executor app-1/0"));
  const absl::Status status = FetchFrom(peer);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no executor app-1/0"), std::string::npos) << status;
}

TEST(SparkClientTest, AStreamOfFewerChunksThanBlocksAskedIsRefused) {
  ScriptedPeer peer(sw::EncodeRpcResponse(0, sw::EncodeStreamHandle(1234, 1)));
  const absl::Status status = FetchFrom(peer);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find(peer.address() + " sent a stream handle of 1 chunks for 2"),
            std::string::npos)
      << status;
}

TEST(SparkClientTest, AnAbsurdFrameLengthIsRefusedWithoutAllocatingIt) {
  std::string frame(8, '\0');
  frame[2] = 1;  // 2^40 bytes
  frame += std::string(64, 'x');
  ScriptedPeer peer(frame);
  const absl::Status status = FetchFrom(peer);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("frame length 1099511627776"), std::string::npos) << status;
}

TEST(SparkClientTest, APeerThatNeverAnswersTimesOut) {
  ScriptedPeer peer("");
  const absl::Time start = absl::Now();
  const absl::Status status = FetchFrom(peer, absl::Milliseconds(300));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(SparkClientTest, APeerThatHangsUpIsAnErrorNamingIt) {
  ScriptedPeer peer("", /*hang_up=*/true);
  const absl::Status status = FetchFrom(peer);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(peer.address()), std::string::npos) << status;
}

}  // namespace
}  // namespace ferry
