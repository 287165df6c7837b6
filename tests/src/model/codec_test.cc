#include "src/model/codec.h"

#include <functional>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/model/json.h"
#include "tests/src/model/model_fixtures.h"

namespace dralens::model {
namespace {

using ::dralens::model::testing::FullClaim;
using ::dralens::model::testing::FullClass;
using ::dralens::model::testing::FullNode;
using ::dralens::model::testing::FullPod;
using ::dralens::model::testing::FullSlice;
using ::dralens::model::testing::PerDeviceSlice;
using ::dralens::model::testing::Qty;
using ::dralens::model::testing::Ts;
using ::testing::HasSubstr;
using Json = nlohmann::json;

Json J(absl::string_view text) {
  absl::StatusOr<Json> j = ParseJson(text);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : Json();
}

// Every field of `want` appears in `got` with the same value; empty arrays/objects in `want`
// may be absent from `got` (they are omitted on encode, as Go's omitempty does).
void ExpectPreserved(const Json& want, const Json& got, const std::string& path = "") {
  if (want.is_object()) {
    ASSERT_TRUE(got.is_object()) << path;
    for (const auto& [key, value] : want.items()) {
      const std::string child = absl::StrCat(path, "/", key);
      if (!got.contains(key)) {
        EXPECT_TRUE((value.is_array() || value.is_object()) && value.empty())
            << "lost field " << child;
        continue;
      }
      ExpectPreserved(value, got.at(key), child);
    }
  } else if (want.is_array()) {
    ASSERT_TRUE(got.is_array()) << path;
    ASSERT_EQ(want.size(), got.size()) << path;
    for (size_t i = 0; i < want.size(); ++i) {
      ExpectPreserved(want[i], got[i], absl::StrCat(path, "/", i));
    }
  } else {
    EXPECT_EQ(want, got) << path;
  }
}

template <typename T>
void ExpectRoundTrip(const T& original) {
  const Json encoded = Encode(original);
  absl::StatusOr<T> decoded = Decode<T>(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status() << "\n" << encoded.dump(2);
  EXPECT_TRUE(*decoded == original) << "re-encoded:\n"
                                    << Encode(*decoded).dump(2) << "\noriginal:\n"
                                    << encoded.dump(2);
  EXPECT_EQ(Encode(*decoded), encoded);
  // And through text.
  absl::StatusOr<T> from_text = DecodeText<T>(EncodeText(original));
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  EXPECT_TRUE(*from_text == original);
}

TEST(CodecTest, RoundTripsEveryKind) {
  ExpectRoundTrip(FullSlice());
  ExpectRoundTrip(PerDeviceSlice());
  ExpectRoundTrip(FullClaim());
  ExpectRoundTrip(FullClass());
  ExpectRoundTrip(FullPod());
  ExpectRoundTrip(FullNode());
  ResourceClaimTemplate tmpl;
  tmpl.metadata.name = "small-template";
  tmpl.spec.metadata.labels = {{"a", "b"}};
  tmpl.spec.spec = FullClaim().spec;
  ExpectRoundTrip(tmpl);
  // Default-constructed objects too.
  ExpectRoundTrip(ResourceSlice{});
  ExpectRoundTrip(ResourceClaim{});
  ExpectRoundTrip(DeviceClass{});
  ExpectRoundTrip(Pod{});
  ExpectRoundTrip(Node{});
}

TEST(CodecTest, EncodesApiVersionKindAndWireTypes) {
  const Json slice = Encode(FullSlice());
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_TRUE(slice["spec"]["pool"]["generation"].is_number_integer());
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 3);
  EXPECT_EQ(slice["spec"]["devices"][0]["capacity"]["memory"]["value"], "40Gi");
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["bigint"]["int"],
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(slice["spec"]["devices"][0]["taints"][0]["timeAdded"], "2025-01-01T05:58:31Z");
  EXPECT_EQ(slice["metadata"]["creationTimestamp"], "2025-01-01T02:53:20Z");
  EXPECT_EQ(Encode(FullPod())["apiVersion"], "v1");
  EXPECT_EQ(Encode(FullNode())["kind"], "Node");
  EXPECT_EQ(Encode(FullClass())["kind"], "DeviceClass");
}

TEST(CodecTest, OmitsEmptyFieldsLikeGo) {
  ResourceSlice s;
  s.spec.driver = "gpu.dralens.dev";
  s.spec.pool = {"node-a", 0, 1};
  s.spec.all_nodes = false;  // A set pointer is written even when false.
  SliceDevice d;
  d.name = "gpu-0";
  s.spec.devices = {d};
  EXPECT_EQ(Encode(s), J(R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice",
      "metadata":{},"spec":{"driver":"gpu.dralens.dev","allNodes":false,
      "pool":{"name":"node-a","generation":0,"resourceSliceCount":1},
      "devices":[{"name":"gpu-0"}]}})"));

  ResourceClaim c;
  c.metadata.name = "c";
  EXPECT_EQ(Encode(c), J(R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
      "metadata":{"name":"c"},"spec":{"devices":{}}})"));

  // Required fields are written even when empty; counters maps are required.
  CounterSet set;
  s.spec.shared_counters = {set};
  EXPECT_EQ(Encode(s)["spec"]["sharedCounters"], J(R"([{"name":"","counters":{}}])"));
}

TEST(CodecTest, QuantitiesAreCanonicalAndNumbersAccepted) {
  absl::StatusOr<ResourceSlice> s = Decode<ResourceSlice>(J(R"({"spec":{"devices":[{"name":"d",
      "capacity":{"a":{"value":"1024Mi"},"b":{"value":5},"c":{"value":1.5},"d":{"value":"0.1"}}}]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  const Json capacity = Encode(*s)["spec"]["devices"][0]["capacity"];
  EXPECT_EQ(capacity["a"]["value"], "1Gi");
  EXPECT_EQ(capacity["b"]["value"], "5");
  EXPECT_EQ(capacity["c"]["value"], "1500m");
  EXPECT_EQ(capacity["d"]["value"], "100m");
  EXPECT_EQ(s->spec.devices[0].capacity.at("a").value, Qty("1Gi"));
}

// The examples of dra-protocol.md §4, verbatim apart from placeholders.
constexpr char kSliceExample[] = R"({
  "apiVersion": "resource.k8s.io/v1",
  "kind": "ResourceSlice",
  "metadata": {
    "generateName": "node-a-gpu.dralens.dev-",
    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-uid", "controller": true}]
  },
  "spec": {
    "driver": "gpu.dralens.dev",
    "nodeName": "node-a",
    "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
    "devices": [{
      "name": "gpu-0",
      "attributes": {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-00000000-0000-0000-0000-000000000000"},
        "productName": {"string": "NVIDIA A100-SXM4-40GB"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}
      },
      "capacity": {"memory": {"value": "40Gi"}}
    }]
  }
})";

constexpr char kClaimExample[] = R"({
  "apiVersion": "resource.k8s.io/v1",
  "kind": "ResourceClaim",
  "metadata": {"name": "train-0", "namespace": "ml"},
  "spec": {"devices": {
    "requests": [
      {"name": "gpu", "exactly": {
        "deviceClassName": "gpu.dralens.dev",
        "allocationMode": "ExactCount", "count": 1,
        "selectors": [{"cel": {"expression": "device.capacity['gpu.dralens.dev'].memory.compareTo(quantity('40Gi')) >= 0"}}]}},
      {"name": "small", "firstAvailable": [
        {"name": "slice", "deviceClassName": "mig.dralens.dev",
         "selectors": [{"cel": {"expression": "device.attributes['gpu.dralens.dev'].profile == '1g.10gb'"}}]},
        {"name": "whole", "deviceClassName": "gpu.dralens.dev"}]}
    ],
    "constraints": [{"requests": ["gpu"], "matchAttribute": "gpu.dralens.dev/productName"}],
    "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.dralens.dev", "parameters": {
      "apiVersion": "resource.dralens.dev/v1beta1", "kind": "GpuConfig",
      "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}]
  }},
  "status": {
    "allocation": {
      "devices": {
        "results": [{"request": "gpu", "driver": "gpu.dralens.dev", "pool": "node-a", "device": "gpu-0"}],
        "config": [{"source": "FromClaim", "requests": ["gpu"],
                    "opaque": {"driver": "gpu.dralens.dev", "parameters": {"apiVersion": "resource.dralens.dev/v1beta1", "kind": "GpuConfig"}}}]
      },
      "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
    },
    "reservedFor": [{"resource": "pods", "name": "train-0-pod", "uid": "pod-uid"}],
    "devices": [{"driver": "gpu.dralens.dev", "pool": "node-a", "device": "gpu-0", "conditions": []}]
  }
})";

TEST(CodecTest, ProtocolExamplesKeepEveryField) {
  const Json slice_json = J(kSliceExample);
  absl::StatusOr<ResourceSlice> slice = Decode<ResourceSlice>(slice_json);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(Encode(*slice), slice_json);
  EXPECT_EQ(*slice->spec.devices[0].attributes.at("cudaComputeCapability").AsVersion(), "8.0.0");
  EXPECT_EQ(slice->spec.devices[0].capacity.at("memory").value.Value(), 40LL << 30);
  EXPECT_EQ(slice->metadata.owner_references[0].controller, true);

  const Json claim_json = J(kClaimExample);
  absl::StatusOr<ResourceClaim> claim = Decode<ResourceClaim>(claim_json);
  ASSERT_TRUE(claim.ok()) << claim.status();
  ExpectPreserved(claim_json, Encode(*claim));
  ExpectPreserved(Encode(*claim), claim_json);  // And nothing was added.
  EXPECT_EQ(claim->spec.devices.requests[1].first_available[1].name, "whole");
  EXPECT_EQ(claim->spec.devices.config[0].opaque->parameters["sharing"]["strategy"], "TimeSlicing");
  EXPECT_EQ(claim->status.allocation->node_selector->node_selector_terms[0].match_fields[0].op,
            "In");
  EXPECT_EQ(claim->status.reserved_for[0].resource, "pods");
}

TEST(CodecTest, ToleratesUnknownFieldsAndNulls) {
  absl::StatusOr<ResourceSlice> s = Decode<ResourceSlice>(J(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
    "futureTopLevel": {"x": [1, 2]},
    "metadata": {"name": "s", "managedFields": [{"manager": "kubectl"}], "labels": null,
                 "creationTimestamp": null},
    "spec": {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1,
                                     "newPoolField": true},
             "partitionTypeAttribute": "x", "skipNodeOperations": ["*"], "nodeName": null,
             "devices": [{"name": "a", "nodeAllocatableResources": {"cpu": "1"},
                          "attributes": {"x": {"int": 1, "futureKind": [1]}}}]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->metadata.name, "s");
  EXPECT_FALSE(s->spec.node_name.has_value());
  EXPECT_FALSE(s->metadata.creation_timestamp.has_value());
  EXPECT_EQ(*s->spec.devices[0].attributes.at("x").AsInt(), 1);
}

TEST(CodecTest, DecodesLists) {
  absl::StatusOr<ResourceSliceList> list = Decode<ResourceSliceList>(J(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
    "metadata": {"resourceVersion": "99", "continue": "tok", "remainingItemCount": 4},
    "items": [{"metadata": {"name": "a"}, "spec": {"driver": "d", "pool": {"name": "p",
              "generation": 1, "resourceSliceCount": 1}}}, {"metadata": {"name": "b"}}]})"));
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[1].metadata.name, "b");
  EXPECT_EQ(list->metadata.resource_version, "99");
  EXPECT_EQ(list->metadata.continue_token, "tok");
  EXPECT_EQ(list->metadata.remaining_item_count, 4);

  absl::StatusOr<ResourceClaimList> bad = Decode<ResourceClaimList>(J(
      R"({"kind":"ResourceClaimList","items":[{"spec":{"devices":{"requests":[{"name":"x"}]}}}]})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "decode ResourceClaimList: items[0].spec.devices.requests[0]: expected exactly one "
            "of \"exactly\" and \"firstAvailable\", got neither");
  EXPECT_TRUE(Decode<PodList>(J(R"({"items":[]})")).ok());
  EXPECT_TRUE(Decode<NodeList>(J(R"({"items":null})")).ok());
  EXPECT_TRUE(Decode<DeviceClassList>(J(R"({"items":[{}]})")).ok());
}

struct ErrorCase {
  const char* pointer;  // JSON pointer into the encoded full object
  const char* replacement;
  const char* message;
};

// `also`, when given, decodes the same object another way; where it answers, it must report
// exactly the same error.
template <typename T>
void ExpectErrors(const T& valid, absl::string_view kind, std::initializer_list<ErrorCase> cases,
                  const std::function<std::optional<absl::Status>(const Json&)>& also = nullptr) {
  for (const ErrorCase& c : cases) {
    Json j = Encode(valid);
    if (std::string(c.pointer).empty()) {
      j = J(c.replacement);
    } else {
      j[Json::json_pointer(c.pointer)] = J(c.replacement);
    }
    absl::StatusOr<T> decoded = Decode<T>(j);
    ASSERT_FALSE(decoded.ok()) << c.pointer << " = " << c.replacement;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << c.pointer;
    const std::string want = absl::StrCat("decode ", kind, ": ", c.message);
    if (absl::EndsWith(want, ": ")) {  // The rest is the time parser's own reason.
      EXPECT_THAT(std::string(decoded.status().message()), ::testing::StartsWith(want));
    } else {
      EXPECT_EQ(decoded.status().message(), want) << c.pointer;
    }
    if (also) {
      if (std::optional<absl::Status> other = also(j); other.has_value()) {
        EXPECT_EQ(*other, decoded.status()) << c.pointer;
      }
    }
  }
}

// A device decoded on its own reports what the slice's decode reports for it.
std::optional<absl::Status> DeviceAlone(const Json& slice) {
  const Json* devices = nullptr;
  if (slice.is_object() && slice.contains("spec") && slice["spec"].is_object() &&
      slice["spec"].contains("devices") && slice["spec"]["devices"].is_array()) {
    devices = &slice["spec"]["devices"];
  }
  if (devices == nullptr) {
    return std::nullopt;
  }
  for (size_t i = 0; i < devices->size(); ++i) {
    absl::StatusOr<SliceDevice> device = DecodeSliceDevice((*devices)[i], i);
    if (!device.ok()) {
      return device.status();
    }
  }
  return std::nullopt;  // the error is elsewhere in the slice
}

TEST(CodecTest, ADeviceDecodedAloneEqualsItsPartOfTheSlice) {
  const ResourceSlice slice = FullSlice();
  const Json j = Encode(slice);
  ASSERT_FALSE(slice.spec.devices.empty());
  for (size_t i = 0; i < slice.spec.devices.size(); ++i) {
    absl::StatusOr<SliceDevice> device = DecodeSliceDevice(j["spec"]["devices"][i], i);
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(*device, slice.spec.devices[i]);
  }
  absl::StatusOr<SliceDevice> bad = DecodeSliceDevice(J("[]"), 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "decode ResourceSlice: spec.devices[4]: expected object, got array");
}

TEST(CodecTest, SliceErrorsNameTheJsonPath) {
  ExpectErrors(
      FullSlice(), "ResourceSlice",
      {
          {"", "[]", "expected object, got array"},
          {"", "null", "expected object, got null"},
          {"/kind", R"("ResourceClaim")",
           "kind: expected \"ResourceSlice\", got \"ResourceClaim\""},
          {"/apiVersion", R"("resource.k8s.io/v1beta1")",
           "apiVersion: expected \"resource.k8s.io/v1\", got \"resource.k8s.io/v1beta1\""},
          {"/apiVersion", "1", "apiVersion: expected string, got number"},
          {"/metadata", "[]", "metadata: expected object, got array"},
          {"/metadata/name", "5", "metadata.name: expected string, got number"},
          {"/metadata/labels/app", "true",
           "metadata.labels[\"app\"]: expected string, got boolean"},
          {"/metadata/creationTimestamp", R"("yesterday")",
           "metadata.creationTimestamp: invalid RFC 3339 time \"yesterday\": "},
          {"/metadata/ownerReferences/0/controller", R"("yes")",
           "metadata.ownerReferences[0].controller: expected boolean, got string"},
          {"/spec/pool/generation", R"("3")", "spec.pool.generation: expected integer, got string"},
          {"/spec/pool/generation", "1.5",
           "spec.pool.generation: expected integer in int64 range, got number 1.5"},
          {"/spec/pool/generation", "18446744073709551615",
           "spec.pool.generation: integer 18446744073709551615 out of int64 range"},
          {"/spec/pool/resourceSliceCount", "9223372036854775808",
           "spec.pool.resourceSliceCount: integer 9223372036854775808 out of int64 range"},
          {"/spec/pool/generation", "1e30",
           "spec.pool.generation: expected integer in int64 range, got number 1e+30"},
          {"/spec/devices", "{}", "spec.devices: expected array, got object"},
          {"/spec/devices/0/attributes/uuid", "5",
           "spec.devices[0].attributes[\"uuid\"]: expected object, got number"},
          {"/spec/devices/0/attributes/uuid", R"({"int": 1, "string": "x"})",
           "spec.devices[0].attributes[\"uuid\"]: expected exactly one of int, bool, string, "
           "version; got int, string"},
          {"/spec/devices/0/attributes/uuid", "{}",
           "spec.devices[0].attributes[\"uuid\"]: expected exactly one of int, bool, string, "
           "version; got none"},
          {"/spec/devices/0/attributes/uuid", R"({"int": "1"})",
           "spec.devices[0].attributes[\"uuid\"].int: expected integer, got string"},
          {"/spec/devices/0/attributes/uuid", R"({"version": 8})",
           "spec.devices[0].attributes[\"uuid\"].version: expected string, got number"},
          {"/spec/devices/1/capacity/memory/value", R"("12Q")",
           "spec.devices[1].capacity[\"memory\"].value: quantity \"12Q\": unknown suffix \"Q\""},
          {"/spec/devices/1/capacity/memory/value", "true",
           "spec.devices[1].capacity[\"memory\"].value: expected quantity string, got boolean"},
          {"/spec/devices/1/capacity/memory/value", R"("8Ei")",
           "spec.devices[1].capacity[\"memory\"].value: quantity \"8Ei\": magnitude exceeds the "
           "Kubernetes quantity limit of 9223372036854775807"},
          {"/spec/devices/0/capacity/memory/requestPolicy/validRange/step", "[]",
           "spec.devices[0].capacity[\"memory\"].requestPolicy.validRange.step: expected "
           "quantity string, got array"},
          {"/spec/devices/0/capacity/compute/requestPolicy/validValues/2", R"("x")",
           "spec.devices[0].capacity[\"compute\"].requestPolicy.validValues[2]: quantity "
           "\"x\": expected a number"},
          {"/spec/devices/0/taints/0/timeAdded", "0",
           "spec.devices[0].taints[0].timeAdded: expected RFC 3339 time string, got number"},
          {"/spec/devices/0/consumesCounters/0/counters/memory", R"("40Gi")",
           "spec.devices[0].consumesCounters[0].counters[\"memory\"]: expected object, got "
           "string"},
          {"/spec/sharedCounters/0/counters", "[]",
           "spec.sharedCounters[0].counters: expected object, got array"},
          {"/spec/allNodes", R"("true")", "spec.allNodes: expected boolean, got string"},
          {"/spec/nodeSelector", R"({"nodeSelectorTerms": [{"matchFields": [{"values": "x"}]}]})",
           "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].values: expected array, got "
           "string"},
      },
      DeviceAlone);
}

TEST(CodecTest, ClaimErrorsNameTheJsonPath) {
  ExpectErrors(
      FullClaim(), "ResourceClaim",
      {
          {"/spec/devices/requests/0/firstAvailable", R"([{"name": "x"}])",
           "spec.devices.requests[0]: expected exactly one of \"exactly\" and \"firstAvailable\", "
           "got both"},
          {"/spec/devices/requests/1/firstAvailable", "[]",
           "spec.devices.requests[1]: expected exactly one of \"exactly\" and \"firstAvailable\", "
           "got neither"},
          {"/spec/devices/requests/1/firstAvailable/0/count", "true",
           "spec.devices.requests[1].firstAvailable[0].count: expected integer, got boolean"},
          {"/spec/devices/requests/0/exactly/tolerations/0/tolerationSeconds", "-1.25",
           "spec.devices.requests[0].exactly.tolerations[0].tolerationSeconds: expected integer "
           "in int64 range, got number -1.25"},
          {"/spec/devices/requests/0/exactly/capacity/requests/memory", R"("1.5.5Gi")",
           "spec.devices.requests[0].exactly.capacity.requests[\"memory\"]: quantity "
           "\"1.5.5Gi\": unknown suffix \".5Gi\""},
          {"/spec/devices/requests/0/exactly/selectors/0/cel", R"("expr")",
           "spec.devices.requests[0].exactly.selectors[0].cel: expected object, got string"},
          {"/spec/devices/constraints/1/requests/1", "7",
           "spec.devices.constraints[1].requests[1]: expected string, got number"},
          {"/spec/devices/config/0/opaque/driver", "{}",
           "spec.devices.config[0].opaque.driver: expected string, got object"},
          {"/status/allocation/devices/results/0/consumedCapacity", "1",
           "status.allocation.devices.results[0].consumedCapacity: expected object, got number"},
          {"/status/allocation/allocationTimestamp", R"("2025-13-01T00:00:00Z")",
           "status.allocation.allocationTimestamp: invalid RFC 3339 time "
           "\"2025-13-01T00:00:00Z\": "},
          {"/status/reservedFor/1", "[]", "status.reservedFor[1]: expected object, got array"},
          {"/status/devices/0/conditions/1/lastTransitionTime", "5",
           "status.devices[0].conditions[1].lastTransitionTime: expected RFC 3339 time string, "
           "got number"},
          {"/status/devices/0/conditions/0/observedGeneration", R"("7")",
           "status.devices[0].conditions[0].observedGeneration: expected integer, got string"},
          {"/status/devices/0/networkData/ips", R"("10.0.0.1")",
           "status.devices[0].networkData.ips: expected array, got string"},
      });
}

TEST(CodecTest, ErrorMessagesForTimeCarryTheParserReason) {
  Json j = Encode(FullSlice());
  j["metadata"]["creationTimestamp"] = "yesterday";
  absl::StatusOr<ResourceSlice> s = Decode<ResourceSlice>(j);
  ASSERT_FALSE(s.ok());
  EXPECT_GT(s.status().message().size(),
            std::string("decode ResourceSlice: metadata.creationTimestamp: invalid RFC 3339 time "
                        "\"yesterday\": ")
                .size());
}

TEST(CodecTest, DeviceClassErrorPaths) {
  ExpectErrors(
      FullClass(), "DeviceClass",
      {
          {"/spec/selectors/1/cel/expression", "[1]",
           "spec.selectors[1].cel.expression: expected string, got array"},
          {"/spec/config/0/opaque", "\"x\"", "spec.config[0].opaque: expected object, got string"},
          {"/spec/extendedResourceName", "{}",
           "spec.extendedResourceName: expected string, got object"},
      });
}

TEST(CodecTest, NullIsUnsetEvenForRequiredFields) {
  Json j = Encode(FullClass());
  j["spec"]["selectors"][1]["cel"]["expression"] = nullptr;
  absl::StatusOr<DeviceClass> d = Decode<DeviceClass>(j);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->spec.selectors[1].cel->expression, "");
}

TEST(CodecTest, PodAndNodeErrorPaths) {
  ExpectErrors(FullPod(), "Pod",
               {
                   {"/kind", R"("Node")", "kind: expected \"Pod\", got \"Node\""},
                   {"/spec/resourceClaims/1/resourceClaimTemplateName", "1",
                    "spec.resourceClaims[1].resourceClaimTemplateName: expected string, got "
                    "number"},
                   {"/spec/containers/0/resources/claims", "{}",
                    "spec.containers[0].resources.claims: expected array, got object"},
                   {"/status/resourceClaimStatuses/0/name", "false",
                    "status.resourceClaimStatuses[0].name: expected string, got boolean"},
               });
  ExpectErrors(
      FullNode(), "Node",
      {
          {"/status/nodeInfo/bootID", "[]", "status.nodeInfo.bootID: expected string, got array"},
      });
}

TEST(CodecTest, Times) {
  EXPECT_EQ(FormatKubeTime(Ts(0)), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatKubeTime(Ts(1735700000) + absl::Milliseconds(900)), "2025-01-01T02:53:20Z");
  absl::StatusOr<absl::Time> t = ParseKubeTime("2025-01-01T04:53:20.5+02:00");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Ts(1735700000) + absl::Milliseconds(500));
  t = ParseKubeTime("2025-01-01T02:53:20Z");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Ts(1735700000));
  EXPECT_FALSE(ParseKubeTime("2024-12-31 02:53:20").ok());
  EXPECT_FALSE(ParseKubeTime("").ok());
}

TEST(CodecTest, AttributeAccessors) {
  EXPECT_EQ(*DeviceAttribute::Int(5).AsInt(), 5);
  EXPECT_EQ(DeviceAttribute::Int(5).AsBool(), nullptr);
  EXPECT_EQ(*DeviceAttribute::Bool(false).AsBool(), false);
  EXPECT_EQ(*DeviceAttribute::String("x").AsString(), "x");
  EXPECT_EQ(DeviceAttribute::String("x").AsVersion(), nullptr);
  EXPECT_EQ(*DeviceAttribute::SemVer("1.2.3").AsVersion(), "1.2.3");
  EXPECT_NE(DeviceAttribute::String("1.2.3"), DeviceAttribute::SemVer("1.2.3"));
}

}  // namespace
}  // namespace dralens::model
