// tools/args.cc — see args.h.
#include "tools/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace tessera::cli {

std::string ParsedArgs::Get(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& ParsedArgs::All(const std::string& flag) const {
  static const std::vector<std::string> kEmpty;
  auto it = values.find(flag);
  return it == values.end() ? kEmpty : it->second;
}

Result<ParsedArgs> ParseArgs(const std::vector<std::string>& args, const std::string& command,
                             const std::set<std::string>& value_flags,
                             const std::set<std::string>& switch_flags) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a.rfind("--", 0) != 0) {
      out.positional.push_back(a);
      continue;
    }
    std::string flag = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    if (switch_flags.count(flag) && !inline_value) {
      out.switches.insert(flag);
    } else if (value_flags.count(flag)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) {
          return InvalidArgument("tessera " + command + ": " + flag + " needs a value");
        }
        value = args[++i];
      }
      out.values[flag].push_back(value);
    } else {
      return InvalidArgument("tessera " + command + ": unknown option '" + flag +
                             "' (see tessera " + command + " --help)");
    }
  }
  return out;
}

Result<int64_t> ParseIntFlag(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 0 || errno == ERANGE) {
    return InvalidArgument(flag + ": expected a non-negative integer, got \"" + value + "\"");
  }
  return static_cast<int64_t>(v);
}

Result<double> ParseNumberFlag(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || errno == ERANGE) {
    return InvalidArgument(flag + ": expected a non-negative number, got \"" + value + "\"");
  }
  return v;
}

}  // namespace tessera::cli
