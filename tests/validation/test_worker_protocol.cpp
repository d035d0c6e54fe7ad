// The worker protocol: every message type survives its encoding field by field (NaN and
// infinities included), and what is not a message of this protocol is refused with a reason.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "src/validation/worker_protocol.h"

namespace attn {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInfinity = std::numeric_limits<double>::infinity();

template <class T> T round_trip(const T& m) {
  const std::string line = encode_message(m);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per message: " << line;
  const WorkerMessage back = decode_message(line);
  EXPECT_TRUE(std::holds_alternative<T>(back)) << line;
  // Encoding what came back gives the same line: no field is lost or changed on the way.
  EXPECT_EQ(encode_message(back), line);
  return std::get<T>(back);
}

RunIdentity some_run() {
  return {"cpu | decode_v2[partition=256,split=1] | decode/edges/fp16#3",
          KernelConfig{Family::decode_v2, {{"partition", 256}, {"split", 1}}},
          {{"device", "cpu"}, {"case_seed", uint64_t(18446744073709551557ull)}}};
}

CheckedRunResult full_result() {
  CheckedRunResult r;
  r.status = RunStatus::failed;
  r.reason = "wrong \"results\"\n\tand a tab";
  CheckFigures c;
  c.report.pass = false;
  c.report.norm_rel_err = kInfinity;
  c.report.max_abs_err = 0.1 + 0.2; // not exactly representable in few digits
  c.report.max_lse_err = -kInfinity;
  c.report.checked = int64_t(1) << 40;
  c.report.bad = 3;
  c.report.unwritten = 1;
  c.report.nonfinite = 2;
  c.report.lse_bad = 1;
  c.report.first = {{6, 1, 17, kNaN, 0.25, "nan"}, {6, 2, -1, -kInfinity, -3.5, "mismatch"}};
  c.rows_checked = 7;
  c.rows_total = 9;
  c.lse_checked = false;
  c.report.lse_checked = false;
  c.where = {"seq 6, ctx 257: last block of 16 (17 in all) holds 1 key", "seq 6, \"quoted\""};
  c.spread = "2 wrong (row, head) pairs: heads 1, 2 of 4 (0, 3 right); sequence #6 (ctx 257) of 9";
  r.check = c;
  TimingResult t;
  t.median_s = 1.2345678901234567e-5;
  t.min_s = 1e-300;
  t.max_s = 2.0;
  t.p25_s = 1e-5;
  t.p75_s = 1.5e-5;
  t.rel_noise = kNaN;
  t.reps = 17;
  t.converged = true;
  t.warmup_calls = 4;
  t.warmup_s = 0.05;
  t.method = "cuda-events, L2 flushed";
  t.clocks = ClockReading{"nvml", 1755, 1980, {"sw_thermal", "hw_slowdown"}, true};
  t.cpu_wait_share = 0.375;
  t.attempts = 3;
  r.timing = t;
  r.causes = {"the sliding window is ignored", "ünïcödé"};
  r.saved = "/tmp/dump.safetensors";
  r.seconds = 0.125;
  return r;
}

TEST(WorkerProtocol, EveryMessageTypeRoundTrips) {
  EXPECT_EQ(round_trip(SayMsg{"sweep: profile quick"}).text, "sweep: profile quick");
  EXPECT_EQ(round_trip(LogMsg{"compiling 4 kernels: 1/4"}).text, "compiling 4 kernels: 1/4");

  DeviceInfo d;
  d.backend = "cuda";
  d.id = "cuda:1";
  d.name = "NVIDIA H200";
  d.uuid = "GPU-1234";
  d.sm_count = 132;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.memory_bytes = int64_t(141) << 30;
  d.l2_bytes = 60 << 20;
  d.driver_version = "580.1";
  d.runtime_version = "13.0";
  d.threads = 0;
  const OpenedMsg o = round_trip(OpenedMsg{d, {{"source", "plugin"}, {"name", "x"}}});
  EXPECT_EQ(o.device.to_json(), d.to_json());
  EXPECT_EQ(o.device.threads, d.threads);
  EXPECT_EQ(o.kernels.value("name", ""), "x");

  const PlanMsg p = round_trip(PlanMsg{120, 7});
  EXPECT_EQ(p.total, 120);
  EXPECT_EQ(p.resumed, 7);

  const BeginMsg b = round_trip(BeginMsg{"k", 12.5, true, some_run()});
  EXPECT_EQ(b.key, "k");
  EXPECT_EQ(b.deadline_s, 12.5);
  EXPECT_TRUE(b.fault_unit);
  ASSERT_TRUE(b.run.has_value());
  EXPECT_EQ(b.run->key, some_run().key);
  EXPECT_EQ(b.run->config, some_run().config);
  EXPECT_EQ(b.run->context, some_run().context);
  const BeginMsg phase = round_trip(BeginMsg{"reference of x", 0.0, false, std::nullopt});
  EXPECT_FALSE(phase.fault_unit);
  EXPECT_FALSE(phase.run.has_value());

  (void)round_trip(EndMsg{});

  const CheckedRunResult want = full_result();
  const ResultMsg res = round_trip(ResultMsg{some_run(), want});
  const CheckedRunResult& got = res.result;
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.reason, want.reason);
  ASSERT_TRUE(got.check.has_value());
  EXPECT_EQ(got.check->report.norm_rel_err, kInfinity);
  EXPECT_EQ(got.check->report.max_abs_err, want.check->report.max_abs_err);
  EXPECT_EQ(got.check->report.max_lse_err, -kInfinity);
  EXPECT_EQ(got.check->report.checked, int64_t(1) << 40);
  ASSERT_EQ(got.check->report.first.size(), 2u);
  EXPECT_TRUE(std::isnan(got.check->report.first[0].got));
  EXPECT_EQ(got.check->report.first[1].dim, -1);
  EXPECT_EQ(got.check->report.first[1].got, -kInfinity);
  EXPECT_EQ(got.check->report.summary(), want.check->report.summary());
  EXPECT_EQ(got.check->report.details(), want.check->report.details());
  EXPECT_EQ(got.check->rows_checked, 7);
  EXPECT_FALSE(got.check->lse_checked);
  EXPECT_FALSE(got.check->report.lse_checked);
  EXPECT_EQ(got.check->where, want.check->where);
  EXPECT_EQ(got.check->spread, want.check->spread);
  ASSERT_TRUE(got.timing.has_value());
  EXPECT_EQ(got.timing->median_s, want.timing->median_s);
  EXPECT_EQ(got.timing->min_s, 1e-300);
  EXPECT_TRUE(std::isnan(got.timing->rel_noise));
  EXPECT_EQ(got.timing->cpu_wait_share, 0.375);
  EXPECT_EQ(got.timing->attempts, 3);
  EXPECT_EQ(to_json(*got.timing).dump(), to_json(*want.timing).dump());
  EXPECT_EQ(got.causes, want.causes);
  EXPECT_EQ(got.saved, want.saved);
  EXPECT_EQ(got.seconds, want.seconds);

  CheckedRunResult skipped;
  skipped.status = RunStatus::skipped;
  skipped.reason = "split=1 needs a GQA group";
  const ResultMsg bare = round_trip(ResultMsg{RunIdentity{"file", std::nullopt, {}}, skipped});
  EXPECT_FALSE(bare.run.config.has_value());
  EXPECT_FALSE(bare.result.check.has_value());
  EXPECT_FALSE(bare.result.timing.has_value());

  EXPECT_EQ(round_trip(ReturnMsg{3}).code, 3);
  for (ExceptionKind k : {ExceptionKind::input, ExceptionKind::device, ExceptionKind::fault,
                          ExceptionKind::internal}) {
    const ExceptionMsg e = round_trip(ExceptionMsg{k, "what"});
    EXPECT_EQ(e.kind, k);
    EXPECT_EQ(e.what, "what");
  }
}

TEST(WorkerProtocol, EveryStatusHasAName) {
  for (RunStatus s : {RunStatus::passed, RunStatus::failed, RunStatus::skipped, RunStatus::error,
                      RunStatus::fault}) {
    EXPECT_EQ(parse_run_status(run_status_name(s)), s);
  }
  EXPECT_FALSE(parse_run_status("ok").has_value());
}

// Each malformed line and a phrase its refusal must contain.
TEST(WorkerProtocol, WhatIsNotAMessageIsRefusedWithItsReason) {
  const std::string good = encode_message(ResultMsg{some_run(), full_result()});
  const std::pair<std::string, std::string> bad[] = {
      {"", "not JSON"},
      {good.substr(0, good.size() / 2), "not JSON"},
      {"[1, 2]", "not an object"},
      {R"({"type": "end"})", "has no 'v'"},
      {R"({"v": 1, "type": "end"})", "protocol version 1"},
      {R"({"v": "1", "type": "end"})", "protocol version"},
      {R"({"v": 2})", "has no 'type'"},
      {R"({"v": 2, "type": "shout"})", "unknown type 'shout'"},
      {R"({"v": 2, "type": "say"})", "has no 'text'"},
      {R"({"v": 2, "type": "say", "text": 5})", "'text' is not a string"},
      {R"({"v": 2, "type": "plan", "total": 1.5, "resumed": 0})", "'total' is not an integer"},
      {R"({"v": 2, "type": "plan", "total": 1e99, "resumed": 0})", "not an integer"},
      {R"({"v": 2, "type": "plan", "total": 99999999999, "resumed": 0})", "out of range"},
      {R"({"v": 2, "type": "begin", "key": "k", "deadline_s": 1, "fault_unit": "yes"})",
       "'fault_unit'"},
      {R"({"v": 2, "type": "begin", "key": "k", "deadline_s": "soon", "fault_unit": false})",
       "'deadline_s' is not a number"},
      {R"({"v": 2, "type": "exception", "kind": "oops", "what": ""})", "unknown kind 'oops'"},
      {R"({"v": 2, "type": "result", "run": {"key": "k", "context": {}}})", "has no 'result'"},
  };
  for (const auto& [line, says] : bad) {
    try {
      (void)decode_message(line);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos)
          << "line: " << line << "\nrefusal: " << e.what();
    }
  }
  // A result whose status or configuration is not one of ours.
  json j = json::parse(good);
  j["result"]["status"] = "ok";
  EXPECT_THROW((void)decode_message(j.dump()), ProtocolError);
  j = json::parse(good);
  j["run"]["config"] = {{"family", "decode_v9"}};
  EXPECT_THROW((void)decode_message(j.dump()), ProtocolError);
}

} // namespace
} // namespace attn
