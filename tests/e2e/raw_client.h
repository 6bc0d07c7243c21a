// The data plane spoken over a plain blocking socket, outside fibers: for tests that
// need to control every byte and every pause of a client.
#ifndef FERRY_TESTS_E2E_RAW_CLIENT_H_
#define FERRY_TESTS_E2E_RAW_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/frame_header.h"
#include "common/unique_fd.h"

namespace ferry::testing {

// The ticket in a StreamHandle's bytes (all zero if they are not kTicketBytes long,
// which no live stream has).
Ticket TicketOf(const std::string& bytes);
// A blocking connection to 127.0.0.1:port whose reads give up after 10 s.
UniqueFd Dial(uint16_t port);
// Sends one FETCH frame (gtest-fails if the send falls short).
void SendRequest(int fd, const Ticket& ticket, uint32_t first, uint32_t count, uint64_t offset);
// Everything the server sends until it closes the connection (or `limit` bytes).
std::string ReadUntilClose(int fd, size_t limit = size_t{1} << 30);
// Exactly `n` bytes, or fewer if the connection ends or a read times out first.
std::string ReadBytes(int fd, size_t n);
// The response header at the start of `bytes` (gtest-fails if it does not decode).
ResponseHeader Header(absl::string_view bytes);

}  // namespace ferry::testing

#endif  // FERRY_TESTS_E2E_RAW_CLIENT_H_
