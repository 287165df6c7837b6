// Projected parsing: what it keeps, that it equals the projection of a full parse, and that
// malformed or truncated text is an error.
#include "src/k8s/projection.h"

#include <string>

#include "gtest/gtest.h"

namespace dralens::k8s {
namespace {

using nlohmann::json;

const char kPod[] = R"({
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "w-0", "namespace": "ml", "uid": "u1", "resourceVersion": "42",
               "labels": {"app": "train"},
               "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
  "spec": {"nodeName": "node-1",
           "containers": [{"name": "main", "image": "cuda:1", "env": [{"name": "A", "value": "\u00e9"}]}],
           "resourceClaims": [{"name": "gpu", "resourceClaimName": "c-1"}]},
  "status": {"phase": "Running", "qosClass": "Burstable",
             "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c-1"}],
             "conditions": [{"type": "Ready", "status": "True"}]}
})";

Projection PodFields() {
  return Projection::Paths({"metadata.name", "metadata.namespace", "metadata.uid",
                            "metadata.resourceVersion", "metadata.labels", "spec.nodeName",
                            "spec.resourceClaims", "status.phase", "status.resourceClaimStatuses"});
}

TEST(ProjectionTest, KeepsOnlyTheNamedFields) {
  absl::StatusOr<json> got = ParseProjected(kPod, PodFields());
  ASSERT_TRUE(got.ok()) << got.status();
  const json want = json::parse(R"({
    "metadata": {"name": "w-0", "namespace": "ml", "uid": "u1", "resourceVersion": "42",
                 "labels": {"app": "train"}},
    "spec": {"nodeName": "node-1", "resourceClaims": [{"name": "gpu", "resourceClaimName": "c-1"}]},
    "status": {"phase": "Running",
               "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c-1"}]}
  })");
  EXPECT_EQ(*got, want);
}

TEST(ProjectionTest, EqualsTheProjectionOfAFullParse) {
  const json full = json::parse(kPod);
  for (const Projection& p :
       {Projection(), PodFields(), Projection::Paths({"spec.containers.env"}),
        Projection::Paths({"metadata", "metadata.name"}), Projection::Paths({"nothing.here"}),
        Projection::Paths({"spec.containers.name", "status.conditions.type"})}) {
    absl::StatusOr<json> got = ParseProjected(kPod, p);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, Project(full, p));
  }
}

TEST(ProjectionTest, WholeKeepsEverythingAsAFullParseDoes) {
  absl::StatusOr<json> got = ParseProjected(kPod, Projection());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(kPod));
  EXPECT_EQ((*got)["spec"]["containers"][0]["env"][0]["value"], "\u00e9");
}

TEST(ProjectionTest, AnArrayAppliesTheProjectionToEachElement) {
  const std::string list = R"({"metadata": {"resourceVersion": "7", "continue": "x"},
    "items": [{"metadata": {"name": "a", "uid": "1"}, "spec": {"big": [1, 2, 3]}},
              {"metadata": {"name": "b", "uid": "2"}, "spec": {}}]})";
  const Projection p = Projection::Fields(
      {{"metadata", Projection()}, {"items", Projection::Paths({"metadata.name"})}});
  absl::StatusOr<json> got = ParseProjected(list, p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"metadata": {"resourceVersion": "7", "continue": "x"},
    "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]})"));
}

TEST(ProjectionTest, AValueOfAnotherTypeIsKeptAsItIs) {
  // A decoder downstream must see what it would have seen: a string where an object belongs.
  absl::StatusOr<json> got =
      ParseProjected(R"({"spec": "oops", "status": null, "metadata": 3})", PodFields());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"spec": "oops", "status": null, "metadata": 3})"));
}

TEST(ProjectionTest, AFieldNamedTwiceKeepsTheLastAsAFullParseDoes) {
  const std::string text = R"({"status": {"phase": "Pending"}, "status": {"qosClass": "x"}})";
  absl::StatusOr<json> got = ParseProjected(text, PodFields());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Project(json::parse(text), PodFields()));
  EXPECT_EQ(*got, json::parse(R"({"status": {}})"));
}

TEST(ProjectionTest, EscapedKeysAreMatchedUnescaped) {
  absl::StatusOr<json> got =
      ParseProjected(R"({"stat\u0075s": {"phase": "Running"}})", PodFields());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"status": {"phase": "Running"}})"));
}

TEST(ProjectionTest, EveryTruncationIsAnError) {
  const std::string text = json::parse(kPod).dump();
  for (size_t n = 0; n < text.size(); ++n) {
    for (const Projection& p : {Projection(), PodFields()}) {
      absl::StatusOr<json> got = ParseProjected(text.substr(0, n), p);
      EXPECT_FALSE(got.ok()) << "prefix of " << n << " bytes: " << got->dump();
    }
  }
}

TEST(ProjectionTest, MalformedTextIsAnError) {
  for (const char* text :
       {"", "{", "}", "{\"a\":}", "{\"a\" 1}", "[1,]", "{\"spec\": {\"nodeName\": tru}}",
        "{\"status\": {\"phase\": \"Run", "{} {}", "{}x", "{\"a\":1}]", "nul"}) {
    EXPECT_FALSE(ParseProjected(text, PodFields()).ok()) << text;
    EXPECT_FALSE(ParseProjected(text, Projection()).ok()) << text;
  }
}

TEST(ProjectionTest, StringsAndNumbersReadAsAFullParseReadsThem) {
  for (const char* text :
       {R"({"s": "a\"b\\c\/d\b\f\n\r\t", "u": "\u00e9\u20ac\ud83d\ude00", "z": "\u0000"})",
        R"({"n": [0, -1, 1.5, 1e3, -0, 18446744073709551615, 18446744073709551616,
                  -9223372036854775808, -9223372036854775809, 1E-7, true, false, null]})"}) {
    const json full = json::parse(text);
    absl::StatusOr<json> got = ParseProjected(text, Projection());
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(got->dump(), full.dump()) << text;
    ASSERT_TRUE(got->contains("n") == full.contains("n"));
    if (full.contains("n")) {
      for (size_t i = 0; i < full["n"].size(); ++i) {
        EXPECT_EQ((*got)["n"][i].type(), full["n"][i].type()) << i;
      }
    }
  }
  // What a full parse rejects in a kept value, a projected parse rejects too.
  for (const char* text : {R"({"s": "\ud800"})", R"({"s": "\udc00x"})", R"({"s": "\x"})",
                           R"({"s": "a	b"})", R"({"n": 01})", R"({"n": 1.})", R"({"n": -})"}) {
    EXPECT_TRUE(json::parse(text, nullptr, false).is_discarded()) << text;
    EXPECT_FALSE(ParseProjected(text, Projection()).ok()) << text;
  }
}

// Found by tests/fuzz/projection_fuzzer: every scalar document was rejected as "content after
// the value", since simdjson's iterator stays on a root scalar after handing out its token.
TEST(ProjectionTest, AScalarDocumentIsKeptAsAFullParseKeepsIt) {
  for (const char* text :
       {"1", " -12.5e-3 ", "true", "false", "null", "\"x\"", " \"\\u00e9\" \n"}) {
    for (const Projection& p : {Projection(), PodFields()}) {
      absl::StatusOr<json> got = ParseProjected(text, p);
      ASSERT_TRUE(got.ok()) << text << ": " << got.status();
      EXPECT_EQ(*got, json::parse(text)) << text;
    }
  }
  for (const char* text : {"1 2", "1 x", "true false", "\"x\" 1", "tru", "-", "1.", "\"x"}) {
    EXPECT_FALSE(ParseProjected(text, PodFields()).ok()) << text;
    EXPECT_FALSE(ParseProjected(text, Projection()).ok()) << text;
  }
}

// Found while fuzzing (tests/fuzz/projection_fuzzer): nlohmann takes a NUL byte for the end of
// its input, so a kept value whose token ran on past a NUL ("1\0x") parsed as the part before it
// and text that a full parse rejects was accepted.
TEST(ProjectionTest, ANulByteIsAnError) {
  using std::string_literals::operator""s;
  for (const std::string& text :
       {"1\0x"s, "1\0"s, "{\"status\": {\"phase\": 1\0x}}"s, "{\"status\": 1\0}"s,
        "{\"status\": \"a\0b\"}"s, "{\"status\": {}}\0"s, "\0{}"s}) {
    EXPECT_FALSE(ParseProjected(text, PodFields()).ok()) << text.size();
    EXPECT_FALSE(ParseProjected(text, Projection()).ok()) << text.size();
  }
}

TEST(ProjectionTest, WhitespaceAroundTheValueIsFine) {
  absl::StatusOr<json> got =
      ParseProjected("  \n{\"status\": {\"phase\": \"Running\"}}\n  ", PodFields());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"status": {"phase": "Running"}})"));
}

TEST(ProjectionTest, ATextPathKeepsEachElementAsItWasSent) {
  const char text[] = R"({"spec": {"driver": "gpu.example.com", "skipped": 1,
    "devices": [ {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-\u00e9"}}} ,
                 {"name":"gpu-1"},
                 "a string", 12.50 , [1, {"x": 2}] ]}})";
  const Projection p = Projection::Paths({"spec.driver"}, {"spec.devices"});
  ASSERT_TRUE(p.Field("spec")->Field("devices")->text());
  absl::StatusOr<json> got = ParseProjected(text, p);
  ASSERT_TRUE(got.ok()) << got.status();
  // The exact bytes of each element (escapes included), whitespace around it left out; an
  // array in the array applies the same rule to its own elements.
  const json want = {
      {"spec",
       {{"driver", "gpu.example.com"},
        {"devices",
         {R"({"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-\u00e9"}}})",
          R"({"name":"gpu-1"})", R"("a string")", "12.50", json::array({"1", R"({"x": 2})"})}}}}};
  EXPECT_EQ(*got, want);
  // Each text parses to the element a full parse reads.
  const json full = json::parse(text);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(json::parse((*got)["spec"]["devices"][i].get<std::string>()),
              full["spec"]["devices"][i]);
  }
  // Project() of a parsed value keeps the same values, serialized.
  const json projected = Project(full, p);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(json::parse(projected["spec"]["devices"][i].get<std::string>()),
              full["spec"]["devices"][i]);
  }
}

TEST(ProjectionTest, ATextPathThatIsNoArrayKeepsTheWholeValueAsText) {
  absl::StatusOr<json> got = ParseProjected(R"({"spec": {"devices": {"name": "gpu-0"} }})",
                                            Projection::Paths({}, {"spec.devices"}));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"spec": {"devices": "{\"name\": \"gpu-0\"}"}})"));
}

TEST(ProjectionTest, ATextPathUnderAWholePathAddsNothing) {
  const Projection p = Projection::Paths({"spec"}, {"spec.devices"});
  EXPECT_TRUE(p.Field("spec")->whole());
  EXPECT_FALSE(p.Field("spec")->text());
  absl::StatusOr<json> got = ParseProjected(R"({"spec": {"devices": [{"name": "a"}]}})", p);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, json::parse(R"({"spec": {"devices": [{"name": "a"}]}})"));
}

TEST(ProjectionTest, MalformedTextUnderATextPathIsAnError) {
  for (const char* text : {R"({"devices": [{"name": "a"]})", R"({"devices": [{"name": "a"})",
                           R"({"devices": ["unterminated]})"}) {
    EXPECT_FALSE(ParseProjected(text, Projection::Paths({}, {"devices"})).ok()) << text;
  }
}

}  // namespace
}  // namespace dralens::k8s
