// tools/args.h — a small argv parser shared by the subcommands: positional arguments,
// "--flag value" / "--flag=value" options (repeatable), and boolean switches. Unknown flags
// are errors that name the flag and point at --help.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace tessera::cli {

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // "--set" -> {"a=1", "b=2"}
  std::set<std::string> switches;                          // "--json"

  bool Has(const std::string& flag) const { return switches.count(flag) || values.count(flag); }
  // Last value of `flag`, or `fallback`.
  std::string Get(const std::string& flag, const std::string& fallback = "") const;
  const std::vector<std::string>& All(const std::string& flag) const;
};

// `value_flags` take a value; `switch_flags` do not. `command` names the subcommand in errors.
Result<ParsedArgs> ParseArgs(const std::vector<std::string>& args, const std::string& command,
                             const std::set<std::string>& value_flags,
                             const std::set<std::string>& switch_flags);

// Parses a non-negative integer flag value; error names the flag.
Result<int64_t> ParseIntFlag(const std::string& flag, const std::string& value);
// Parses a finite, non-negative number (seconds, factors); error names the flag.
Result<double> ParseNumberFlag(const std::string& flag, const std::string& value);

}  // namespace tessera::cli
