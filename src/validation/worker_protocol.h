// The worker protocol: every message a worker process sends its supervisor, typed, one JSON
// object per line with the protocol version ("v") and the message type ("type"). decode_message
// refuses anything else (a cut-off line, another version, a missing field) with a one-line
// reason, which the supervisor turns into a fault of the unit in flight.
#pragma once
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "src/backends/backend.h"
#include "src/backends/plugin/plugin_library.h"
#include "src/validation/run_result.h"

namespace attn {

inline constexpr int kWorkerProtocolVersion = 2;

// A line for the command to print once, however many workers say it ("sweep: profile ...").
struct SayMsg {
  std::string text;
};
// A progress note ("compiling 40 kernels: 12/40").
struct LogMsg {
  std::string text;
};
// The worker opened a kernel set on a device.
struct OpenedMsg {
  DeviceInfo device;
  nlohmann::json kernels = nlohmann::json::object(); // kernels_provenance()
};
// The sweep's plan: measurements in all, and how many an earlier run already made.
struct PlanMsg {
  int total = 0;
  int resumed = 0;
};
// A unit of work begins. A fault unit is one checked run (`run` says which): dying in it is that
// run's fault. Otherwise it is a phase (building a reference, compiling) whose death is nobody's
// fault, and the supervisor gives up after repeated deaths there. deadline_s 0: no deadline.
struct BeginMsg {
  std::string key;
  double deadline_s = 0.0;
  bool fault_unit = true;
  std::optional<RunIdentity> run;
};
// The unit in flight ended.
struct EndMsg {};
// What came of one run.
struct ResultMsg {
  RunIdentity run;
  CheckedRunResult result;
};
// The worker's work returned this exit code.
struct ReturnMsg {
  int code = 0;
};
// The worker's work threw: the supervisor rethrows it as the same kind (or, for `fault`, charges
// the unit in flight).
enum class ExceptionKind { input, device, fault, internal };
struct ExceptionMsg {
  ExceptionKind kind = ExceptionKind::internal;
  std::string what;
};

using WorkerMessage = std::variant<SayMsg, LogMsg, OpenedMsg, PlanMsg, BeginMsg, EndMsg, ResultMsg,
                                   ReturnMsg, ExceptionMsg>;

// A message the supervisor cannot read: what is wrong with it, in one line.
class ProtocolError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// One line of JSON without the newline. Doubles survive exactly, NaN and infinities included.
[[nodiscard]] std::string encode_message(const WorkerMessage& m);
// The message of one line (without its newline); throws ProtocolError.
[[nodiscard]] WorkerMessage decode_message(std::string_view line);

using Emit = std::function<void(const WorkerMessage&)>;

// The worker's end of the protocol: what the work running in a worker says to its supervisor,
// and which runs earlier workers of the same command already finished.
class WorkerLink {
public:
  WorkerLink(Emit emit, const std::set<std::string>& finished)
      : emit_(std::move(emit)), finished_(finished) {}
  void say(std::string text) const { emit_(SayMsg{std::move(text)}); }
  void log(std::string text) const { emit_(LogMsg{std::move(text)}); }
  void opened(const Backend& be) const { emit_(OpenedMsg{be.info(), kernels_provenance(be)}); }
  void plan(int total, int resumed) const { emit_(PlanMsg{total, resumed}); }
  void result(const RunIdentity& run, const CheckedRunResult& r) const { emit_(ResultMsg{run, r}); }
  void begin_run(const RunIdentity& run, double deadline_s) const {
    emit_(BeginMsg{run.key, deadline_s, true, run});
  }
  void begin_phase(const std::string& what) const { emit_(BeginMsg{what, 0.0, false, {}}); }
  // A phase that calls into the kernels (their can_run over every size): a worker that dies in
  // it is the kernels' fault (KernelFault, exit 1), and it has a deadline.
  void begin_kernel_phase(const std::string& what, double deadline_s) const {
    emit_(BeginMsg{what, deadline_s, true, {}});
  }
  void end() const { emit_(EndMsg{}); }
  // The worker's backend, made by `make` inside a kernel phase with the plugins' time to start
  // (plugin_probe_timeout_s): a plugin's init or a Python module's import that hangs or crashes
  // in the worker, after its probe declared it, ends the command as the kernels' fault.
  template <class Make> auto start_kernels(Make&& make) const {
    begin_kernel_phase("starting the kernels (a plugin's init, a Python module's import)",
                       plugin_probe_timeout_s());
    auto be = make();
    end();
    return be;
  }
  // Whether a run (or whatever the command marked, by key) is done: a later worker skips it.
  [[nodiscard]] bool finished(const std::string& key) const { return finished_.count(key) != 0; }

private:
  Emit emit_;
  const std::set<std::string>& finished_;
};

} // namespace attn
