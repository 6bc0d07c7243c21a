// The version ferry_server and the ferry CLI report (--version, GetServerInfo, metrics).
#ifndef FERRY_COMMON_VERSION_H_
#define FERRY_COMMON_VERSION_H_

namespace ferry {

inline constexpr char kFerryVersion[] = "0.1.0";

}  // namespace ferry

#endif  // FERRY_COMMON_VERSION_H_
