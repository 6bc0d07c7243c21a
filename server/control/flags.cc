// The control plane's flags (ControlServiceOptions). common/option_flags.h says how they
// bind.
#include <string>

#include "common/auth_token.h"
#include "common/option_flags.h"
#include "common/status_macros.h"
#include "server/control/control_service.h"

namespace ferry {
namespace {

absl::Status SetAuthToken(const std::string& path, ControlServiceOptions& options) {
  if (path.empty()) return absl::OkStatus();
  FERRY_ASSIGN_OR_RETURN(options.auth_token, ReadAuthToken(path));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ferry

FERRY_OPTION_FLAG(ferry::ControlServiceOptions, ticket_ttl, ticket_ttl,
                  "How long a stream ticket lives.");
FERRY_OPTION_FLAG_FN(ferry::ControlServiceOptions, std::string, auth_token_file, "",
                     "File holding a shared secret; when set, every control-plane call must "
                     "carry 'authorization: Bearer <secret>'.",
                     ferry::SetAuthToken);
