#include "src/app/flags.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dralens::app {
namespace {

const FlagSpec* FindFlag(absl::string_view name) {
  for (const FlagSpec& spec : AllFlags()) {
    if (spec.name == name) {
      return &spec;
    }
  }
  return nullptr;
}

bool RoleAccepts(const FlagSpec& spec, Role role) {
  return std::find(spec.roles.begin(), spec.roles.end(), role) != spec.roles.end();
}

const std::string& Empty() {
  static const std::string* empty = new std::string();
  return *empty;
}

}  // namespace

absl::string_view ToString(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kCluster:
      return "cluster";
    case Role::kDemo:
      return "demo";
    case Role::kExplain:
      return "explain";
  }
  return "unknown";
}

const std::string& FlagValues::Get(absl::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? Empty() : it->second;
}

bool FlagValues::GetBool(absl::string_view name) const { return Get(name) == "true"; }

const std::string& FlagValues::Source(absl::string_view name) const {
  auto it = sources_.find(name);
  return it == sources_.end() ? Empty() : it->second;
}

void FlagValues::Set(const std::string& name, std::string value, std::string source) {
  values_[name] = std::move(value);
  sources_[name] = std::move(source);
}

absl::StatusOr<FlagValues> ParseFlags(Role role, const std::vector<std::string>& args,
                                      const std::function<const char*(const char*)>& getenv) {
  FlagValues values;
  // Defaults, then the environment.
  for (const FlagSpec& spec : AllFlags()) {
    if (!RoleAccepts(spec, role)) {
      continue;
    }
    values.Set(spec.name, spec.default_value, "default");
    const char* env = getenv(spec.env.c_str());
    if (env == nullptr) {
      continue;
    }
    std::string v(env);
    if (spec.is_bool) {
      v = absl::AsciiStrToLower(v);
    }
    if (spec.check) {
      if (std::string why = spec.check(v); !why.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("invalid value \"", v,
                                                       "\" in environment variable ", spec.env,
                                                       " (--", spec.name, "): ", why));
      }
    }
    values.Set(spec.name, std::move(v), "env");
  }
  // Then the command line.
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.size() == 2 && arg[0] == '-' && arg[1] != '-') {
      for (const FlagSpec& spec : AllFlags()) {
        if (spec.short_name == arg[1] && RoleAccepts(spec, role)) {
          arg = absl::StrCat("--", spec.name);
        }
      }
    }
    if (role == Role::kExplain && !absl::StartsWith(arg, "-")) {
      if (!values.Get("claim").empty()) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg,
                                                       "\": `dralens explain` explains one claim"));
      }
      values.Set("claim", arg, "argument");
      continue;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg,
                                                     "\" for `dralens ", ToString(role),
                                                     "`: flags look like --name=value"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = FindFlag(name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " for `dralens ",
                                                     ToString(role), "` (see `dralens ",
                                                     ToString(role), " --help`)"));
    }
    if (!RoleAccepts(*spec, role)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " does not apply to `dralens ", ToString(role), "`"));
    }
    if (!has_value) {
      if (spec->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (spec->check) {
      if (std::string why = spec->check(value); !why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid value \"", value, "\" for --", name, ": ", why));
      }
    }
    values.Set(spec->name, std::move(value), "flag");
  }
  return values;
}

std::string RoleHelp(Role role) {
  std::string out;
  switch (role) {
    case Role::kNode:
      out = "Usage: dralens node [flags]\n\nRuns the DRA kubelet plugin on a GPU node.\n";
      break;
    case Role::kCluster:
      out =
          "Usage: dralens cluster [flags]\n\nWatches claims, slices, classes, pods and nodes "
          "cluster-wide and exports what no single node can see.\n";
      break;
    case Role::kDemo:
      out =
          "Usage: dralens demo [flags]\n\nStarts an embedded API server, simulated GPU nodes and "
          "the cluster role on this machine; no cluster needed.\n";
      break;
    case Role::kExplain:
      out =
          "Usage: dralens explain [-n NAMESPACE] CLAIM [flags]\n"
          "       kubectl dralens explain [-n NAMESPACE] CLAIM [flags]   (installed as "
          "kubectl-dralens)\n\n"
          "Reads the live API and says why a ResourceClaim pends (each request's funnel: "
          "devices of its class, those its selectors match, untainted, free, and the nearest "
          "miss) or, for an allocated claim, where it landed, its topology spread, whether a "
          "pod uses it and its cost so far.\n";
      break;
  }
  out += "\nFlags (each has an environment twin; a flag wins over its variable):\n";
  for (const FlagSpec& spec : AllFlags()) {
    if (!RoleAccepts(spec, role)) {
      continue;
    }
    absl::StrAppend(&out, "  ");
    if (spec.short_name != 0) {
      absl::StrAppend(&out, "-", std::string(1, spec.short_name), ", ");
    }
    absl::StrAppend(&out, "--", spec.name, " (", spec.env, ")");
    if (!spec.default_value.empty()) {
      absl::StrAppend(&out, "  default: ", spec.default_value);
    }
    absl::StrAppend(&out, "\n      ", spec.help, "\n");
  }
  out +=
      "\nTracing uses the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, "
      "OTEL_TRACES_SAMPLER, ...).\n";
  return out;
}

std::string TopLevelHelp() {
  return "Usage: dralens <role> [flags]\n"
         "\n"
         "dralens is a Kubernetes DRA driver for GPUs with observability built in.\n"
         "\n"
         "Roles:\n"
         "  node      DRA kubelet plugin for one GPU node (DaemonSet)\n"
         "  cluster   cluster-wide analysis: pending claims, stranded capacity (Deployment)\n"
         "  demo      embedded API server + simulated nodes + cluster role, on this machine\n"
         "\n"
         "Commands:\n"
         "  explain   why a claim pends, or where it landed and what it costs so far\n"
         "\n"
         "Run `dralens <role> --help` for the flags of a role.\n";
}

std::string FlagReferenceMarkdown() {
  std::string out = "| flag | environment | default | roles | meaning |\n|---|---|---|---|---|\n";
  for (const FlagSpec& spec : AllFlags()) {
    std::vector<std::string> roles;
    for (Role r : spec.roles) {
      roles.emplace_back(ToString(r));
    }
    const std::string short_form =
        spec.short_name == 0 ? "" : absl::StrCat(" (`-", std::string(1, spec.short_name), "`)");
    absl::StrAppend(&out, "| `--", spec.name, "`", short_form, " | `", spec.env, "` | ",
                    spec.default_value.empty() ? "" : absl::StrCat("`", spec.default_value, "`"),
                    " | ", absl::StrJoin(roles, ", "), " | ", spec.help, " |\n");
  }
  return out;
}

}  // namespace dralens::app
