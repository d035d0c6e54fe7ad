// The worker protocol's encoding (worker_protocol.h): every message and every field it carries,
// written and read explicitly, so that a worker and its supervisor agree on each one and a
// message that is not exactly this is refused, not half read.
#include "src/validation/worker_protocol.h"

#include <cmath>
#include <limits>

namespace attn {

using nlohmann::json;

namespace {

// JSON has no NaN or infinities: they travel as strings, every other double as a number (which
// nlohmann writes with enough digits to read back the same value).
json real(double d) {
  if (std::isnan(d)) {
    return "nan";
  }
  if (std::isinf(d)) {
    return d > 0 ? "inf" : "-inf";
  }
  return d;
}

// Reads the fields of one JSON object of a message, refusing what is missing or mistyped.
class Fields {
public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) {
      fail("is not an object");
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw ProtocolError(where_ + " " + what);
  }
  [[nodiscard]] bool has(const char* k) const { return j_.contains(k) && !j_.at(k).is_null(); }
  [[nodiscard]] const json& at(const char* k) const {
    if (!j_.contains(k)) {
      fail(std::string("has no '") + k + "'");
    }
    return j_.at(k);
  }
  [[nodiscard]] std::string str(const char* k) const {
    const json& v = at(k);
    if (!v.is_string()) {
      fail(std::string("'") + k + "' is not a string");
    }
    return v.get<std::string>();
  }
  [[nodiscard]] bool flag(const char* k) const {
    const json& v = at(k);
    if (!v.is_boolean()) {
      fail(std::string("'") + k + "' is not a boolean");
    }
    return v.get<bool>();
  }
  [[nodiscard]] int64_t integer(const char* k) const {
    const json& v = at(k);
    if (!v.is_number_integer()) {
      fail(std::string("'") + k + "' is not an integer");
    }
    return v.get<int64_t>();
  }
  [[nodiscard]] int small(const char* k) const {
    const int64_t v = integer(k);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      fail(std::string("'") + k + "' is out of range");
    }
    return int(v);
  }
  [[nodiscard]] double number(const char* k) const {
    const json& v = at(k);
    if (v.is_number()) {
      return v.get<double>();
    }
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "nan") {
        return std::numeric_limits<double>::quiet_NaN();
      }
      if (s == "inf" || s == "-inf") {
        return s == "inf" ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
      }
    }
    fail(std::string("'") + k + "' is not a number");
  }
  [[nodiscard]] std::vector<std::string> strings(const char* k) const {
    const json& v = at(k);
    if (!v.is_array()) {
      fail(std::string("'") + k + "' is not an array");
    }
    std::vector<std::string> out;
    for (const json& e : v) {
      if (!e.is_string()) {
        fail(std::string("'") + k + "' holds a non-string");
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  [[nodiscard]] Fields object(const char* k) const { return Fields(at(k), where_ + "." + k); }
  [[nodiscard]] const std::string& where() const { return where_; }

private:
  const json& j_;
  std::string where_;
};

json device_json(const DeviceInfo& d) {
  return {{"backend", d.backend},
          {"id", d.id},
          {"name", d.name},
          {"uuid", d.uuid},
          {"sm_count", d.sm_count},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"memory_bytes", d.memory_bytes},
          {"l2_bytes", d.l2_bytes},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version},
          {"threads", d.threads}};
}

DeviceInfo read_device(const Fields& f) {
  DeviceInfo d;
  d.backend = f.str("backend");
  d.id = f.str("id");
  d.name = f.str("name");
  d.uuid = f.str("uuid");
  d.sm_count = f.small("sm_count");
  d.cc_major = f.small("cc_major");
  d.cc_minor = f.small("cc_minor");
  d.memory_bytes = f.integer("memory_bytes");
  d.l2_bytes = f.integer("l2_bytes");
  d.driver_version = f.str("driver_version");
  d.runtime_version = f.str("runtime_version");
  d.threads = f.small("threads");
  return d;
}

json timing_json(const TimingResult& t) {
  json j = {{"median_s", real(t.median_s)},
            {"min_s", real(t.min_s)},
            {"max_s", real(t.max_s)},
            {"p25_s", real(t.p25_s)},
            {"p75_s", real(t.p75_s)},
            {"rel_noise", real(t.rel_noise)},
            {"reps", t.reps},
            {"converged", t.converged},
            {"warmup_calls", t.warmup_calls},
            {"warmup_s", real(t.warmup_s)},
            {"method", t.method},
            {"cpu_wait_share", nullptr},
            {"attempts", t.attempts},
            {"clocks", nullptr}};
  if (t.cpu_wait_share) {
    j["cpu_wait_share"] = real(*t.cpu_wait_share);
  }
  if (t.clocks) {
    j["clocks"] = {{"source", t.clocks->source},
                   {"sm_clock_mhz", t.clocks->sm_clock_mhz},
                   {"sm_clock_max_mhz", t.clocks->sm_clock_max_mhz},
                   {"throttle_reasons", t.clocks->throttle_reasons},
                   {"throttled", t.clocks->throttled}};
  }
  return j;
}

TimingResult read_timing(const Fields& f) {
  TimingResult t;
  t.median_s = f.number("median_s");
  t.min_s = f.number("min_s");
  t.max_s = f.number("max_s");
  t.p25_s = f.number("p25_s");
  t.p75_s = f.number("p75_s");
  t.rel_noise = f.number("rel_noise");
  t.reps = f.small("reps");
  t.converged = f.flag("converged");
  t.warmup_calls = f.small("warmup_calls");
  t.warmup_s = f.number("warmup_s");
  t.method = f.str("method");
  if (f.has("cpu_wait_share")) {
    t.cpu_wait_share = f.number("cpu_wait_share");
  }
  t.attempts = f.has("attempts") ? f.small("attempts") : 1;
  if (f.has("clocks")) {
    const Fields c = f.object("clocks");
    ClockReading r;
    r.source = c.str("source");
    r.sm_clock_mhz = c.small("sm_clock_mhz");
    r.sm_clock_max_mhz = c.small("sm_clock_max_mhz");
    r.throttle_reasons = c.strings("throttle_reasons");
    r.throttled = c.flag("throttled");
    t.clocks = std::move(r);
  }
  return t;
}

json check_json(const CheckFigures& c) {
  const CheckReport& r = c.report;
  json first = json::array();
  for (const Mismatch& m : r.first) {
    first.push_back({{"row", m.row},
                     {"head", m.head},
                     {"dim", m.dim},
                     {"got", real(m.got)},
                     {"want", real(m.want)},
                     {"what", m.what}});
  }
  json j = {{"pass", r.pass},
            {"norm_rel_err", real(r.norm_rel_err)},
            {"max_abs_err", real(r.max_abs_err)},
            {"max_lse_err", real(r.max_lse_err)},
            {"checked", r.checked},
            {"bad", r.bad},
            {"unwritten", r.unwritten},
            {"nonfinite", r.nonfinite},
            {"lse_bad", r.lse_bad},
            {"first", first},
            {"rows_checked", c.rows_checked},
            {"rows_total", c.rows_total},
            {"lse_checked", c.lse_checked},
            {"where", c.where},
            {"spread", c.spread}};
  if (!r.overrun.empty()) {
    j["overrun"] = r.overrun;
  }
  if (r.short_by_half_ulp > 0 || r.long_by_half_ulp > 0) {
    j["short_by_half_ulp"] = r.short_by_half_ulp;
    j["long_by_half_ulp"] = r.long_by_half_ulp;
  }
  return j;
}

CheckFigures read_check(const Fields& f) {
  CheckFigures c;
  CheckReport& r = c.report;
  r.pass = f.flag("pass");
  r.norm_rel_err = f.number("norm_rel_err");
  r.max_abs_err = f.number("max_abs_err");
  r.max_lse_err = f.number("max_lse_err");
  r.checked = f.integer("checked");
  r.bad = f.integer("bad");
  r.unwritten = f.integer("unwritten");
  r.nonfinite = f.integer("nonfinite");
  r.lse_bad = f.integer("lse_bad");
  if (f.has("overrun")) {
    r.overrun = f.str("overrun");
  }
  if (f.has("short_by_half_ulp")) {
    r.short_by_half_ulp = f.integer("short_by_half_ulp");
    r.long_by_half_ulp = f.integer("long_by_half_ulp");
  }
  const json& first = f.at("first");
  if (!first.is_array()) {
    f.fail("'first' is not an array");
  }
  for (const json& e : first) {
    const Fields m(e, f.where() + ".first[]");
    r.first.push_back(Mismatch{m.small("row"), m.small("head"), m.small("dim"), m.number("got"),
                               m.number("want"), m.str("what")});
  }
  c.rows_checked = f.small("rows_checked");
  c.rows_total = f.small("rows_total");
  c.lse_checked = f.flag("lse_checked");
  r.lse_checked = c.lse_checked;
  c.where = f.strings("where");
  c.spread = f.str("spread");
  return c;
}

json identity_json(const RunIdentity& id) {
  return {{"key", id.key},
          {"config", id.config ? id.config->to_json() : json(nullptr)},
          {"context", id.context.is_null() ? json::object() : id.context}};
}

RunIdentity read_identity(const Fields& f) {
  RunIdentity id;
  id.key = f.str("key");
  if (f.has("config")) {
    try {
      id.config = KernelConfig::from_json(f.at("config"));
    } catch (const std::exception& e) {
      f.fail(std::string("'config' is not a kernel configuration: ") + e.what());
    }
  }
  id.context = f.at("context");
  if (!id.context.is_object()) {
    f.fail("'context' is not an object");
  }
  return id;
}

json result_json(const CheckedRunResult& r) {
  return {{"status", run_status_name(r.status)},
          {"reason", r.reason},
          {"check", r.check ? check_json(*r.check) : json(nullptr)},
          {"timing", r.timing ? timing_json(*r.timing) : json(nullptr)},
          {"causes", r.causes},
          {"saved", r.saved},
          {"seconds", real(r.seconds)}};
}

CheckedRunResult read_result(const Fields& f) {
  CheckedRunResult r;
  const auto status = parse_run_status(f.str("status"));
  if (!status) {
    f.fail("'status' is not passed, failed, skipped, error or fault");
  }
  r.status = *status;
  r.reason = f.str("reason");
  if (f.has("check")) {
    r.check = read_check(f.object("check"));
  }
  if (f.has("timing")) {
    r.timing = read_timing(f.object("timing"));
  }
  r.causes = f.strings("causes");
  r.saved = f.str("saved");
  r.seconds = f.number("seconds");
  return r;
}

const char* kind_name(ExceptionKind k) {
  switch (k) {
  case ExceptionKind::input:
    return "input";
  case ExceptionKind::device:
    return "device";
  case ExceptionKind::fault:
    return "fault";
  case ExceptionKind::internal:
    break;
  }
  return "internal";
}

// The "type" of each message and its fields.
struct Encoder {
  json operator()(const SayMsg& m) const { return {{"type", "say"}, {"text", m.text}}; }
  json operator()(const LogMsg& m) const { return {{"type", "log"}, {"text", m.text}}; }
  json operator()(const OpenedMsg& m) const {
    return {{"type", "opened"}, {"device", device_json(m.device)}, {"kernels", m.kernels}};
  }
  json operator()(const PlanMsg& m) const {
    return {{"type", "plan"}, {"total", m.total}, {"resumed", m.resumed}};
  }
  json operator()(const BeginMsg& m) const {
    return {{"type", "begin"},
            {"key", m.key},
            {"deadline_s", real(m.deadline_s)},
            {"fault_unit", m.fault_unit},
            {"run", m.run ? identity_json(*m.run) : json(nullptr)}};
  }
  json operator()(const EndMsg&) const { return {{"type", "end"}}; }
  json operator()(const ResultMsg& m) const {
    return {{"type", "result"}, {"run", identity_json(m.run)}, {"result", result_json(m.result)}};
  }
  json operator()(const ReturnMsg& m) const { return {{"type", "return"}, {"code", m.code}}; }
  json operator()(const ExceptionMsg& m) const {
    return {{"type", "exception"}, {"kind", kind_name(m.kind)}, {"what", m.what}};
  }
};

WorkerMessage read_message(const json& j) {
  const Fields f(j, "worker message");
  const json& v = f.at("v");
  if (!v.is_number_integer() || v.get<int64_t>() != kWorkerProtocolVersion) {
    f.fail("speaks protocol version " + v.dump() + ", not " +
           std::to_string(kWorkerProtocolVersion));
  }
  const std::string type = f.str("type");
  const Fields m(j, "worker message '" + type + "'");
  if (type == "say") {
    return SayMsg{m.str("text")};
  }
  if (type == "log") {
    return LogMsg{m.str("text")};
  }
  if (type == "opened") {
    const json& kernels = m.at("kernels");
    if (!kernels.is_object()) {
      m.fail("'kernels' is not an object");
    }
    return OpenedMsg{read_device(m.object("device")), kernels};
  }
  if (type == "plan") {
    return PlanMsg{m.small("total"), m.small("resumed")};
  }
  if (type == "begin") {
    BeginMsg b{m.str("key"), m.number("deadline_s"), m.flag("fault_unit"), std::nullopt};
    if (m.has("run")) {
      b.run = read_identity(m.object("run"));
    }
    // A fault unit without a run is a phase that calls into the kernels (begin_kernel_phase).
    return b;
  }
  if (type == "end") {
    return EndMsg{};
  }
  if (type == "result") {
    return ResultMsg{read_identity(m.object("run")), read_result(m.object("result"))};
  }
  if (type == "return") {
    return ReturnMsg{m.small("code")};
  }
  if (type == "exception") {
    const std::string kind = m.str("kind");
    ExceptionKind k = ExceptionKind::internal;
    if (kind == "input") {
      k = ExceptionKind::input;
    } else if (kind == "device") {
      k = ExceptionKind::device;
    } else if (kind == "fault") {
      k = ExceptionKind::fault;
    } else if (kind != "internal") {
      m.fail("has an unknown kind '" + kind + "'");
    }
    return ExceptionMsg{k, m.str("what")};
  }
  f.fail("has an unknown type '" + type + "'");
}

} // namespace

const char* run_status_name(RunStatus s) {
  switch (s) {
  case RunStatus::passed:
    return "passed";
  case RunStatus::failed:
    return "failed";
  case RunStatus::skipped:
    return "skipped";
  case RunStatus::error:
    return "error";
  case RunStatus::fault:
    return "fault";
  }
  return "error";
}

std::optional<RunStatus> parse_run_status(std::string_view s) {
  for (RunStatus r : {RunStatus::passed, RunStatus::failed, RunStatus::skipped, RunStatus::error,
                      RunStatus::fault}) {
    if (s == run_status_name(r)) {
      return r;
    }
  }
  return std::nullopt;
}

std::string encode_message(const WorkerMessage& m) {
  json j = std::visit(Encoder{}, m);
  j["v"] = kWorkerProtocolVersion;
  // Replacement instead of an exception for invalid UTF-8 (a plugin's message may hold any
  // bytes): a message that cannot be written would end the worker for nothing.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

WorkerMessage decode_message(std::string_view line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    std::string shown(line.substr(0, 60));
    throw ProtocolError("worker message is not JSON (" + std::to_string(line.size()) +
                        " bytes, starting '" + shown + "'): error at byte " +
                        std::to_string(e.byte));
  }
  return read_message(j);
}

} // namespace attn
