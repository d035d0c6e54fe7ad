// PLACEHOLDER, to be replaced at merge by the CPU-backend branch's backend factory: no backend
// exists on this branch yet, so every spec is refused and `replay --backend` reports exit 3.
#include "src/backend.h"
#include "src/errors.h"

namespace attn {

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& /*opt*/) {
  throw DeviceUnavailable("backend '" + spec + "' is not available in this build");
}

} // namespace attn
