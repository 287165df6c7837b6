#include "src/telemetry/tracing/batch_span_processor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "src/common/log.h"
#include "src/common/thread_name.h"

namespace dralens::telemetry {
namespace {

constexpr absl::string_view kComponent = "tracing";

BatchSpanProcessorOptions Clamp(BatchSpanProcessorOptions options) {
  options.max_queue_size = std::max<size_t>(options.max_queue_size, 1);
  options.max_export_batch_size =
      std::clamp<size_t>(options.max_export_batch_size, 1, options.max_queue_size);
  options.schedule_delay = std::max(options.schedule_delay, absl::Milliseconds(1));
  options.export_timeout = std::max(options.export_timeout, absl::Milliseconds(1));
  return options;
}

}  // namespace

BatchSpanProcessor::BatchSpanProcessor(SpanExporterPtr exporter,
                                       const BatchSpanProcessorOptions& options,
                                       TracingStats& stats)
    : exporter_(std::move(exporter)), options_(Clamp(options)), stats_(stats) {
  thread_ = std::thread([this] {
    common::NameThisThread("span-export");
    Run();
  });
}

BatchSpanProcessor::~BatchSpanProcessor() { Shutdown(absl::Now() + options_.export_timeout); }

void BatchSpanProcessor::OnEnd(SpanData&& span) noexcept {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    stats_.spans_dropped_shutdown.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (queue_.size() >= options_.max_queue_size) {
    stats_.spans_dropped_queue_full.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(std::move(span));
  ++accepted_;
}

bool BatchSpanProcessor::HasWork() const {
  return stop_thread_ || queue_.size() >= options_.max_export_batch_size ||
         (taken_ < flush_target_ && !queue_.empty());
}

void BatchSpanProcessor::Run() {
  absl::Time next_export = absl::Now() + options_.schedule_delay;
  while (true) {
    std::vector<SpanData> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(this, &BatchSpanProcessor::HasWork), next_export);
      if (stop_thread_) {
        return;
      }
      const size_t n = std::min(queue_.size(), options_.max_export_batch_size);
      if (n == 0) {
        next_export = absl::Now() + options_.schedule_delay;
        continue;
      }
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      taken_ += n;
    }
    const ExportResult result = exporter_->Export(batch, options_.export_timeout);
    if (result.success) {
      const uint64_t rejected = std::min<uint64_t>(result.rejected_spans, batch.size());
      stats_.spans_exported.fetch_add(batch.size() - rejected, std::memory_order_relaxed);
      stats_.spans_rejected.fetch_add(rejected, std::memory_order_relaxed);
    } else {
      stats_.spans_dropped_export_failed.fetch_add(batch.size(), std::memory_order_relaxed);
    }
    absl::MutexLock lock(&mu_);
    finished_ += batch.size();
    // A partial batch means the queue was drained: the next one waits a full delay.
    if (queue_.size() < options_.max_export_batch_size) {
      next_export = absl::Now() + options_.schedule_delay;
    }
  }
}

bool BatchSpanProcessor::ForceFlush(absl::Time deadline) noexcept {
  absl::MutexLock lock(&mu_);
  const uint64_t target = accepted_;
  flush_target_ = std::max(flush_target_, target);
  struct Done {
    const uint64_t* finished;
    uint64_t target;
    bool operator()() const { return *finished >= target; }
  } done{&finished_, target};
  return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
}

bool BatchSpanProcessor::Shutdown(absl::Time deadline) noexcept {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (shut_down_) {
    return shutdown_result_;
  }
  shut_down_ = true;
  bool flushed;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    flush_target_ = accepted_;
    struct Done {
      const uint64_t* finished;
      uint64_t target;
      bool operator()() const { return *finished >= target; }
    } done{&finished_, accepted_};
    flushed = mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
    stop_thread_ = true;
  }
  // Unblocks an export still in flight after the deadline; harmless once everything is out.
  exporter_->Shutdown();
  thread_.join();
  uint64_t abandoned;
  {
    absl::MutexLock lock(&mu_);
    abandoned = queue_.size();
    queue_.clear();
    // Releases concurrent ForceFlush() callers: these spans are settled, if not exported.
    taken_ += abandoned;
    finished_ += abandoned;
  }
  if (abandoned > 0) {
    stats_.spans_dropped_shutdown.fetch_add(abandoned, std::memory_order_relaxed);
    DLOG(kWarn, kComponent, "span export did not finish before the shutdown deadline",
         {{"dropped_spans", abandoned}});
  }
  shutdown_result_ = flushed;
  return flushed;
}

}  // namespace dralens::telemetry
