// PLACEHOLDER until the CPU backend branch is merged (it replaces this file): no backend is
// built into this tree yet, so every device spec is reported unavailable.
#include "src/backend.h"
#include "src/errors.h"

namespace attn {

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  throw DeviceUnavailable("no backend for '" + spec + "' is built into this binary yet");
}

} // namespace attn
