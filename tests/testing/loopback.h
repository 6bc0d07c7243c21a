// Test helpers over real kernel objects: TCP listeners and connections on 127.0.0.1,
// socket pairs, and the process's open descriptor count (for leak checks).
#ifndef FERRY_TESTS_TESTING_LOOPBACK_H_
#define FERRY_TESTS_TESTING_LOOPBACK_H_

#include <netinet/in.h>

#include <cstdint>
#include <utility>

#include "common/unique_fd.h"

namespace ferry::testing {

// A listening TCP socket on 127.0.0.1 at a kernel-chosen port. CHECK-fails on error.
UniqueFd ListenLoopback(uint16_t* port, int backlog = 1024);
// A blocking TCP connection to 127.0.0.1:port (plain connect(2), outside fibers).
UniqueFd ConnectLoopback(uint16_t port);
// The address 127.0.0.1:port.
sockaddr_in LoopbackAddress(uint16_t port);
// A connected AF_UNIX stream socket pair.
std::pair<UniqueFd, UniqueFd> SocketPair();
// Entries in /proc/self/fd right now.
int OpenFdCount();
// Raises RLIMIT_NOFILE's soft limit to at least `n` (up to the hard limit); returns
// the soft limit in force afterwards.
long RaiseFdLimit(long n);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTING_LOOPBACK_H_
