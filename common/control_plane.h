// Limits of the control plane that server and client share.
#ifndef FERRY_COMMON_CONTROL_PLANE_H_
#define FERRY_COMMON_CONTROL_PLANE_H_

#include <cstddef>

namespace ferry {

// Most blocks one OpenStream may name, and most partitions those blocks may cover
// together (the handle carries a length and a checksum per partition). Clients split a
// larger fetch into several streams.
inline constexpr size_t kMaxBlocksPerStream = size_t{1} << 20;
inline constexpr size_t kMaxPartitionsPerStream = size_t{1} << 20;

// Most apps one ListApps answer lists (by name; it says when there were more).
inline constexpr size_t kMaxListedApps = 10000;

// Largest control-plane message either side sends or accepts: a handle at both limits
// above takes under 48 MiB.
inline constexpr int kMaxControlMessageBytes = 64 << 20;

}  // namespace ferry

#endif  // FERRY_COMMON_CONTROL_PLANE_H_
