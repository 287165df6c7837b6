// cel_bench: the cost of compiling and evaluating a typical DeviceClass selector against one
// published full-GPU device. Prints figures only; never fails on time.
#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "src/cel/cel.h"
#include "src/common/quantity.h"

namespace dralens::cel {
namespace {

constexpr char kSelector[] =
    "device.driver == 'gpu.dralens.dev' && device.attributes['gpu.dralens.dev'].type == 'gpu' && "
    "device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('40Gi')) >= 0";

struct Device {
  std::map<std::string, model::DeviceAttribute> attributes{
      {"type", model::DeviceAttribute::String("gpu")},
      {"uuid", model::DeviceAttribute::String("GPU-1b2c3d4e")},
      {"productName", model::DeviceAttribute::String("NVIDIA H100 80GB HBM3")},
      {"driverVersion", model::DeviceAttribute::SemVer("580.65.6")},
      {"resource.kubernetes.io/pciBusID", model::DeviceAttribute::String("0000:1b:00.0")}};
  std::map<std::string, model::DeviceCapacity> capacity{
      {"memory", model::DeviceCapacity{*common::Quantity::Parse("80Gi"), {}}}};
};

void BM_Compile(benchmark::State& state) {
  for (auto _ : state) {
    absl::StatusOr<Program> program = Program::Compile(kSelector);
    benchmark::DoNotOptimize(program);
  }
}
BENCHMARK(BM_Compile);

void BM_Evaluate(benchmark::State& state) {
  const Device device;
  const DeviceView view{"gpu.dralens.dev", &device.attributes, &device.capacity};
  const Program program = *Program::Compile(kSelector);
  for (auto _ : state) {
    Outcome outcome = program.Evaluate(view);
    benchmark::DoNotOptimize(outcome);
  }
}
BENCHMARK(BM_Evaluate);

}  // namespace
}  // namespace dralens::cel

BENCHMARK_MAIN();
