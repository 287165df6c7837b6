// Flags of the dralens command line. Every flag has an environment twin; a flag given on the
// command line wins over its environment variable, which wins over the default.
//
// The table in flag_table.cc is the single source of truth: --help, the README's flag reference and
// the parser all read it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dralens::app {

// The three roles, and `explain`, a one-shot command that reads the live API.
enum class Role { kNode, kCluster, kDemo, kExplain };

absl::string_view ToString(Role role);

struct FlagSpec {
  std::string name;           // without dashes, e.g. "node-name"
  std::string env;            // e.g. "NODE_NAME"
  std::string default_value;  // as text; "" means unset
  std::string help;
  std::vector<Role> roles;  // roles that accept the flag
  // Checks a value; returns a message saying what is allowed, or "" when it is fine.
  std::function<std::string(absl::string_view)> check;
  bool is_bool = false;  // may be given without a value: --flag means --flag=true
  char short_name = 0;   // one-letter form, e.g. 'v' for -v or 'n' for -n NS; 0 means none
};

// All flags, in --help order.
const std::vector<FlagSpec>& AllFlags();

// The values in force for one role: every flag of the role has an entry (maybe "").
class FlagValues {
 public:
  const std::string& Get(absl::string_view name) const;
  bool GetBool(absl::string_view name) const;
  // Where the value came from: "flag", "env" or "default".
  const std::string& Source(absl::string_view name) const;
  void Set(const std::string& name, std::string value, std::string source);

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::string, std::less<>> sources_;
};

// Parses the arguments after the role name. `explain` also takes one argument that is not a
// flag, the claim's name, returned as the value "claim". `getenv` looks up environment variables
// (tests pass a map). Errors name the offending flag or variable and say what is allowed.
absl::StatusOr<FlagValues> ParseFlags(Role role, const std::vector<std::string>& args,
                                      const std::function<const char*(const char*)>& getenv);

// `dralens <role> --help` text.
std::string RoleHelp(Role role);
// `dralens --help` text.
std::string TopLevelHelp();
// The flag reference as a Markdown table, for the README.
std::string FlagReferenceMarkdown();

// Value checks shared by flags and tests.
std::string CheckHostPort(absl::string_view value);      // "host:port", port 0..65535
std::string CheckHostPortList(absl::string_view value);  // "host:port[,host:port...]"
std::string CheckDnsSubdomain(absl::string_view value);

}  // namespace dralens::app
