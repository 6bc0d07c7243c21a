// ferry_server's flags onto FerryServerOptions. Each flag is declared beside the options
// struct whose field it sets (the packages' flags.cc; common/option_flags.h); this sets
// them all, once absl::ParseCommandLine has run.
#ifndef FERRY_SERVER_FLAGS_H_
#define FERRY_SERVER_FLAGS_H_

#include "absl/status/status.h"
#include "server/ferry_server.h"

namespace ferry {

// Sets `options` from the flags; an error (INVALID_ARGUMENT, or a file that cannot be
// read) names the flag. The fields' ranges are Validate()'s.
absl::Status ApplyServerFlags(FerryServerOptions* options);

}  // namespace ferry

#endif  // FERRY_SERVER_FLAGS_H_
