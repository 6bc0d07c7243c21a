#include "tests/testing/http_get.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "common/unique_fd.h"

namespace ferry::testing {

absl::StatusOr<std::string> HttpGet(uint16_t port, const std::string& path,
                                    const std::string& host) {
  absl::StatusOr<SocketAddress> addr = SocketAddress::Numeric(host, port);
  if (!addr.ok()) return addr.status();
  UniqueFd fd(::socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
  timeval tv{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd.get(), addr->get(), addr->size()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("connect to ", addr->ToString()));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", addr->ToString(),
                                           "\r\nConnection: close\r\n\r\n");
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::ErrnoToStatus(errno, "send the request");
  }
  std::string response;
  char buf[16384];
  // Bounded by the receive timeout and the response's size.
  while (response.size() < (size_t{64} << 20)) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "read the response");
    if (n == 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  const size_t end_of_head = response.find("\r\n\r\n");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (end_of_head == std::string::npos || !absl::StrContains(status_line, " 200")) {
    return absl::UnavailableError(absl::StrCat("GET ", path, ": '", status_line, "'"));
  }
  return response.substr(end_of_head + 4);
}

absl::StatusOr<double> ScrapeMetric(uint16_t port, const std::string& sample,
                                    const std::string& host) {
  absl::StatusOr<std::string> page = HttpGet(port, "/metrics", host);
  if (!page.ok()) return page.status();
  const std::string line = "\n" + sample + " ";
  const size_t at = page->find(line);
  if (at == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no ", sample, " at ", host, ":", port, "/metrics"));
  }
  const size_t start = at + line.size();
  double value = 0;
  if (!absl::SimpleAtod(page->substr(start, page->find('\n', start) - start), &value)) {
    return absl::InternalError(absl::StrCat(sample, " at ", host, ":", port, " is not a number"));
  }
  return value;
}

}  // namespace ferry::testing
