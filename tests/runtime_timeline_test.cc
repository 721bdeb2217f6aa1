// The timeline file parses as JSON (Chrome trace events) and holds, per tensor, negotiation,
// queueing, the fusion-buffer copies and the collective with dtype, shape and bytes, under
// Horovod's names and layout (a process per tensor; NEGOTIATE_ALLREDUCE, then a top-level
// ALLREDUCE around QUEUE, MEMCPY_IN_FUSION_BUFFER, the library's collective and
// MEMCPY_OUT_FUSION_BUFFER; CYCLE_START markers), so that tools written for Horovod's timelines
// read ronde's; a timeline cut short by a dying job is still readable the way the viewers read it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "support/runtime_harness.h"
#include "support/runtime_harness_require.h"

namespace ronde::testing {
namespace {

using nlohmann::json;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void runSteps(Runtime& rt, int steps, const std::string& prefix) {
  for (int step = 0; step < steps; ++step) {
    std::vector<std::shared_ptr<Handle>> handles;
    for (int i = 0; i < 4; ++i) {
      Request r;
      r.name = prefix + std::to_string(i);
      r.input = r.output = filledFloats(static_cast<size_t>(16 + i), 1.0f);
      handles.push_back(rt.enqueue(r));
    }
    Request g;
    g.kind = RequestKind::kAllgather;
    g.name = prefix + "gather";
    g.input = filledFloats(3, 1.0f);
    handles.push_back(rt.enqueue(g));
    for (auto& h : handles) h->wait();
  }
}

TEST(RuntimeTimeline, FileIsJsonWithTheExpectedEvents) {
  RankSpec spec;
  spec.size = 2;
  std::string path = "/tmp/ronde-timeline-" + std::to_string(::getpid()) + ".json";
  Settings settings = runtimeTestSettings();
  settings.timeline_path = path;
  settings.timeline_mark_cycles = true;
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    runSteps(*rt, 3, "grad.");
    rt->shutdown();
    if (ctx.rank != 0) return;
    json events = json::parse(readFile(path));  // throws on invalid JSON
    REQUIRE(events.is_array() && !events.empty(), "an array of events");
    std::map<int, std::string> rows;                          // pid -> tensor name
    std::map<std::string, std::set<std::string>> activities;  // tensor -> activities seen
    struct Span {
      int64_t start, end;
    };
    std::map<std::string, std::vector<Span>> top, nested;  // grad.0's spans by kind
    bool cycle_marker = false, cached = false, args_ok = false, epoch = false;
    for (const json& e : events) {
      REQUIRE(e.contains("ph") && e.contains("name"), "every event has ph and name: " << e.dump());
      if (e["ph"] == "M" && e["name"] == "process_name") {
        if (e["pid"] == 0) epoch = e["args"].contains("start_time_since_epoch_in_micros");
        else rows[e["pid"].get<int>()] = e["args"]["name"];
      }
      if (e["ph"] == "i" && e["name"] == "CYCLE_START") cycle_marker = true;
      if (e["ph"] != "X") continue;
      REQUIRE(e.contains("ts") && e.contains("dur") && e.contains("pid"), "complete event fields");
      std::string tensor = rows.at(e["pid"].get<int>());
      const std::string name = e["name"].get<std::string>();
      activities[tensor].insert(name);
      if (name == "NEGOTIATE_ALLREDUCE" && tensor == "grad.1") {
        args_ok = e["args"]["dtype"] == "float32" && e["args"]["shape"] == "[17]" &&
                  e["args"]["bytes"] == 68;
        if (e["args"]["cached"] == true) cached = true;
      }
      if (tensor == "grad.0") {
        Span s{e["ts"].get<int64_t>(), e["ts"].get<int64_t>() + e["dur"].get<int64_t>()};
        (name == "ALLREDUCE" ? top : nested)[name].push_back(s);
      }
    }
    for (const char* a : {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER",
                          "RONDE_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"}) {
      REQUIRE(activities["grad.0"].count(a), "grad.0 lacks " << a);
    }
    // Each step's QUEUE, copies and collective lie inside that step's top-level ALLREDUCE.
    REQUIRE(top["ALLREDUCE"].size() == 3, "one top-level ALLREDUCE per step");
    for (const char* a : {"QUEUE", "MEMCPY_IN_FUSION_BUFFER", "RONDE_ALLREDUCE"}) {
      for (const Span& s : nested[a]) {
        bool inside = false;
        for (const Span& t : top["ALLREDUCE"]) inside |= t.start <= s.start && s.end <= t.end;
        REQUIRE(inside, a << " at " << s.start << " lies outside every top-level ALLREDUCE");
      }
    }
    REQUIRE(activities["grad.gather"].count("NEGOTIATE_ALLGATHER") &&
                activities["grad.gather"].count("ALLGATHER") &&
                activities["grad.gather"].count("RONDE_ALLGATHER"),
            "allgather spans");
    REQUIRE(args_ok, "NEGOTIATE_ALLREDUCE carries dtype, shape and bytes");
    REQUIRE(cached, "later steps negotiate on the cached path");
    REQUIRE(cycle_marker, "CYCLE_START markers");
    REQUIRE(epoch, "process 0 carries start_time_since_epoch_in_micros");
    std::remove(path.c_str());
  });
}

TEST(RuntimeTimeline, StartedAndStoppedAtRunTimeAndReadableAfterADeath) {
  RankSpec spec;
  spec.size = 2;
  std::string path = "/tmp/ronde-timeline-run-" + std::to_string(::getpid()) + ".json";
  std::string cut = path + ".cut";
  runRuntimeRanks(
      spec, runtimeTestSettings(), [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
        runSteps(*rt, 1, "before.");
        rt->startTimeline(path, false);
        runSteps(*rt, 2, "during.");
        rt->stopTimeline();
        runSteps(*rt, 1, "after.");
        // A job that dies with its timeline open: the file ends in the middle of the array.
        rt->startTimeline(cut, false);
        runSteps(*rt, 2, "cut.");
        Request bar;
        bar.kind = RequestKind::kBarrier;
        rt->enqueue(bar)->wait();
        if (ctx.rank != 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer catches up
        json events = json::parse(readFile(path));
        std::set<std::string> tensors;
        for (const json& e : events) {
          if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] != 0)
            tensors.insert(e["args"]["name"].get<std::string>());
        }
        REQUIRE(
            tensors.count("during.0") && !tensors.count("before.0") && !tensors.count("after.0"),
            "only what ran while the timeline was on");
        // What chrome://tracing and Perfetto do with an unterminated array: drop the trailing
        // comma and close it.
        std::string text = readFile(cut);
        REQUIRE(text.size() > 2 && text.substr(text.size() - 2) == ",\n",
                "events end with a comma");
        text = text.substr(0, text.size() - 2) + "]";
        json cut_events = json::parse(text);
        bool seen = false;
        for (const json& e : cut_events) seen |= e["name"] == "ALLREDUCE";
        REQUIRE(seen, "the cut timeline holds the collectives");
        std::remove(path.c_str());
        ::_exit(0);  // die with the timeline open (the parent sees success)
      });
  std::remove(cut.c_str());
}

// Horovod's HOROVOD_TIMELINE=DYNAMIC: nothing is written at init (no file named DYNAMIC),
// and start_timeline() then writes where it is told.
TEST(RuntimeTimeline, DynamicMeansStartedLaterNotAFileNamedDynamic) {
  RankSpec spec;
  spec.size = 2;
  char directory_template[] = "/tmp/ronde-timeline-dynamic-XXXXXX";
  REQUIRE(::mkdtemp(directory_template) != nullptr, "mkdtemp");
  const std::string directory = directory_template;
  const std::string path = directory + "/later.json";
  Settings settings = runtimeTestSettings();
  settings.timeline_path = kDynamicTimeline;
  // The ranks start in `directory`, where a timeline file named after the setting would land.
  char previous[4096];
  REQUIRE(::getcwd(previous, sizeof(previous)) != nullptr && ::chdir(directory.c_str()) == 0,
          "chdir");
  runRuntimeRanks(spec, settings, [&](std::unique_ptr<Runtime>& rt, RuntimeContext& ctx) {
    runSteps(*rt, 1, "before.");
    rt->startTimeline(path, false);
    runSteps(*rt, 1, "during.");
    rt->shutdown();
    if (ctx.rank != 0) return;
    REQUIRE(::access((directory + "/DYNAMIC").c_str(), F_OK) != 0, "no file named DYNAMIC");
    json events = json::parse(readFile(path));
    bool during = false;
    for (const json& e : events) {
      during |= e["name"] == "process_name" && e["args"]["name"] == "during.0";
    }
    REQUIRE(during, "start_timeline() wrote the timeline");
  });
  REQUIRE(::chdir(previous) == 0, "chdir back");
  std::remove(path.c_str());
  ::rmdir(directory.c_str());
}

}  // namespace
}  // namespace ronde::testing
