// What an operator sees of refitd: the JSON log lines and the Prometheus
// metrics that a committed round, an aborted round and a shutdown with a
// round in flight produce (RefitServer + RefitClient on loopback), the
// /metrics listener, and the exposition checked by `promtool check metrics`.
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/refit_client.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/protocol_version.h"
#include "server/log.h"
#include "server/metrics_http.h"
#include "server/refit_server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "testing/health_check.h"
#include "testing/name_matching_plan.h"

namespace refit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

v1::Registration Reg(v1::Side side, int rank) {
  v1::Registration r;
  r.set_protocol_version(kProtocolVersion);
  auto* id = r.mutable_identity();
  id->set_job("job");
  id->set_side(side);
  id->set_engine_id(side == v1::SIDE_ENGINE ? "A" : "");
  id->set_rank(rank);
  id->set_world_size(1);
  id->set_host_id(side == v1::SIDE_ENGINE ? "host1" : "host0");
  id->set_device("cpu");
  id->set_transport(v1::TRANSPORT_GLOO);
  r.set_model_config("tiny-llama");
  r.set_convention(side == v1::SIDE_TRAINER ? "megatron:tp=1" : "vllm:tp=1");
  auto* b = r.add_buffers();
  b->set_name("w");
  b->add_shape(4);
  b->set_dtype(3);  // F32
  b->set_byte_size(16);
  return r;
}

std::unique_ptr<RefitClient> Client(int port) {
  RefitClient::Options o;
  o.target = absl::StrCat("127.0.0.1:", port);
  o.rpc_timeout = absl::Seconds(5);
  o.heartbeat_interval = absl::Milliseconds(200);
  o.connect_timeout = absl::Seconds(5);
  auto c = RefitClient::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Captures refitd's log as JSON lines while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_formatter(MakeJsonFormatter());
    ServerLog().sinks().push_back(sink_);
  }
  ~LogCapture() { ServerLog().sinks().pop_back(); }

  // Returns the lines whose msg starts with `event`.
  std::vector<nlohmann::json> Lines(const std::string& event) {
    std::vector<nlohmann::json> found;
    std::istringstream in(out_.str());
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j["msg"].get<std::string>().rfind(event, 0) == 0) found.push_back(j);
    }
    return found;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

struct Pair {
  std::unique_ptr<RefitServer> server;
  std::unique_ptr<RefitClient> trainer, engine;
};

Pair Start() {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  Pair p;
  auto s = RefitServer::Start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  p.server = std::move(*s);
  p.trainer = Client(p.server->port());
  p.engine = Client(p.server->port());
  EXPECT_TRUE(p.trainer->Register(Reg(v1::SIDE_TRAINER, 0)).ok());
  EXPECT_TRUE(p.engine->Register(Reg(v1::SIDE_ENGINE, 0)).ok());
  return p;
}

// Starts round `version` and waits until both members saw it start.
void StartRound(Pair& p, int64_t version) {
  absl::Status s;
  for (int i = 0; i < 100; ++i) {  // UNAVAILABLE while the plan is built
    s = p.trainer->StartRound(version, In(absl::Seconds(5)));
    if (s.code() != absl::StatusCode::kUnavailable) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(s.ok()) << s;
  for (RefitClient* c : {p.trainer.get(), p.engine.get()}) {
    auto v = c->WaitForRound(In(absl::Seconds(5)));
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_EQ(*v, version);
  }
}

// Returns `promtool check metrics`'s verdict on `text`.
std::string Promtool(const std::string& text) {
  const std::string path = absl::StrCat(
      getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp", "/metrics.txt");
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return "cannot write " + path;
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
  FILE* p = popen(("promtool check metrics < " + path + " 2>&1; echo rc=$?").c_str(), "r");
  if (p == nullptr) return "cannot run promtool";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  return out;
}

TEST(ObservabilityTest, ACommittedAndAnAbortedRoundInTheLogAndTheMetrics) {
  LogCapture log;
  Pair p = Start();
  StartRound(p, 1);
  ASSERT_TRUE(p.trainer->ReportDone(1, {1000, 0.5, 4096}, In(absl::Seconds(5))).ok());
  // The round in flight shows each report so far with its figures.
  absl::StatusOr<v1::StatusResponse> st = p.engine->GetStatus(In(absl::Seconds(5)));
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->rounds_size(), 1);
  const v1::RoundSummary& running = st->rounds(0);
  EXPECT_EQ(running.outcome(), "running");
  ASSERT_EQ(running.reports_size(), 1);
  EXPECT_EQ(running.reports(0).member_id(), "trainer/job/0");
  EXPECT_EQ(running.reports(0).bytes(), 1000);
  EXPECT_EQ(running.reports(0).peak_staging_bytes(), 4096);
  EXPECT_EQ(running.peak_staging_bytes(), 4096);
  EXPECT_EQ(running.waiting_size(), 1);
  ASSERT_TRUE(p.engine->ReportDone(1, {3000, 0.75, 0}, In(absl::Seconds(5))).ok());
  ASSERT_TRUE(p.trainer->AwaitOutcome(1, In(absl::Seconds(5))).ok());
  StartRound(p, 2);
  ASSERT_TRUE(p.engine->ReportFailed(2, "NCCL timeout", In(absl::Seconds(5))).ok());
  EXPECT_EQ(p.trainer->AwaitOutcome(2, In(absl::Seconds(5))).code(),
            absl::StatusCode::kAborted);

  std::vector<nlohmann::json> reports = log.Lines("member reported");
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0]["round"], 1);
  EXPECT_EQ(reports[0]["bytes"], 1000);
  EXPECT_EQ(reports[0]["transport"], "gloo");
  EXPECT_EQ(reports[0]["peak_staging_bytes"], 4096);
  EXPECT_EQ(reports[1]["peak_staging_bytes"], 0);
  EXPECT_EQ(reports[1]["member"], "engine/job/A/0");
  EXPECT_EQ(reports[2]["msg"].get<std::string>().rfind("member reported failure", 0), 0u);
  EXPECT_EQ(reports[2]["reason"], "NCCL timeout");
  std::vector<nlohmann::json> committed = log.Lines("round committed");
  ASSERT_EQ(committed.size(), 1u);
  EXPECT_EQ(committed[0]["round"], 1);
  // The round's bytes: what the engine rank received (3000), not the
  // trainer's 1000 sent added; over the slowest member's 0.75 s.
  EXPECT_EQ(committed[0]["bytes"], 3000);
  EXPECT_EQ(committed[0]["bytes_per_second"], 4000);
  EXPECT_EQ(committed[0]["engine_ranks"], 1);
  EXPECT_EQ(committed[0]["members"], 2);
  EXPECT_EQ(committed[0]["slowest"], "engine/job/A/0");
  EXPECT_EQ(committed[0]["peak_staging_bytes"], 4096);
  EXPECT_EQ(committed[0]["peak_staging_member"], "trainer/job/0");
  EXPECT_EQ(committed[0]["level"], "info");
  std::vector<nlohmann::json> aborted = log.Lines("round aborted");
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0]["round"], 2);
  EXPECT_EQ(aborted[0]["cause"], "member_failed");
  EXPECT_THAT(aborted[0]["reason"].get<std::string>(), HasSubstr("NCCL timeout"));
  EXPECT_EQ(aborted[0]["level"], "warning");

  const std::string m = p.server->MetricsText();
  EXPECT_THAT(m, HasSubstr("\nrefit_rounds_committed_total 1\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_rounds_aborted_total{reason=\"member_failed\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_round_duration_seconds_count 2\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_last_round_bytes 3000\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_last_round_transfer_seconds 0.75\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_last_round_bytes_per_second 4000\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_round_bytes_total 3000\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_member_bytes_total{transport=\"gloo\"} 4000\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_last_round_peak_staging_bytes 4096\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_members{side=\"engine\",state=\"idle\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_plan_build_seconds_count 1\n"));
  // Engine A: version 1 committed, then round 2 aborted on it.
  EXPECT_THAT(m, HasSubstr("\nrefit_engine_committed_version{engine=\"A\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("\nrefit_engine_torn{engine=\"A\"} 1\n"));
  // No label names a member: series do not change with every round.
  EXPECT_THAT(m, Not(HasSubstr("member=")));
  EXPECT_THAT(Promtool(m), HasSubstr("rc=0")) << m;
}

// Returns each sample line's value by series ("name{labels}").
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    double v = 0;
    if (absl::SimpleAtod(line.substr(sp + 1), &v)) m[line.substr(0, sp)] = v;
  }
  return m;
}

TEST(ObservabilityTest, NamesUnitsAndBucketsAsPrometheusUsersExpect) {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  auto s = RefitServer::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string m = (*s)->MetricsText();
  std::map<std::string, double> v = Samples(m);
  // Every series of a closed set is there before anything happened.
  for (const char* side : {"trainer", "engine"}) {
    for (const char* state : {"idle", "in_round", "reported"}) {
      EXPECT_EQ(v.count(absl::StrCat("refit_members{side=\"", side, "\",state=\"", state,
                                     "\"}")),
                1u)
          << side << " " << state;
    }
  }
  for (const char* t : {"gloo", "nccl", "pull"}) {
    EXPECT_EQ(v.count(absl::StrCat("refit_member_reports_total{transport=\"", t, "\"}")), 1u);
  }
  EXPECT_EQ(v.count("refit_rounds_aborted_total{reason=\"timeout\"}"), 1u);
  // Round buckets from 1 ms (GPU rounds take 8-45 ms); planning is a histogram.
  EXPECT_EQ(v.count("refit_round_duration_seconds_bucket{le=\"0.001\"}"), 1u);
  EXPECT_EQ(v.count("refit_round_duration_seconds_bucket{le=\"0.01\"}"), 1u);
  EXPECT_EQ(v.count("refit_plan_build_seconds_bucket{le=\"0.001\"}"), 1u);
  // Build and process figures.
  EXPECT_THAT(m, HasSubstr("\nrefit_build_info{version=\""));
  for (const char* p : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                        "process_open_fds", "process_max_fds",
                        "process_start_time_seconds"}) {
    EXPECT_EQ(v.count(p), 1u) << p;
  }
  // Base units and conventional suffixes: counters end in _total, no GB/s.
  EXPECT_THAT(m, Not(HasSubstr("gbps")));
  std::istringstream in(m);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    ASSERT_EQ(w.size(), 4u) << line;
    if (w[3] == "counter") EXPECT_TRUE(absl::EndsWith(w[2], "_total")) << line;
  }
  EXPECT_THAT(Promtool(m), HasSubstr("rc=0")) << m;
}

// Returns the page at http://127.0.0.1:port/path, as a scraper sees it;
// "rc=N" appended when the request failed.
std::string HttpGet(int port, const std::string& path) {
  FILE* p = popen(
      absl::StrCat("python3 -c \"import sys, urllib.request, urllib.error\n"
                   "try: print(urllib.request.urlopen('http://127.0.0.1:",
                   port, path, "', timeout=5).read().decode())\n"
                   "except urllib.error.HTTPError as e: print(e.code, e.read().decode())\"")
          .c_str(),
      "r");
  if (p == nullptr) return "cannot run python3";
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = pclose(p);
  if (rc != 0) absl::StrAppend(&out, "rc=", rc);
  return out;
}

TEST(ObservabilityTest, AScrapeDuringARoundShowsEachEnginesWeights) {
  Pair p = Start();
  MetricsHttpServer::Options mo;
  RefitServer* server = p.server.get();
  mo.render = [server] { return server->MetricsText(); };
  auto http = MetricsHttpServer::Start(std::move(mo));
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  std::map<std::string, double> before = Samples(HttpGet(port, "/metrics"));
  EXPECT_EQ(before["refit_engine_committed_version{engine=\"A\"}"], 0);
  EXPECT_EQ(before.count("refit_engine_last_commit_timestamp_seconds{engine=\"A\"}"), 1u);
  EXPECT_EQ(before["refit_round_age_seconds"], 0);  // no round runs
  EXPECT_EQ(before.count("refit_plan_failures_total"), 1u);
  EXPECT_EQ(before["refit_plan_failures_total"], 0);
  StartRound(p, 1);
  absl::SleepFor(absl::Milliseconds(50));
  std::map<std::string, double> during = Samples(HttpGet(port, "/metrics"));
  EXPECT_GE(during["refit_round_age_seconds"], 0.05);  // the running round's age
  EXPECT_LT(during["refit_round_age_seconds"], 30);
  EXPECT_EQ(during["refit_members{side=\"engine\",state=\"in_round\"}"], 1);
  EXPECT_EQ(during["refit_engine_committed_version{engine=\"A\"}"], 0);
  EXPECT_EQ(during["refit_engine_torn{engine=\"A\"}"], 0);
  const double t0 = absl::ToUnixSeconds(absl::Now());
  ASSERT_TRUE(p.trainer->ReportDone(1, {100, 0.01}, In(absl::Seconds(5))).ok());
  ASSERT_TRUE(p.engine->ReportDone(1, {100, 0.02}, In(absl::Seconds(5))).ok());
  ASSERT_TRUE(p.trainer->AwaitOutcome(1, In(absl::Seconds(5))).ok());
  std::map<std::string, double> after = Samples(HttpGet(port, "/metrics"));
  EXPECT_EQ(after["refit_engine_committed_version{engine=\"A\"}"], 1);
  EXPECT_EQ(after["refit_engine_torn{engine=\"A\"}"], 0);
  EXPECT_NEAR(after["refit_engine_last_commit_timestamp_seconds{engine=\"A\"}"], t0, 5);
  EXPECT_EQ(after["refit_last_round_bytes_per_second"], 100 / 0.02);
  EXPECT_EQ(after["refit_round_age_seconds"], 0);
}

TEST(ObservabilityTest, ShutdownAbortsTheRoundInFlightAndTellsTheMembers) {
  LogCapture log;
  Pair p = Start();
  StartRound(p, 1);
  const std::string during = p.server->MetricsText();
  EXPECT_THAT(during, HasSubstr("refit_members{side=\"engine\",state=\"in_round\"} 1\n"));
  ASSERT_TRUE(p.trainer->ReportDone(1, {10, 0.1}, In(absl::Seconds(5))).ok());
  EXPECT_THAT(p.server->MetricsText(),
              HasSubstr("refit_members{side=\"trainer\",state=\"reported\"} 1\n"));
  p.server->Shutdown();
  absl::Status outcome = p.engine->AwaitOutcome(1, In(absl::Seconds(5)));
  EXPECT_EQ(outcome.code(), absl::StatusCode::kAborted) << outcome;
  EXPECT_THAT(outcome.message(), HasSubstr("refitd shutting down"));
  std::vector<nlohmann::json> aborted = log.Lines("round aborted");
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0]["cause"], "shutdown");
  EXPECT_THAT(p.server->MetricsText(),
              HasSubstr("refit_rounds_aborted_total{reason=\"shutdown\"} 1\n"));
}


TEST(ObservabilityTest, HealthSaysNotServingWhileShutdownDrains) {
  RefitServer::Options o;
  o.coordinator.plan_function = NameMatchingPlan;
  o.drain = absl::Seconds(2);
  auto s = RefitServer::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  bool serving = false;
  ASSERT_TRUE(testing::CheckHealth((*s)->port(), &serving, absl::Seconds(2)).ok());
  EXPECT_TRUE(serving);
  // /healthz on the metrics port says the same.
  MetricsHttpServer::Options mo;
  RefitServer* server = s->get();
  mo.render = [server] { return server->MetricsText(); };
  mo.serving = [server] { return server->serving(); };
  auto http = MetricsHttpServer::Start(std::move(mo));
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ(HttpGet((*http)->port(), "/healthz"), "ok\n\n");
  std::thread stopper([&] { (*s)->Shutdown(); });
  bool seen_not_serving = false;
  for (int i = 0; i < 40 && !seen_not_serving; ++i) {
    absl::SleepFor(absl::Milliseconds(25));
    seen_not_serving =
        testing::CheckHealth((*s)->port(), &serving, absl::Seconds(2)).ok() && !serving;
  }
  EXPECT_TRUE(seen_not_serving);
  EXPECT_EQ(HttpGet((*http)->port(), "/healthz"), "503 not serving\n\n");
  stopper.join();
}

TEST(ObservabilityTest, TheMetricsListenerServesTheExposition) {
  MetricsHttpServer::Options o;
  o.render = [] { return std::string("refit_test_total 7\n"); };
  auto s = MetricsHttpServer::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  FILE* p = popen(absl::StrCat("python3 -c \"import urllib.request; print(urllib."
                               "request.urlopen('http://127.0.0.1:",
                               (*s)->port(), "/metrics', timeout=5).read().decode())\"")
                      .c_str(),
                  "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  EXPECT_EQ(pclose(p), 0);
  EXPECT_THAT(out, HasSubstr("refit_test_total 7"));
  EXPECT_EQ(MetricsHttpServer::Start({"127.0.0.1", 70000, [] { return ""; }})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace refit
