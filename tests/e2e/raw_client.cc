#include "tests/e2e/raw_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/testing/loopback.h"

namespace ferry::testing {

Ticket TicketOf(const std::string& bytes) {
  Ticket t{};
  if (bytes.size() == t.size()) std::memcpy(t.data(), bytes.data(), t.size());
  return t;
}

UniqueFd Dial(uint16_t port) {
  UniqueFd fd = ConnectLoopback(port);
  timeval tv{.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void SendRequest(int fd, const Ticket& ticket, uint32_t first, uint32_t count, uint64_t offset) {
  FetchRequest r;
  r.ticket = ticket;
  r.first_block = first;
  r.block_count = count;
  r.first_block_offset = offset;
  char frame[kRequestBytes];
  EncodeFetchRequest(r, frame);
  ASSERT_EQ(::send(fd, frame, sizeof(frame), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(frame)));
}

std::string ReadUntilClose(int fd, size_t limit) {
  std::string out;
  char buf[65536];
  while (out.size() < limit) {
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), limit - out.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string ReadBytes(int fd, size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(fd, out.data() + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

ResponseHeader Header(absl::string_view bytes) {
  auto h = DecodeResponseHeader(bytes.substr(0, kResponseHeaderBytes));
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? *h : ResponseHeader{};
}

}  // namespace ferry::testing
