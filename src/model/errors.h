// Error types and exit codes: library code throws these, only main() turns them into exit codes.
// A usage or input error is always one line that names the field or flag and the bad value.
#pragma once
#include <stdexcept>
#include <string>

namespace attn {

// Exit codes of every subcommand (documented in README.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitMismatch = 1; // a check failed: wrong results
inline constexpr int kExitUsage = 2;    // bad flags, bad input files, impossible shapes
inline constexpr int kExitNoDevice = 3; // the requested device does not exist or cannot run
inline constexpr int kExitInternal = 4; // a bug or an environment failure (CUDA error, I/O)

// Bad flags, malformed input files, invalid shapes or parameters.
class InputError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The requested device (GPU index, backend) is not there or cannot run work.
class DeviceUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Kernel code (a plugin's, a Python module's) crashed, exited or hung its worker outside a run
// that could be recorded as a fault (while asking it what it accepts): exit 1, as a fault.
class KernelFault : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The device is in a state this process cannot recover from (a sticky CUDA error such as an
// illegal address): the measurement in flight is a fault, and the worker process must end so
// that a fresh one can carry on.
class DeviceFault : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace attn
