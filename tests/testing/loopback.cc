#include "tests/testing/loopback.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>

#include "common/check.h"

namespace ferry::testing {

sockaddr_in LoopbackAddress(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

UniqueFd ListenLoopback(uint16_t* port, int backlog) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FERRY_CHECK(fd.valid());
  sockaddr_in addr = LoopbackAddress(0);
  FERRY_CHECK(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  FERRY_CHECK(::listen(fd.get(), backlog) == 0);
  socklen_t len = sizeof(addr);
  FERRY_CHECK(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FERRY_CHECK(fd.valid());
  sockaddr_in addr = LoopbackAddress(port);
  FERRY_CHECK(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

std::pair<UniqueFd, UniqueFd> SocketPair() {
  int fds[2];
  FERRY_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

int OpenFdCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  FERRY_CHECK(dir != nullptr);
  int count = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count - 1;  // the directory stream's own descriptor
}

long RaiseFdLimit(long n) {
  rlimit limit{};
  FERRY_CHECK(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (static_cast<long>(limit.rlim_cur) < n) {
    limit.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(n), limit.rlim_max);
    FERRY_CHECK(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  }
  return static_cast<long>(limit.rlim_cur);
}

}  // namespace ferry::testing
