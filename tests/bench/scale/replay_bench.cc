// replay_bench: the cluster analyzer alone, fed in-process with scale_bench's fleet and its
// mixed watch events, on one thread.
//
//   ./build/tests/bench/scale/replay_bench [--sizes=1000,10000,100000] [--events=15000]
//       [--rounds=3] [--seed=1] [--event-rate=0] [--stranded-retention=15m]
//
// Each event is projected from its JSON text (src/k8s/projection.h) and handed to the handlers
// the cluster role's informers call (exporter/cluster/feed.h), exactly what `dralens cluster`
// does with a watch event once it has read it off the socket. What scale_bench adds to this
// (the socket reads, the informers' bookkeeping, three informer threads sharing the analyzer's
// lock and two cores with the API server) is left out, so that the figures move with the
// analyzer and not with the machine: run it to compare two builds, or sizes, of the analyzer.
// Each round draws new events (the fleet moves on) and ends with a scrape checked against the
// fleet's truth, so a figure is counted only when the analyzer got the events right.
//
// Each round also prints the scrape's series count. With --event-rate=N the analyzer runs on a
// simulated clock that moves 1/N s per event, ticking every 5 simulated seconds as the cluster
// role does: what a fleet that sees N events per second exports after hours, in seconds (the
// stranded series retention, --stranded-retention, bounds it). Without it the clock is real and
// a run is too short for any retention to end.
//
// Under `valgrind --tool=callgrind --instr-atstart=no [--cache-sim=yes]` only the events are
// instrumented (projection and apply, not the LISTs or the checks): instructions and simulated
// cache misses per event, which tell work that grows with the fleet from memory that does.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>  // instrumentation only around the events (a no-op natively)
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include "absl/base/attributes.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "exporter/cluster/analyzer.h"
#include "exporter/cluster/feed.h"
#include "src/common/clock.h"
#include "src/k8s/projection.h"
#include "src/telemetry/exposition.h"
#include "src/telemetry/tracing/tracer_provider.h"
#include "tests/bench/scale/events.h"
#include "tests/bench/scale/truth.h"
#include "tests/bench/scale/verify.h"

namespace dralens::bench::scale {
namespace {

using exporter::cluster::Analyzer;
using nlohmann::json;

int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

const k8s::ResourceType& TypeOf(Resource r) {
  switch (r) {
    case Resource::kDeviceClasses:
      return k8s::kDeviceClasses;
    case Resource::kNodes:
      return k8s::kNodes;
    case Resource::kResourceSlices:
      return k8s::kResourceSlices;
    case Resource::kResourceClaims:
      return k8s::kResourceClaims;
    case Resource::kPods:
      return k8s::kPods;
  }
  return k8s::kPods;
}

// The analyzer as the cluster role builds it, with the informers' handlers and projections.
struct Role {
  // `clock`: null for the real one.
  Role(common::Clock* clock, absl::Duration stranded_retention) {
    exporter::cluster::AnalyzerOptions options;
    options.derive_after_sync = true;
    options.clock = clock;
    options.stranded_retention = stranded_retention;
    analyzer = std::make_unique<Analyzer>(registry, tracing->tracer(), std::move(options));
    for (Resource r : kResources) {
      handlers[static_cast<int>(r)] = exporter::cluster::HandlersFor(TypeOf(r), *analyzer);
      projections[static_cast<int>(r)] = exporter::cluster::ProjectionFor(TypeOf(r));
    }
  }
  json Project(Resource r, const std::string& text) const {
    const auto& projection = projections[static_cast<int>(r)];
    if (projection == nullptr) {
      return json::parse(text);
    }
    absl::StatusOr<json> object = k8s::ParseProjected(text, *projection);
    if (!object.ok()) {
      std::fprintf(stderr, "projection failed: %s\n", object.status().ToString().c_str());
      std::exit(1);
    }
    return *std::move(object);
  }
  void Apply(Resource r, const char* type, const json& object) {
    const k8s::InformerHandlers& h = handlers[static_cast<int>(r)];
    if (std::strcmp(type, "DELETED") == 0) {
      h.on_delete(object);
    } else {
      h.on_update(json(), object);
    }
  }
  // The watch events' entries, apart from the LISTs' (which use Project and Apply directly), so
  // that a profile tells them apart: perf by symbol, callgrind with
  // --toggle-collect='*ProjectEvent*' --toggle-collect='*ApplyEvent*'.
  ABSL_ATTRIBUTE_NOINLINE json ProjectEvent(Resource r, const std::string& text) const {
    return Project(r, text);
  }
  ABSL_ATTRIBUTE_NOINLINE void ApplyEvent(Resource r, const char* type, const json& object) {
    Apply(r, type, object);
  }
  // ApplyEvent under a frame of the event's kind (ApplyKind<N>, N its EventKind), so that a
  // profile splits the apply by kind too (tests/bench/scale/README.md shows how). Each instance
  // stores its kind after the call: the store keeps the frame on the stack (no tail call),
  // and instances that differ are not folded into one.
  template <EventKind kKind>
  ABSL_ATTRIBUTE_NOINLINE void ApplyKind(Resource r, const char* type, const json& object) {
    ApplyEvent(r, type, object);
    last_kind = static_cast<int>(kKind);
  }
  static inline volatile int last_kind = -1;
  void ApplyEventOfKind(EventKind kind, Resource r, const char* type, const json& object) {
    switch (kind) {
      case EventKind::kAllocate:
        return ApplyKind<EventKind::kAllocate>(r, type, object);
      case EventKind::kPodStart:
        return ApplyKind<EventKind::kPodStart>(r, type, object);
      case EventKind::kPodStop:
        return ApplyKind<EventKind::kPodStop>(r, type, object);
      case EventKind::kRelease:
        return ApplyKind<EventKind::kRelease>(r, type, object);
      case EventKind::kPodDelete:
        return ApplyKind<EventKind::kPodDelete>(r, type, object);
      case EventKind::kPodAdd:
        return ApplyKind<EventKind::kPodAdd>(r, type, object);
      case EventKind::kTaint:
        return ApplyKind<EventKind::kTaint>(r, type, object);
    }
  }
  std::string Scrape() const {
    return telemetry::Render(
        registry.Collect(), nullptr, telemetry::ExpositionFormat::kPrometheusText,
        {analyzer->ObjectSeriesCollectable().get(), analyzer->TextSeries().get()});
  }

  std::unique_ptr<telemetry::TracerProvider> tracing = telemetry::TracerProvider::CreateNoop();
  prometheus::Registry registry;
  std::unique_ptr<Analyzer> analyzer;
  k8s::InformerHandlers handlers[kResourceCount];
  std::shared_ptr<const k8s::Projection> projections[kResourceCount];
};

// What a scrape holds: its series, and the stranded GPU family's (those above 0 apart).
struct SeriesCount {
  size_t all = 0, stranded = 0, stranded_above_zero = 0;
};

bool Verified(const Role& role, const Fleet& fleet, const char* when,
              SeriesCount* series = nullptr) {
  absl::StatusOr<Scrape> scrape = ParseExposition(role.Scrape());
  if (!scrape.ok()) {
    std::fprintf(stderr, "%s: %s\n", when, scrape.status().ToString().c_str());
    return false;
  }
  VerifyResult v = Verify(*scrape, ComputeTruth(fleet));
  if (!v.complete()) {
    std::fprintf(stderr, "%s: the scrape differs from the truth:\n%s\n", when, v.Diff().c_str());
    return false;
  }
  if (series != nullptr) {
    *series = {};
    for (const auto& [family, samples] : scrape->samples) {
      series->all += samples.size();
    }
    if (auto it = scrape->samples.find("dralens_cluster_stranded_gpus");
        it != scrape->samples.end()) {
      series->stranded = it->second.size();
      series->stranded_above_zero = static_cast<size_t>(std::count_if(
          it->second.begin(), it->second.end(), [](const Sample& s) { return s.value > 0; }));
    }
  }
  return true;
}

double PeakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

struct Event {
  EventKind kind;
  Resource resource;
  const char* type;
  std::string text;
};

struct Options {
  int events = 15000;
  int rounds = 3;
  uint64_t seed = 1;
  int event_rate = 0;  // events per simulated second; 0: the real clock
  absl::Duration stranded_retention = absl::Minutes(15);
};

// The cluster role's ticker: every 5 s.
constexpr absl::Duration kTick = absl::Seconds(5);

bool RunSize(int claims, const Options& o) {
  const int events = o.events;
  const int rounds = o.rounds;
  const uint64_t seed = o.seed;
  FleetOptions fo;
  fo.claims = claims;
  fo.seed = seed;
  Fleet fleet = Generate(fo);
  std::optional<common::FakeClock> clock;
  if (o.event_rate > 0) {
    clock.emplace(absl::Now());
  }
  Role role(clock.has_value() ? &*clock : nullptr, o.stranded_retention);
  const absl::Duration per_event =
      o.event_rate > 0 ? absl::Seconds(1) / o.event_rate : absl::ZeroDuration();
  absl::Duration since_tick;
  const int64_t sync0 = ThreadCpuNanos();
  for (int i = 0; i < kClassCount; ++i) {
    role.Apply(Resource::kDeviceClasses, "ADDED",
               role.Project(Resource::kDeviceClasses, RenderClass(i, fleet).dump()));
  }
  for (size_t i = 0; i < fleet.nodes.size(); ++i) {
    if (fleet.nodes[i].exists) {
      role.Apply(Resource::kNodes, "ADDED",
                 role.Project(Resource::kNodes, RenderNode(fleet, static_cast<int>(i)).dump()));
    }
  }
  role.analyzer->SetNodesSynced();
  for (size_t i = 0; i < fleet.nodes.size(); ++i) {
    role.Apply(
        Resource::kResourceSlices, "ADDED",
        role.Project(Resource::kResourceSlices, RenderSlice(fleet, static_cast<int>(i)).dump()));
  }
  for (size_t i = 0; i < fleet.claims.size(); ++i) {
    role.Apply(
        Resource::kResourceClaims, "ADDED",
        role.Project(Resource::kResourceClaims, RenderClaim(fleet, static_cast<int>(i)).dump()));
  }
  for (size_t i = 0; i < fleet.pods.size(); ++i) {
    if (fleet.pods[i].exists) {
      role.Apply(Resource::kPods, "ADDED",
                 role.Project(Resource::kPods, RenderPod(fleet, static_cast<int>(i)).dump()));
    }
  }
  role.analyzer->SetSynced();
  const double sync_s = (ThreadCpuNanos() - sync0) / 1e9;
  if (!Verified(role, fleet, "after the LISTs")) {
    return false;
  }
  std::printf("[%d] synced: %.2f s CPU (rendering the objects included), peak RSS %.0f MB\n",
              claims, sync_s, PeakRssMb());
  std::fflush(stdout);  // a profiler attaches once this line is out (tests/bench/scale/README.md)

  EventGenerator gen(fleet, seed);
  for (int round = 0; round < rounds; ++round) {
    std::vector<Event> batch;
    for (int i = 0; i < events; ++i) {
      std::optional<WatchEvent> e = gen.NextMixed();
      if (!e.has_value()) {
        break;
      }
      batch.push_back({e->kind, e->resource, e->type, e->object.dump()});
    }
    // Projecting does not depend on the analyzer's state: one pass, then the analyzer's.
    std::vector<json> objects;
    objects.reserve(batch.size());
    const int64_t p0 = ThreadCpuNanos();
    CALLGRIND_START_INSTRUMENTATION;
    for (const Event& e : batch) {
      objects.push_back(role.ProjectEvent(e.resource, e.text));
    }
    const int64_t p1 = ThreadCpuNanos();
    // Events and wall seconds by kind: the thread CPU clock is a system call, not small next to
    // the cheapest events (about 2 us), and on one otherwise idle thread the two clocks agree.
    std::map<EventKind, std::pair<int, double>> by_kind;
    int ticks = 0;
    int64_t tick_nanos = 0;  // the ticks' CPU, apart from the events'

    for (size_t i = 0; i < batch.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      role.ApplyEventOfKind(batch[i].kind, batch[i].resource, batch[i].type, objects[i]);
      const auto t1 = std::chrono::steady_clock::now();
      auto& [n, s] = by_kind[batch[i].kind];
      ++n;
      s += std::chrono::duration<double>(t1 - t0).count();
      if (clock.has_value()) {
        clock->Advance(per_event);
        since_tick += per_event;
        if (since_tick >= kTick) {
          since_tick = absl::ZeroDuration();
          const int64_t k0 = ThreadCpuNanos();
          role.analyzer->Tick();
          tick_nanos += ThreadCpuNanos() - k0;
          ++ticks;
        }
      }
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    const int64_t p2 = ThreadCpuNanos();
    objects.clear();
    const int64_t p3 = ThreadCpuNanos();
    SeriesCount series;
    if (!Verified(role, fleet, "after the events", &series)) {
      return false;
    }
    const double n = static_cast<double>(batch.size());
    std::printf(
        "[%d] round %d: %zu mixed events: %.2f us CPU per event (project %.2f, apply %.2f, "
        "free %.2f); apply by kind:",
        claims, round + 1, batch.size(), (p1 - p0 + p2 - p1 - tick_nanos + p3 - p2) / n / 1e3,
        (p1 - p0) / n / 1e3, (p2 - p1 - tick_nanos) / n / 1e3, (p3 - p2) / n / 1e3);
    for (const auto& [kind, f] : by_kind) {
      std::printf(" %s %.2f", ToString(kind), 1e6 * f.second / f.first);
    }
    std::printf(" us; %zu series (%zu stranded GPU series, %zu of them above 0)", series.all,
                series.stranded, series.stranded_above_zero);
    if (ticks > 0) {
      std::printf("; %d ticks of %.2f ms CPU each (not in the events' figures)", ticks,
                  tick_nanos / 1e6 / ticks);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return true;
}

}  // namespace
}  // namespace dralens::bench::scale

int main(int argc, char** argv) {
  std::vector<int> sizes = {1000, 10000, 100000};
  dralens::bench::scale::Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    int v = 0;
    if (absl::ConsumePrefix(&a, "--sizes=")) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(a, ',')) {
        if (!absl::SimpleAtoi(s, &v) || v < 100) {
          std::fprintf(stderr, "--sizes: %s is not a claim count >= 100\n", std::string(s).c_str());
          return 2;
        }
        sizes.push_back(v);
      }
    } else if (absl::ConsumePrefix(&a, "--events=") && absl::SimpleAtoi(a, &v) && v > 0) {
      o.events = v;
    } else if (absl::ConsumePrefix(&a, "--rounds=") && absl::SimpleAtoi(a, &v) && v > 0) {
      o.rounds = v;
    } else if (absl::ConsumePrefix(&a, "--seed=") && absl::SimpleAtoi(a, &v)) {
      o.seed = static_cast<uint64_t>(v);
    } else if (absl::ConsumePrefix(&a, "--event-rate=") && absl::SimpleAtoi(a, &v) && v >= 0) {
      o.event_rate = v;
    } else if (absl::ConsumePrefix(&a, "--stranded-retention=") &&
               absl::ParseDuration(a, &o.stranded_retention) &&
               o.stranded_retention > absl::ZeroDuration()) {
    } else {
      std::fprintf(stderr,
                   "usage: replay_bench [--sizes=1000,10000,100000] [--events=15000] "
                   "[--rounds=3] [--seed=1] [--event-rate=0] [--stranded-retention=15m]\n");
      return 2;
    }
  }
  for (int claims : sizes) {
    if (!dralens::bench::scale::RunSize(claims, o)) {
      return 1;
    }
  }
  return 0;
}
