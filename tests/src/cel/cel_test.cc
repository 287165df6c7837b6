#include "src/cel/cel.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/quantity.h"

namespace dralens::cel {
namespace {

using model::DeviceAttribute;
using model::DeviceCapacity;
using ::testing::HasSubstr;

constexpr char kDriver[] = "gpu.dralens.dev";

common::Quantity Q(absl::string_view text) { return *common::Quantity::Parse(text); }

// A device as our slices publish it (driver/slices/slice_builder.cc): unqualified names in the
// driver's domain, standard names qualified.
struct Device {
  std::string driver = kDriver;
  std::map<std::string, DeviceAttribute> attributes;
  std::map<std::string, DeviceCapacity> capacity;
  DeviceView View() const { return DeviceView{driver, &attributes, &capacity}; }
};

Device FullGpu() {
  Device d;
  d.attributes["type"] = DeviceAttribute::String("gpu");
  d.attributes["uuid"] = DeviceAttribute::String("GPU-1b2c3d4e");
  d.attributes["productName"] = DeviceAttribute::String("NVIDIA H100 80GB HBM3");
  d.attributes["brand"] = DeviceAttribute::String("Nvidia");
  d.attributes["architecture"] = DeviceAttribute::String("Hopper");
  d.attributes["cudaComputeCapability"] = DeviceAttribute::SemVer("9.0.0");
  d.attributes["driverVersion"] = DeviceAttribute::SemVer("580.65.6");
  d.attributes["cudaDriverVersion"] = DeviceAttribute::SemVer("13.0.0");
  d.attributes["resource.kubernetes.io/pciBusID"] = DeviceAttribute::String("0000:1b:00.0");
  d.attributes["resource.kubernetes.io/numaNode"] = DeviceAttribute::Int(0);
  d.capacity["memory"] = DeviceCapacity{Q("80Gi"), {}};
  return d;
}

Device MigSlice() {
  Device d;
  d.attributes["type"] = DeviceAttribute::String("mig");
  d.attributes["uuid"] = DeviceAttribute::String("MIG-5e6f");
  d.attributes["parentUUID"] = DeviceAttribute::String("GPU-1b2c3d4e");
  d.attributes["profile"] = DeviceAttribute::String("1g.10gb");
  d.attributes["productName"] = DeviceAttribute::String("NVIDIA H100 80GB HBM3");
  d.attributes["driverVersion"] = DeviceAttribute::SemVer("580.65.6");
  d.capacity["memory"] = DeviceCapacity{Q("10Gi"), {}};
  d.capacity["multiprocessors"] = DeviceCapacity{Q("16"), {}};
  return d;
}

Outcome Eval(absl::string_view expression, const Device& device) {
  absl::StatusOr<Program> program = Program::Compile(expression);
  EXPECT_TRUE(program.ok()) << expression << ": " << program.status();
  if (!program.ok())
    return Outcome{Verdict::kUnknown, "did not compile", false};
  return program->Evaluate(device.View());
}

Verdict V(absl::string_view expression, const Device& device = FullGpu()) {
  return Eval(expression, device).verdict;
}

struct Case {
  const char* expression;
  Verdict want;
};

class FullGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(FullGpuTest, Evaluates) {
  const Outcome outcome = Eval(GetParam().expression, FullGpu());
  EXPECT_EQ(outcome.verdict, GetParam().want)
      << GetParam().expression << " -> " << ToString(outcome.verdict) << " " << outcome.detail;
  if (outcome.verdict != Verdict::kUnknown && !outcome.runtime_error) {
    EXPECT_EQ(outcome.detail, "");
  }
}

constexpr Verdict T = Verdict::kTrue;
constexpr Verdict F = Verdict::kFalse;
constexpr Verdict U = Verdict::kUnknown;

INSTANTIATE_TEST_SUITE_P(
    Constructs, FullGpuTest,
    ::testing::Values(
        // literals and comparisons
        Case{"true", T}, Case{"false", F}, Case{"1 == 1", T}, Case{"1 != 1", F}, Case{"1 < 2", T},
        Case{"2 <= 1", F}, Case{"3 > 2", T}, Case{"2 >= 3", F}, Case{"1 == 1.0", T},
        Case{"1u == 1", T}, Case{"1 < 1.5", T}, Case{"-1 < 0u", T}, Case{"0x10 == 16", T},
        Case{"1e3 == 1000.0", T}, Case{"'a' < 'b'", T}, Case{"'abc' == \"abc\"", T},
        Case{"r'a\\n' == 'a\\\\n'", T}, Case{"'\\u00e9' == '\\xc3\\xa9'", F},
        Case{"'\\u00e9'.size() == 1", T}, Case{"'''multi\nline''' != ''", T},
        Case{"null == null", T}, Case{"'a' == 1", F}, Case{"[1, 2] == [1, 2]", T},
        Case{"[1, 2] == [2, 1]", F}, Case{"true != false", T}, Case{"-9223372036854775808 < 0", T},
        // arithmetic
        Case{"1 + 2 * 3 == 7", T}, Case{"(1 + 2) * 3 == 9", T}, Case{"7 / 2 == 3", T},
        Case{"7 % 2 == 1", T}, Case{"1.5 + 1.5 == 3.0", T}, Case{"'a' + 'b' == 'ab'", T},
        Case{"-(-3) == 3", T}, Case{"size([1] + [2]) == 2", T},
        // logic
        Case{"true && true", T}, Case{"true && false", F}, Case{"false || true", T},
        Case{"false || false", F}, Case{"!false", T}, Case{"!!true", T},
        Case{"true ? 1 == 1 : false", T}, Case{"false ? true : 1 == 2", F},
        // in
        Case{"2 in [1, 2, 3]", T}, Case{"4 in [1, 2, 3]", F},
        Case{"device.attributes['gpu.dralens.dev'].type in ['gpu', 'mig']", T},
        Case{"'gpu.dralens.dev' in device.attributes", T},
        Case{"'resource.kubernetes.io' in device.attributes", T},
        Case{"'other.dev' in device.attributes", F},
        Case{"'productName' in device.attributes['gpu.dralens.dev']", T},
        Case{"'nope' in device.attributes['gpu.dralens.dev']", F},
        // device fields
        Case{"device.driver == 'gpu.dralens.dev'", T}, Case{"device.driver == 'other'", F},
        Case{"device.attributes['gpu.dralens.dev'].productName == 'NVIDIA H100 80GB HBM3'", T},
        Case{"device.attributes['gpu.dralens.dev']['type'] == 'gpu'", T},
        Case{"device.attributes['resource.kubernetes.io'].pciBusID == '0000:1b:00.0'", T},
        Case{"device.attributes['resource.kubernetes.io'].numaNode == 0", T},
        Case{"has(device.attributes['gpu.dralens.dev'].uuid)", T},
        Case{"has(device.attributes['gpu.dralens.dev'].parentUUID)", F},
        Case{"has(device.attributes['other.dev'].uuid)", F}, Case{"has(device.attributes.x)", F},
        Case{"has(device.driver)", T},
        // strings
        Case{"device.attributes['gpu.dralens.dev'].productName.startsWith('NVIDIA H100')", T},
        Case{"device.attributes['gpu.dralens.dev'].productName.endsWith('HBM3')", T},
        Case{"device.attributes['gpu.dralens.dev'].productName.contains('A100')", F},
        Case{"size(device.attributes['gpu.dralens.dev'].brand) == 6", T},
        Case{"device.attributes['gpu.dralens.dev'].brand.size() == 7", F},
        // quantities, exact
        Case{"device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('40Gi')) >= 0", T},
        Case{"device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('80Gi')) == 0", T},
        Case{"device.capacity['gpu.dralens.dev'].memory.isGreaterThan(quantity('80Gi'))", F},
        Case{"device.capacity['gpu.dralens.dev'].memory.isLessThan(quantity('85899345921'))", T},
        Case{"device.capacity['gpu.dralens.dev'].memory == quantity('85899345920')", T},
        Case{"quantity('1Gi') == quantity('1024Mi')", T},
        Case{"quantity('1') .isLessThan(quantity('1000000001n'))", T},
        Case{"quantity('9223372036854775807').compareTo(quantity('9223372036854775806')) == 1", T},
        Case{"quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')", T},
        Case{"quantity('1Gi').add(1) == quantity('1073741825')", T},
        Case{"quantity('1Gi').sub(quantity('1Mi')).compareTo(quantity('1023Mi')) == 0", T},
        Case{"quantity('1500m').asApproximateFloat() == 1.5", T},
        Case{"quantity('1500m').isInteger()", F}, Case{"quantity('2k').isInteger()", T},
        Case{"quantity('2k').asInteger() == 2000", T}, Case{"quantity('-1').sign() == -1", T},
        Case{"isQuantity('40Gi')", T}, Case{"isQuantity('40Q')", F},
        // semver
        Case{"device.attributes['gpu.dralens.dev'].driverVersion.compareTo(semver('580.0.0')) > 0",
             T},
        Case{"device.attributes['gpu.dralens.dev'].cudaComputeCapability.isGreaterThan("
             "semver('8.0.0'))",
             T},
        Case{"device.attributes['gpu.dralens.dev'].cudaDriverVersion.isLessThan(semver('12.4.0'))",
             F},
        Case{"device.attributes['gpu.dralens.dev'].driverVersion == semver('580.65.6')", T},
        Case{"semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", T},
        Case{"semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))", T},
        Case{"semver('1.0.0-2').isLessThan(semver('1.0.0-10'))", T},
        Case{"semver('1.0.0+build').compareTo(semver('1.0.0')) == 0", T},
        Case{"semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && "
             "semver('1.2.3').patch() == 3",
             T},
        Case{"semver('v1.2', true) == semver('1.2.0')", T}, Case{"isSemver('1.2')", F},
        Case{"isSemver('1.2.3')", T}, Case{"isSemver('01.2.3')", F},
        // cel.bind
        Case{"cel.bind(a, device.attributes['gpu.dralens.dev'], a.type == 'gpu' && "
             "a.brand == 'Nvidia')",
             T},
        Case{"cel.bind(x, 1, cel.bind(x, 2, x)) == 2", T},
        Case{"cel.bind(m, device.capacity['gpu.dralens.dev'].memory, "
             "m.isGreaterThan(quantity('100Gi')))",
             F}));

TEST(CelTest, ClassSelectorsAdaptedFromTheNvidiaChart) {
  const std::string gpu_class =
      "device.driver == 'gpu.dralens.dev' && device.attributes['gpu.dralens.dev'].type == 'gpu'";
  const std::string mig_class =
      "device.driver == 'gpu.dralens.dev' && device.attributes['gpu.dralens.dev'].type == 'mig'";
  EXPECT_EQ(V(gpu_class, FullGpu()), Verdict::kTrue);
  EXPECT_EQ(V(gpu_class, MigSlice()), Verdict::kFalse);
  EXPECT_EQ(V(mig_class, FullGpu()), Verdict::kFalse);
  EXPECT_EQ(V(mig_class, MigSlice()), Verdict::kTrue);
  // Another driver's device: the driver test is false, and absorbs the attribute lookup in a
  // domain that device does not publish.
  Device other = FullGpu();
  other.driver = "gpu.nvidia.com";
  const Outcome outcome = Eval(gpu_class, other);
  EXPECT_EQ(outcome.verdict, Verdict::kFalse);
  EXPECT_FALSE(outcome.runtime_error);
}

TEST(CelTest, ClaimSelectorsFromTheProtocolReference) {
  const std::string memory =
      "device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('40Gi')) >= 0";
  const std::string profile = "device.attributes['gpu.dralens.dev'].profile == '1g.10gb'";
  EXPECT_EQ(V(memory, FullGpu()), Verdict::kTrue);
  EXPECT_EQ(V(memory, MigSlice()), Verdict::kFalse);
  EXPECT_EQ(V(profile, MigSlice()), Verdict::kTrue);
  // A full GPU publishes no profile: a runtime error, which never matches.
  const Outcome outcome = Eval(profile, FullGpu());
  EXPECT_EQ(outcome.verdict, Verdict::kFalse);
  EXPECT_TRUE(outcome.runtime_error);
  EXPECT_THAT(outcome.detail, HasSubstr("no such key: profile"));
}

TEST(CelTest, QualifiedNamesInTheDriverDomainAreFound) {
  Device d = FullGpu();
  d.attributes["gpu.dralens.dev/extra"] = DeviceAttribute::Bool(true);
  EXPECT_EQ(V("device.attributes['gpu.dralens.dev'].extra", d), Verdict::kTrue);
  // An unqualified name is not visible under another domain.
  EXPECT_EQ(V("has(device.attributes['resource.kubernetes.io'].productName)", d), Verdict::kFalse);
}

TEST(CelTest, RuntimeErrorsAreFalseWithDetail) {
  struct ErrorCase {
    const char* expression;
    const char* detail;
  };
  for (const ErrorCase& c : {
           ErrorCase{"device.attributes['gpu.dralens.dev'].missing == 'x'", "no such key: missing"},
           ErrorCase{"device.attributes['other.dev'].type == 'gpu'", "no such key: type"},
           ErrorCase{"device.capacity['gpu.dralens.dev'].cores.isGreaterThan(quantity('1'))",
                     "no such key: cores"},
           ErrorCase{"device.attributes['gpu.dralens.dev'].productName > 3",
                     "no such overload: _>_(string, int)"},
           ErrorCase{"device.capacity['gpu.dralens.dev'].memory > quantity('1Gi')",
                     "no such overload"},
           ErrorCase{"device.capacity['gpu.dralens.dev'].memory.compareTo(40) > 0",
                     "no such overload: compareTo(Quantity, int)"},
           ErrorCase{"device.attributes['gpu.dralens.dev'].type.startsWith(1)", "no such overload"},
           ErrorCase{"quantity('40Q').isInteger()", "40Q"},
           ErrorCase{"semver('1.2').major() == 1", "invalid semver"},
           ErrorCase{"quantity('1500m').asInteger() == 1", "cannot convert"},
           ErrorCase{"9223372036854775807 + 1 > 0", "overflow"},
           ErrorCase{"1 / 0 == 1", "division by zero"},
           ErrorCase{"[1][3] == 1", "index out of range"},
           ErrorCase{"!1", "no such overload"},
           ErrorCase{"1 ? true : false", "no such overload"},
           ErrorCase{"device.attributes['gpu.dralens.dev'].type", "not bool"},
           ErrorCase{"device.foo == 1", "no such key: foo"},
       }) {
    const Outcome outcome = Eval(c.expression, FullGpu());
    EXPECT_EQ(outcome.verdict, Verdict::kFalse) << c.expression;
    EXPECT_TRUE(outcome.runtime_error) << c.expression;
    EXPECT_THAT(outcome.detail, HasSubstr(c.detail)) << c.expression;
  }
}

// quantity() and semver() with the wrong number of arguments, none included, are "no such
// overload" errors naming every argument (found by tests/fuzz/cel_fuzzer: quantity() read a
// missing first argument).
TEST(CelTest, ConversionsWithoutOrWithExtraArgumentsAreNoSuchOverload) {
  for (const auto& [expression, detail] : std::vector<std::pair<const char*, const char*>>{
           {"device.capacity['gpu.dralens.dev'].memory.compareTo(quantity()) >= 0",
            "no such overload: quantity()"},
           {"isQuantity()", "no such overload: isQuantity()"},
           {"semver().major() == 1", "no such overload: semver()"},
           {"isSemver()", "no such overload: isSemver()"},
           {"quantity('1', '2') == quantity('1')", "no such overload: quantity(string, string)"},
           {"semver('1.0.0', true, 1).major() == 1", "no such overload: semver(string, bool, int)"},
       }) {
    const Outcome outcome = Eval(expression, FullGpu());
    EXPECT_EQ(outcome.verdict, Verdict::kFalse) << expression;
    EXPECT_TRUE(outcome.runtime_error) << expression;
    EXPECT_THAT(outcome.detail, HasSubstr(detail)) << expression;
  }
}

TEST(CelTest, LogicalOperatorsAbsorbErrorsCommutatively) {
  const std::string error = "device.attributes['gpu.dralens.dev'].missing == 'x'";
  EXPECT_EQ(V(absl::StrCat("false && ", error)), Verdict::kFalse);
  EXPECT_EQ(V(absl::StrCat(error, " && false")), Verdict::kFalse);
  EXPECT_EQ(V(absl::StrCat("true || ", error)), Verdict::kTrue);
  EXPECT_EQ(V(absl::StrCat(error, " || true")), Verdict::kTrue);
  EXPECT_FALSE(Eval(absl::StrCat(error, " || true"), FullGpu()).runtime_error);
  // Not decided: the error remains.
  EXPECT_TRUE(Eval(absl::StrCat("true && ", error), FullGpu()).runtime_error);
  EXPECT_TRUE(Eval(absl::StrCat(error, " || false"), FullGpu()).runtime_error);
  // The has() guard idiom.
  EXPECT_EQ(V("has(device.attributes['gpu.dralens.dev'].profile) && "
              "device.attributes['gpu.dralens.dev'].profile == '1g.10gb'"),
            Verdict::kFalse);
  // A non-bool operand is an error, absorbed the same way.
  EXPECT_EQ(V("false && 1"), Verdict::kFalse);
  EXPECT_TRUE(Eval("true && 1", FullGpu()).runtime_error);
}

TEST(CelTest, ConstructsOutsideTheSubsetAreUnknown) {
  struct UnknownCase {
    const char* expression;
    const char* construct;
  };
  for (const UnknownCase& c : {
           UnknownCase{"device.attributes['gpu.dralens.dev'].productName.matches('H100')",
                       "function 'matches'"},
           UnknownCase{"[1, 2].exists(x, x == 2)", "macro 'exists'"},
           UnknownCase{"[1, 2].all(x, x > 0)", "macro 'all'"},
           UnknownCase{"[1, 2].map(x, x * 2) == [2, 4]", "macro 'map'"},
           UnknownCase{"size([1, 2].filter(x, x > 1)) == 1", "macro 'filter'"},
           UnknownCase{"lowerAscii('A') == 'a'", "function 'lowerAscii'"},
           UnknownCase{"device.driver.upperAscii() == 'X'", "function 'upperAscii'"},
           UnknownCase{"{'a': 1}['a'] == 1", "map literal"},
           UnknownCase{"b'abc' == b'abc'", "bytes literal"},
           UnknownCase{"device.allowMultipleAllocations", "allowMultipleAllocations"},
           // An error does not decide: the unknown construct might have been false.
           UnknownCase{"device.attributes['gpu.dralens.dev'].missing == 'x' && 'a'.matches('a')",
                       "function 'matches'"},
       }) {
    const Outcome outcome = Eval(c.expression, FullGpu());
    EXPECT_EQ(outcome.verdict, Verdict::kUnknown) << c.expression;
    EXPECT_THAT(outcome.detail, HasSubstr(c.construct)) << c.expression;
  }
  // Decided regardless of the unknown construct.
  EXPECT_EQ(V("device.driver == 'other' && device.driver.matches('gpu')"), Verdict::kFalse);
  EXPECT_EQ(V("device.driver.matches('gpu') || true"), Verdict::kTrue);
}

TEST(CelTest, SyntaxErrorsNameTheOffset) {
  struct SyntaxCase {
    const char* expression;
    const char* message;
  };
  for (const SyntaxCase& c : {
           SyntaxCase{"", "offset 0: unexpected end of input"},
           SyntaxCase{"device.driver ==", "offset 16: unexpected end of input"},
           SyntaxCase{"(1 == 1", "offset 7: expected ')'"},
           SyntaxCase{"1 == 1)", "offset 6: unexpected ')'"},
           SyntaxCase{"'unterminated", "offset 0: unterminated string literal"},
           SyntaxCase{"1 = 1", "offset 2: unexpected character '='"},
           SyntaxCase{"device.", "offset 7: expected a field or method name"},
           SyntaxCase{"'\\q'", "offset 1: invalid escape sequence"},
           SyntaxCase{"99999999999999999999 > 0", "offset 0: integer literal out of range"},
           SyntaxCase{"9223372036854775808 > 0", "offset 0: integer literal out of range"},
           SyntaxCase{"has(device)", "has() takes one field selection"},
           SyntaxCase{"cel.bind(1, 2, 3)", "cel.bind() takes a variable name"},
           SyntaxCase{"if == 1", "reserved word 'if'"},
           SyntaxCase{"gpu.type == 'gpu'", "undeclared reference to 'gpu'"},
           SyntaxCase{"cel.bind(x, 1, y) == 1", "undeclared reference to 'y'"},
       }) {
    absl::StatusOr<Program> program = Program::Compile(c.expression);
    ASSERT_FALSE(program.ok()) << c.expression;
    EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument) << c.expression;
    EXPECT_THAT(program.status().message(), HasSubstr(c.message)) << c.expression;
  }
}

TEST(CelTest, RejectsExpressionsOverTheApiSizeLimit) {
  // 10 KiB exactly compiles; one byte more does not.
  std::string at_limit = "true";
  at_limit.append(10 * 1024 - at_limit.size(), ' ');
  EXPECT_TRUE(Program::Compile(at_limit).ok());
  absl::StatusOr<Program> over = Program::Compile(at_limit + " ");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(), HasSubstr("10241 bytes"));
}

TEST(CelTest, BoundsNestingDepth) {
  auto nested = [](int n, absl::string_view open, absl::string_view core, absl::string_view close) {
    std::string s;
    for (int i = 0; i < n; ++i)
      absl::StrAppend(&s, open);
    absl::StrAppend(&s, core);
    for (int i = 0; i < n; ++i)
      absl::StrAppend(&s, close);
    return s;
  };
  EXPECT_EQ(V(nested(40, "(", "true", ")")), Verdict::kTrue);
  EXPECT_EQ(V(nested(40, "!", "false", "")), Verdict::kFalse);
  // Hostile inputs within the size limit: each is rejected, none overflows the stack.
  for (const std::string& hostile : {
           nested(5000, "(", "true", ")"),
           nested(9000, "!", "true", ""),
           nested(3000, "[", "1", "]"),
           nested(1500, "size(", "'a'", ")"),
           nested(3000, "-", "1", "") + " < 0",
           nested(2000, "", "1", " + 1") + " > 0",
           "device" + nested(2000, "", "", ".x"),
           nested(500, "false ? false : ", "true", ""),
       }) {
    absl::StatusOr<Program> program = Program::Compile(hostile);
    ASSERT_FALSE(program.ok()) << hostile.substr(0, 40);
    EXPECT_THAT(program.status().message(), HasSubstr("nested more than 100 levels"));
  }
}

TEST(CelTest, ProgramsAreCopyableAndKeepTheirExpression) {
  absl::StatusOr<Program> program = Program::Compile("device.driver == 'gpu.dralens.dev'");
  ASSERT_TRUE(program.ok());
  Program copy = *program;
  Program moved = std::move(*program);
  EXPECT_EQ(copy.expression(), "device.driver == 'gpu.dralens.dev'");
  EXPECT_EQ(moved.Evaluate(FullGpu().View()).verdict, Verdict::kTrue);
  EXPECT_EQ(copy.Evaluate(FullGpu().View()).verdict, Verdict::kTrue);
}

TEST(CelTest, DeviceWithoutMapsReadsAsEmpty) {
  absl::StatusOr<Program> program =
      Program::Compile("has(device.attributes['gpu.dralens.dev'].type)");
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->Evaluate(DeviceView{kDriver, nullptr, nullptr}).verdict, Verdict::kFalse);
}

TEST(CelTest, VerdictNames) {
  EXPECT_EQ(ToString(Verdict::kTrue), "true");
  EXPECT_EQ(ToString(Verdict::kFalse), "false");
  EXPECT_EQ(ToString(Verdict::kUnknown), "unknown");
}

}  // namespace
}  // namespace dralens::cel
