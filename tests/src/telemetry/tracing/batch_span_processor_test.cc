#include "src/telemetry/tracing/batch_span_processor.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/telemetry/tracing/in_memory_span_exporter.h"

namespace dralens::telemetry {
namespace {

// Generous bound for waits that normally end in microseconds; reaching it fails the test
// instead of hanging it, and no assertion depends on how long a wait took.
constexpr absl::Duration kPatience = absl::Seconds(10);

// An exporter that holds every Export() until the test releases it (or Shutdown()).
class GatedExporter : public SpanExporter {
 public:
  struct State {
    absl::Mutex mu;
    bool open ABSL_GUARDED_BY(mu) = false;
    bool shut_down ABSL_GUARDED_BY(mu) = false;
    int calls ABSL_GUARDED_BY(mu) = 0;
    std::vector<size_t> batches ABSL_GUARDED_BY(mu);
    size_t exported ABSL_GUARDED_BY(mu) = 0;

    void Open() {
      absl::MutexLock lock(&mu);
      open = true;
    }
    // Waits until Export() has been entered `n` times.
    bool AwaitCalls(int n) {
      absl::MutexLock lock(&mu);
      auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return calls >= n; };
      return mu.AwaitWithTimeout(absl::Condition(&reached), kPatience);
    }
    size_t Exported() {
      absl::MutexLock lock(&mu);
      return exported;
    }
    std::vector<size_t> Batches() {
      absl::MutexLock lock(&mu);
      return batches;
    }
  };

  explicit GatedExporter(bool open = false) : state_(std::make_shared<State>()) {
    if (open) {
      state_->Open();
    }
  }
  std::shared_ptr<State> state() const { return state_; }

  // SpanExporter
  ExportResult Export(absl::Span<const SpanData> spans, absl::Duration) noexcept override {
    absl::MutexLock lock(&state_->mu);
    ++state_->calls;
    state_->batches.push_back(spans.size());
    auto go = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->open || state_->shut_down;
    };
    state_->mu.Await(absl::Condition(&go));
    if (!state_->open) {
      return {.success = false};
    }
    state_->exported += spans.size();
    return {.success = true};
  }
  void Shutdown() noexcept override {
    absl::MutexLock lock(&state_->mu);
    state_->shut_down = true;
  }

 private:
  std::shared_ptr<State> state_;
};

SpanData MakeSpan(int i) {
  SpanData span;
  span.name = "span-" + std::to_string(i);
  return span;
}

TEST(BatchSpanProcessorTest, FullQueueDropsAndCountsWithoutBlocking) {
  TracingStats stats;
  auto exporter = std::make_unique<GatedExporter>();
  auto gate = exporter->state();
  BatchSpanProcessor processor(
      std::move(exporter),
      {.max_queue_size = 4, .schedule_delay = absl::Hours(1), .max_export_batch_size = 2}, stats);

  // A full batch goes out at once, and the export thread then hangs in the exporter.
  processor.OnEnd(MakeSpan(0));
  processor.OnEnd(MakeSpan(1));
  ASSERT_TRUE(gate->AwaitCalls(1));

  // The queue fills to 4 while the exporter is stuck; the rest are dropped, and each OnEnd
  // returns: the test would hang here otherwise.
  for (int i = 2; i < 9; ++i) {
    processor.OnEnd(MakeSpan(i));
  }
  EXPECT_EQ(stats.spans_dropped_queue_full.load(), 3u);
  EXPECT_EQ(stats.spans_exported.load(), 0u);

  gate->Open();
  EXPECT_TRUE(processor.ForceFlush(absl::Now() + kPatience));
  EXPECT_EQ(gate->Exported(), 6u);
  EXPECT_EQ(stats.spans_exported.load(), 6u);
  EXPECT_EQ(stats.spans_dropped_queue_full.load(), 3u);
  for (size_t batch : gate->Batches()) {
    EXPECT_LE(batch, 2u);
  }
  EXPECT_TRUE(processor.Shutdown(absl::Now() + kPatience));
}

TEST(BatchSpanProcessorTest, ShutdownExportsWhatIsQueued) {
  TracingStats stats;
  auto exporter = std::make_unique<InMemorySpanExporter>();
  auto storage = exporter->storage();
  BatchSpanProcessor processor(std::move(exporter), {.schedule_delay = absl::Hours(1)}, stats);
  for (int i = 0; i < 5; ++i) {
    processor.OnEnd(MakeSpan(i));
  }
  EXPECT_TRUE(processor.Shutdown(absl::Now() + kPatience));
  ASSERT_EQ(storage->spans().size(), 5u);
  EXPECT_EQ(storage->spans()[4].name, "span-4");
  EXPECT_EQ(stats.spans_exported.load(), 5u);

  // After shutdown spans are dropped and counted; Shutdown is idempotent.
  processor.OnEnd(MakeSpan(5));
  EXPECT_EQ(stats.spans_dropped_shutdown.load(), 1u);
  EXPECT_TRUE(processor.Shutdown(absl::Now()));
  EXPECT_EQ(storage->spans().size(), 5u);
}

TEST(BatchSpanProcessorTest, ShutdownGivesUpAtTheDeadline) {
  TracingStats stats;
  auto exporter = std::make_unique<GatedExporter>();
  auto gate = exporter->state();
  BatchSpanProcessor processor(
      std::move(exporter),
      {.max_queue_size = 10, .schedule_delay = absl::Hours(1), .max_export_batch_size = 2}, stats);
  for (int i = 0; i < 5; ++i) {
    processor.OnEnd(MakeSpan(i));
  }
  ASSERT_TRUE(gate->AwaitCalls(1));
  // The exporter never opens: the deadline passes, the exporter is shut down to release the
  // stuck batch, and what is still queued is dropped.
  EXPECT_FALSE(processor.Shutdown(absl::Now() + absl::Milliseconds(100)));
  EXPECT_EQ(stats.spans_exported.load(), 0u);
  EXPECT_EQ(stats.spans_dropped_export_failed.load(), 2u);
  EXPECT_EQ(stats.spans_dropped_shutdown.load(), 3u);
}

TEST(BatchSpanProcessorTest, ForceFlushTimesOutWhileExporterIsStuck) {
  TracingStats stats;
  auto exporter = std::make_unique<GatedExporter>();
  auto gate = exporter->state();
  BatchSpanProcessor processor(std::move(exporter), {.schedule_delay = absl::Hours(1)}, stats);
  processor.OnEnd(MakeSpan(0));
  EXPECT_FALSE(processor.ForceFlush(absl::Now() + absl::Milliseconds(50)));
  ASSERT_TRUE(gate->AwaitCalls(1));
  EXPECT_EQ(gate->Batches(), std::vector<size_t>({1}));
  gate->Open();
  EXPECT_TRUE(processor.ForceFlush(absl::Now() + kPatience));
  EXPECT_EQ(stats.spans_exported.load(), 1u);
}

TEST(BatchSpanProcessorTest, ScheduleDelayExportsAPartialBatch) {
  TracingStats stats;
  auto exporter = std::make_unique<GatedExporter>(/*open=*/true);
  auto gate = exporter->state();
  BatchSpanProcessor processor(std::move(exporter), {.schedule_delay = absl::Milliseconds(20)},
                               stats);
  processor.OnEnd(MakeSpan(0));
  // No flush: only the timer can send it.
  ASSERT_TRUE(gate->AwaitCalls(1));
  EXPECT_EQ(gate->Batches(), std::vector<size_t>({1}));
}

TEST(BatchSpanProcessorTest, ForceFlushSplitsIntoBatches) {
  TracingStats stats;
  auto exporter = std::make_unique<GatedExporter>(/*open=*/true);
  auto gate = exporter->state();
  BatchSpanProcessor processor(
      std::move(exporter),
      {.max_queue_size = 100, .schedule_delay = absl::Hours(1), .max_export_batch_size = 3}, stats);
  for (int i = 0; i < 10; ++i) {
    processor.OnEnd(MakeSpan(i));
  }
  EXPECT_TRUE(processor.ForceFlush(absl::Now() + kPatience));
  size_t total = 0;
  for (size_t batch : gate->Batches()) {
    EXPECT_LE(batch, 3u);
    total += batch;
  }
  EXPECT_EQ(total, 10u);
  EXPECT_EQ(stats.spans_exported.load(), 10u);
}

TEST(BatchSpanProcessorTest, ConcurrentProducersAreAllAccountedFor) {
  TracingStats stats;
  auto exporter = std::make_unique<InMemorySpanExporter>();
  auto storage = exporter->storage();
  BatchSpanProcessor processor(
      std::move(exporter),
      {.max_queue_size = 64, .schedule_delay = absl::Milliseconds(1), .max_export_batch_size = 16},
      stats);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&processor, t] {
      for (int i = 0; i < kPerThread; ++i) {
        processor.OnEnd(MakeSpan(t * kPerThread + i));
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_TRUE(processor.Shutdown(absl::Now() + kPatience));
  EXPECT_EQ(stats.spans_exported.load() + stats.spans_dropped_queue_full.load(),
            uint64_t{kThreads * kPerThread});
  EXPECT_EQ(storage->spans().size(), stats.spans_exported.load());
}

}  // namespace
}  // namespace dralens::telemetry
