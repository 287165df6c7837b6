// RestClient against small scripted httplib servers: paths, headers, error mapping, retries,
// watch stream parsing and cancellation.
#include "src/k8s/rest_client.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "src/common/log.h"
#include "tests/src/k8s/test_util.h"

namespace dralens::k8s {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LocalServer;
using ::testing::Not;
using testing::RecordingClock;
using testing::TempDir;
using testing::WriteFile;

struct Seen {
  std::string method;
  std::string target;  // path + query as sent
  std::string authorization;
  std::string content_type;
  std::string body;
};

WatchOptions WatchFrom(const std::string& rv, int timeout_seconds = 0) {
  WatchOptions options;
  options.resource_version = rv;
  options.timeout_seconds = timeout_seconds;
  return options;
}

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                        {"code", code},     {"reason", reason},   {"message", message}}
      .dump();
}

class RestClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto record = [this](const httplib::Request& req) {
      absl::MutexLock lock(&mu_);
      std::string target = req.path;
      // httplib decodes the path and splits the query; rebuild what matters for assertions.
      std::vector<std::string> params;
      for (const auto& [key, value] : req.params) {
        params.push_back(absl::StrCat(key, "=", value));
      }
      std::sort(params.begin(), params.end());
      if (!params.empty()) {
        absl::StrAppend(&target, "?", absl::StrJoin(params, "&"));
      }
      seen_.push_back({req.method, target, req.get_header_value("Authorization"),
                       req.get_header_value("Content-Type"), req.body});
    };
    auto handle = [this, record](const httplib::Request& req, httplib::Response& res) {
      record(req);
      handler_(req, res);
    };
    server_.server().Get(".*", handle);
    server_.server().Post(".*", handle);
    server_.server().Put(".*", handle);
    server_.server().Patch(".*", handle);
    server_.server().Delete(".*", handle);
    server_.Start();
  }

  std::unique_ptr<RestClient> NewClient(RestConfig config = {}, RestClientOptions options = {}) {
    config.server = server_.url();
    if (config.token.empty() && config.token_file.empty()) {
      config.token = "t0ken";
    }
    config.request_timeout = absl::Seconds(5);
    options.clock = &clock_;
    options.retry.initial_backoff = absl::Milliseconds(1);
    options.retry.max_backoff = absl::Milliseconds(4);
    auto client = RestClient::FromConfig(config, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  void Serve(std::function<void(const httplib::Request&, httplib::Response&)> handler) {
    handler_ = std::move(handler);
  }

  std::vector<Seen> seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

  RecordingClock clock_;
  absl::Mutex mu_;
  std::vector<Seen> seen_;
  std::function<void(const httplib::Request&, httplib::Response&)> handler_ =
      [](const httplib::Request&, httplib::Response& res) {
        res.set_content("{}", "application/json");
      };
  // Last, so that it is destroyed first: its handler threads use the members above, and one
  // may still be running when a test ends (SlowServerIsDeadlineExceeded).
  LocalServer<> server_;
};

TEST_F(RestClientTest, VerbsUseKubernetesPathsAndHeaders) {
  Serve([](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "POST") {
      nlohmann::json object = nlohmann::json::parse(req.body);
      if (!object["metadata"].contains("name")) {
        object["metadata"]["name"] = object["metadata"]["generateName"].get<std::string>() + "x1";
      }
      object["metadata"]["resourceVersion"] = "7";
      res.status = 201;
      res.set_content(object.dump(), "application/json");
      return;
    }
    if (req.method == "GET" && absl::EndsWith(req.path, "/resourceclaims")) {
      res.set_content(R"({"kind":"ResourceClaimList","metadata":{"resourceVersion":"42",
          "continue":"next"},"items":[{"metadata":{"name":"a","namespace":"ns"}}]})",
                      "application/json");
      return;
    }
    res.set_content(R"({"kind":"Thing","metadata":{"name":"a","resourceVersion":"8"}})",
                    "application/json");
  });
  auto client = NewClient();

  absl::StatusOr<nlohmann::json> got = client->Get(kResourceClaims, "ns", "a");
  ASSERT_TRUE(got.ok()) << got.status();
  ListOptions list_options;
  list_options.label_selector = "app=x,tier in (a b)";
  list_options.field_selector = "spec.nodeName=n1";
  list_options.limit = 10;
  list_options.continue_token = "c1";
  absl::StatusOr<ListResult> list = client->List(kResourceClaims, "ns", list_options);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->resource_version, "42");
  EXPECT_EQ(list->continue_token, "next");
  ASSERT_EQ(list->items.size(), 1u);
  // List items are given their kind and apiVersion.
  EXPECT_EQ(list->items[0]["kind"], "ResourceClaim");
  EXPECT_EQ(list->items[0]["apiVersion"], "resource.k8s.io/v1");

  absl::StatusOr<nlohmann::json> created =
      client->Create(kPods, "ns", {{"metadata", {{"generateName", "p-"}}}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["name"], "p-x1");

  ASSERT_TRUE(
      client->Update(kResourceClaims, "ns", {{"metadata", {{"name", "a"}}}}, "status").ok());
  ASSERT_TRUE(
      client->MergePatch(kResourceSlices, "", "s1", {{"metadata", {{"labels", {{"k", "v"}}}}}}, "")
          .ok());
  DeleteOptions delete_options_in;
  delete_options_in.precondition_uid = "u1";
  delete_options_in.precondition_resource_version = "5";
  ASSERT_TRUE(client->Delete(kNodes, "", "n1", delete_options_in).ok());
  ListOptions collection;
  collection.label_selector = "owner=dralens";
  ASSERT_TRUE(client->DeleteCollection(kDeviceClasses, "", collection).ok());

  std::vector<Seen> requests = seen();
  ASSERT_EQ(requests.size(), 7u);
  EXPECT_EQ(requests[0].target, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a");
  EXPECT_EQ(requests[0].authorization, "Bearer t0ken");
  EXPECT_EQ(requests[1].target,
            "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims?continue=c1&"
            "fieldSelector=spec.nodeName=n1&labelSelector=app=x,tier in (a b)&limit=10");
  EXPECT_EQ(requests[2].method, "POST");
  EXPECT_EQ(requests[2].target, "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(nlohmann::json::parse(requests[2].body)["kind"], "Pod");
  EXPECT_EQ(requests[3].method, "PUT");
  EXPECT_EQ(requests[3].target, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a/status");
  EXPECT_EQ(requests[4].method, "PATCH");
  EXPECT_EQ(requests[4].content_type, "application/merge-patch+json");
  EXPECT_EQ(requests[4].target, "/apis/resource.k8s.io/v1/resourceslices/s1");
  EXPECT_EQ(requests[5].method, "DELETE");
  EXPECT_EQ(requests[5].target, "/api/v1/nodes/n1");
  nlohmann::json delete_options = nlohmann::json::parse(requests[5].body);
  EXPECT_EQ(delete_options["preconditions"]["uid"], "u1");
  EXPECT_EQ(delete_options["preconditions"]["resourceVersion"], "5");
  EXPECT_EQ(requests[6].target,
            "/apis/resource.k8s.io/v1/deviceclasses?labelSelector=owner=dralens");
}

TEST_F(RestClientTest, RejectsScopeMistakesWithoutARequest) {
  auto client = NewClient();
  EXPECT_EQ(client->Get(kResourceClaims, "", "a").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Get(kNodes, "ns", "a").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Update(kNodes, "", nlohmann::json::object(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(seen().empty());
}

TEST_F(RestClientTest, ErrorMappingKeepsServerMessage) {
  struct Case {
    int code;
    std::string reason;
    absl::StatusCode want;
  };
  const std::vector<Case> cases = {
      {404, "NotFound", absl::StatusCode::kNotFound},
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
      {409, "Conflict", absl::StatusCode::kAborted},
      {410, "Expired", absl::StatusCode::kOutOfRange},
      {422, "Invalid", absl::StatusCode::kInvalidArgument},
      {400, "BadRequest", absl::StatusCode::kInvalidArgument},
      {401, "Unauthorized", absl::StatusCode::kUnauthenticated},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied},
  };
  std::atomic<int> index{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    const Case& c = cases[index.load()];
    res.status = c.code;
    res.set_content(StatusBody(c.code, c.reason, "the server says " + c.reason),
                    "application/json");
  });
  auto client = NewClient();
  for (size_t i = 0; i < cases.size(); ++i) {
    index = static_cast<int>(i);
    // POST is never retried, so each case is exactly one request.
    absl::Status status =
        client->Create(kResourceClaims, "ns", {{"metadata", {{"name", "a"}}}}).status();
    EXPECT_EQ(status.code(), cases[i].want) << cases[i].code << " " << status;
    EXPECT_THAT(status.message(), HasSubstr("the server says " + cases[i].reason));
    EXPECT_EQ(HttpStatusCode(status), cases[i].code);
  }
  index = 1;
  EXPECT_TRUE(
      k8s::IsAlreadyExists(client->Create(kPods, "ns", {{"metadata", {{"name", "a"}}}}).status()));
  index = 2;
  EXPECT_TRUE(IsConflict(client->Create(kPods, "ns", {{"metadata", {{"name", "a"}}}}).status()));
  index = 3;
  EXPECT_TRUE(IsGone(client->Create(kPods, "ns", {{"metadata", {{"name", "a"}}}}).status()));
  index = 0;
  EXPECT_TRUE(k8s::IsNotFound(client->Get(kPods, "ns", "a").status()));
}

TEST_F(RestClientTest, SafeVerbsRetry5xxWithBackoffAndRecordMetrics) {
  std::atomic<int> calls{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    if (calls.fetch_add(1) < 2) {
      res.status = 503;
      res.set_content(StatusBody(503, "ServiceUnavailable", "busy"), "application/json");
      return;
    }
    res.set_content(R"({"metadata":{"name":"a"}})", "application/json");
  });
  prometheus::Registry registry;
  KubeRequestMetrics metrics = KubeRequestMetrics::Create(registry);
  RestClientOptions options;
  options.metrics = &metrics;
  auto client = NewClient({}, options);
  ASSERT_TRUE(client->Get(kPods, "ns", "a").ok());
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(clock_.sleeps().size(), 2u);
  EXPECT_EQ(
      metrics.requests_total.Add({{"verb", "get"}, {"resource", "pods"}, {"code", "503"}}).Value(),
      2);
  EXPECT_EQ(
      metrics.requests_total.Add({{"verb", "get"}, {"resource", "pods"}, {"code", "200"}}).Value(),
      1);
}

TEST_F(RestClientTest, PostIsNotRetriedOn5xxWithoutRetryAfter) {
  std::atomic<int> calls{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    calls.fetch_add(1);
    res.status = 500;
    res.set_content(StatusBody(500, "InternalError", "boom"), "application/json");
  });
  auto client = NewClient();
  absl::Status status = client->Create(kPods, "ns", {{"metadata", {{"name", "a"}}}}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(RestClientTest, RetryAfterIsHonouredForEveryVerb) {
  std::atomic<int> calls{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    if (calls.fetch_add(1) == 0) {
      res.status = 429;
      res.set_header("Retry-After", "3");
      res.set_content(StatusBody(429, "TooManyRequests", "slow down"), "application/json");
      return;
    }
    res.status = 201;
    res.set_content(R"({"metadata":{"name":"a"}})", "application/json");
  });
  auto client = NewClient();
  ASSERT_TRUE(client->Create(kPods, "ns", {{"metadata", {{"name", "a"}}}}).ok());
  EXPECT_EQ(calls.load(), 2);
  EXPECT_THAT(clock_.sleeps(), ElementsAre(absl::Seconds(3)));
}

TEST_F(RestClientTest, RetryAfterIsCappedAndAttemptsBounded) {
  std::atomic<int> calls{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    calls.fetch_add(1);
    res.status = 503;
    res.set_header("Retry-After", "3600");
    res.set_content(StatusBody(503, "ServiceUnavailable", "down"), "application/json");
  });
  RestClientOptions options;
  options.retry.max_retry_after = absl::Seconds(2);
  options.retry.max_retry_after_attempts = 3;
  auto client = NewClient({}, options);
  absl::Status status = client->Get(kPods, "ns", "a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RetryAfter(status), absl::Seconds(3600));
  EXPECT_EQ(calls.load(), 3);
  EXPECT_THAT(clock_.sleeps(), ElementsAre(absl::Seconds(2), absl::Seconds(2)));
}

TEST_F(RestClientTest, TruncatedBodyIsAnErrorNeverAHalfObject) {
  std::atomic<int> calls{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    calls.fetch_add(1);
    res.set_content(R"({"kind":"Pod","metadata":{"name":"a","lab)", "application/json");
  });
  auto client = NewClient();
  absl::StatusOr<nlohmann::json> got = client->Get(kPods, "ns", "a");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(got.status().message(), HasSubstr("truncated"));
  EXPECT_EQ(calls.load(), 5);  // GET retried up to RetryPolicy::max_attempts
  calls = 0;
  EXPECT_FALSE(client->MergePatch(kPods, "ns", "a", nlohmann::json::object(), "").ok());
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(RestClientTest, SlowServerIsDeadlineExceeded) {
  Serve([](const httplib::Request&, httplib::Response& res) {
    absl::SleepFor(absl::Milliseconds(600));
    res.set_content("{}", "application/json");
  });
  RestConfig config;
  config.server = server_.url();
  config.token = "t";
  config.request_timeout = absl::Milliseconds(200);
  RestClientOptions options;
  options.retry.max_attempts = 1;
  options.clock = &clock_;
  auto fast = RestClient::FromConfig(config, options);
  ASSERT_TRUE(fast.ok());
  absl::Status status = (*fast)->Get(kPods, "ns", "a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

TEST_F(RestClientTest, TransportErrorIsUnavailable) {
  RestConfig config;
  config.server = "http://127.0.0.1:1";
  RestClientOptions options;
  options.retry.max_attempts = 2;
  options.retry.initial_backoff = absl::Milliseconds(1);
  options.clock = &clock_;
  auto client = RestClient::FromConfig(config, options);
  ASSERT_TRUE(client.ok());
  absl::Status status = (*client)->Get(kPods, "ns", "a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(HttpStatusCode(status), 0);
}

TEST_F(RestClientTest, RotatedTokenFileIsUsed) {
  TempDir dir;
  WriteFile(dir.Join("token"), "first\n");
  Serve([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"metadata":{"name":"a"}})", "application/json");
  });
  RestConfig config;
  config.token_file = dir.Join("token");
  auto client = NewClient(config);
  ASSERT_TRUE(client->Get(kPods, "ns", "a").ok());
  WriteFile(dir.Join("token"), "second-token\n");
  ASSERT_TRUE(client->Get(kPods, "ns", "a").ok());
  std::vector<Seen> requests = seen();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].authorization, "Bearer first");
  EXPECT_EQ(requests[1].authorization, "Bearer second-token");
}

TEST_F(RestClientTest, TheTokenNeverReachesLogsOrErrors) {
  constexpr char kToken[] = "tok-9f3c2a7d41e8b6";
  std::vector<std::string> lines;
  std::mutex mu;
  common::SetLogSinkForTest([&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  });
  // Every failure a token could leak through: refused (with a token-echoing body), a 500
  // after retries, a malformed body.
  int calls = 0;
  Serve([&](const httplib::Request& req, httplib::Response& res) {
    switch (calls++ % 3) {
      case 0:
        res.status = 401;
        res.set_content(absl::StrCat(R"({"kind":"Status","message":"bad )",
                                     req.get_header_value("Authorization"), "\"}"),
                        "application/json");
        break;
      case 1:
        res.status = 500;
        res.set_content("boom", "text/plain");
        break;
      default:
        res.set_content("{not json", "application/json");
    }
  });
  RestConfig config;
  config.token = kToken;
  auto client = NewClient(config);
  std::vector<std::string> errors;
  for (int i = 0; i < 6; ++i) {
    errors.push_back(client->Get(kPods, "ns", "a").status().ToString());
  }
  common::SetLogSinkForTest(nullptr);
  EXPECT_GT(calls, 0);
  for (const std::string& e : errors) {
    EXPECT_THAT(e, Not(HasSubstr(kToken)));
  }
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& line : lines) {
    EXPECT_THAT(line, Not(HasSubstr(kToken)));
  }
}

TEST_F(RestClientTest, WatchParsesChunkedStreamIncrementally) {
  Serve([](const httplib::Request& req, httplib::Response& res) {
    EXPECT_EQ(req.get_param_value("watch"), "true");
    EXPECT_EQ(req.get_param_value("resourceVersion"), "10");
    EXPECT_EQ(req.get_param_value("allowWatchBookmarks"), "true");
    EXPECT_EQ(req.get_param_value("timeoutSeconds"), "30");
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      const std::string events =
          R"({"type":"ADDED","object":{"metadata":{"name":"a","namespace":"n","resourceVersion":"11"}}})"
          "\n"
          R"({"type":"MODIFIED","object":{"metadata":{"name":"a","namespace":"n","resourceVersion":"12"}}})"
          "\n"
          R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"15"}}})"
          "\n";
      // Split mid-event to prove incremental line assembly.
      sink.write(events.data(), 40);
      sink.write(events.data() + 40, events.size() - 40);
      const std::string last =
          R"({"type":"DELETED","object":{"metadata":{"name":"a","namespace":"n","resourceVersion":"16"}}})"
          "\n";
      sink.write(last.data(), last.size());
      sink.done();
      return true;
    });
  });
  auto client = NewClient();
  std::vector<std::string> got;
  absl::Status status = client->Watch(
      kPods, "n", WatchFrom("10", 30),
      [&](const WatchEvent& event) {
        got.push_back(absl::StrCat(ToString(event.type), ":",
                                   event.object["metadata"]["resourceVersion"].get<std::string>()));
        if (event.type != WatchEventType::kBookmark) {
          EXPECT_EQ(event.object["kind"], "Pod");
        }
        return true;
      },
      nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_THAT(got, ElementsAre("ADDED:11", "MODIFIED:12", "BOOKMARK:15", "DELETED:16"));
}

TEST_F(RestClientTest, WatchSurfacesGoneAsDistinctStatus) {
  std::atomic<bool> http_gone{false};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    if (http_gone.load()) {
      res.status = 410;
      res.set_content(StatusBody(410, "Expired", "too old resource version"), "application/json");
      return;
    }
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      const std::string events =
          R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"3"}}})"
          "\n"
          R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})"
          "\n";
      sink.write(events.data(), events.size());
      sink.done();
      return true;
    });
  });
  auto client = NewClient();
  int events = 0;
  auto count = [&](const WatchEvent&) {
    ++events;
    return true;
  };
  absl::Status status = client->Watch(kNodes, "", WatchFrom("1"), count, nullptr);
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_EQ(events, 1);  // the ERROR event itself is not delivered
  http_gone = true;
  status = client->Watch(kNodes, "", WatchFrom("1"), count, nullptr);
  EXPECT_TRUE(IsGone(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("too old resource version"));
}

TEST_F(RestClientTest, WatchTruncatedOrMalformedEventIsDataLoss) {
  std::atomic<int> variant{0};
  Serve([&](const httplib::Request&, httplib::Response& res) {
    const int v = variant.load();
    res.set_chunked_content_provider("application/json", [v](size_t, httplib::DataSink& sink) {
      std::string events =
          R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"3"}}})"
          "\n";
      // A truncated event, text that is no JSON, and JSON that is no event object.
      const char* second[] = {R"({"type":"MODIFIED","object":{"metadata":{"na)",
                              "this is not json\n", "[\"ERROR\"]\n", "\"ERROR\"\n", "42\n"};
      events += second[v];
      sink.write(events.data(), events.size());
      sink.done();
      return true;
    });
  });
  auto client = NewClient();
  for (int v = 0; v < 5; ++v) {
    // Parsed whole, and through a projection (which reads the event's type first).
    for (bool projected : {false, true}) {
      variant = v;
      int events = 0;
      WatchOptions options;
      if (projected) {
        options.projection =
            std::make_shared<const Projection>(Projection::Paths({"metadata.name"}));
      }
      absl::Status status = client->Watch(
          kNodes, "", options,
          [&](const WatchEvent&) {
            ++events;
            return true;
          },
          nullptr);
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
          << "variant " << v << " projected " << projected << ": " << status;
      EXPECT_EQ(events, 1);
    }
  }
}

TEST_F(RestClientTest, WatchStreamStopEndsABlockedWatch) {
  // Shared with the server's handler thread, which may still be leaving the wait when the test
  // body ends: the notification must outlive it.
  auto release = std::make_shared<absl::Notification>();
  Serve([release](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider(
        "application/json", [release](size_t, httplib::DataSink& sink) {
          const std::string event =
              R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"3"}}})"
              "\n";
          sink.write(event.data(), event.size());
          // Then go quiet, as a real watch does between events.
          release->WaitForNotificationWithTimeout(absl::Seconds(20));
          sink.done();
          return true;
        });
  });
  auto client = NewClient();
  absl::Notification first;
  {
    WatchStream stream(*client, kNodes, "", {}, [&](const WatchEvent&) {
      if (!first.HasBeenNotified()) {
        first.Notify();
      }
      return true;
    });
    ASSERT_TRUE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
    const absl::Time start = absl::Now();
    stream.Stop();
    EXPECT_TRUE(stream.Wait().ok());
    EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  }
  release->Notify();
}

TEST_F(RestClientTest, WatchHttpErrorsMapLikeOtherVerbs) {
  Serve([](const httplib::Request&, httplib::Response& res) {
    res.status = 429;
    res.set_header("Retry-After", "2");
    res.set_content(StatusBody(429, "TooManyRequests", "later"), "application/json");
  });
  auto client = NewClient();
  absl::Status status = client->Watch(
      kNodes, "", {}, [](const WatchEvent&) { return true; }, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryAfter(status), absl::Seconds(2));
}

TEST(RestClientConfigTest, RejectsBadServerUrls) {
  RestConfig config;
  config.server = "ftp://x";
  EXPECT_FALSE(RestClient::FromConfig(config).ok());
  config.server = "http://host:notaport";
  EXPECT_FALSE(RestClient::FromConfig(config).ok());
  config.server = "http://:80";
  EXPECT_FALSE(RestClient::FromConfig(config).ok());
}

}  // namespace
}  // namespace dralens::k8s
