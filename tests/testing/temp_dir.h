// tests/testing/temp_dir.h — a fresh, uniquely named directory under the system temp dir
// (mkdtemp), removed with everything in it when the object goes away. Test-only.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "runtime/core/check.h"

namespace tessera::testing {

class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("tessera_" + tag + "_XXXXXX")).string();
    TESSERA_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // "<dir>/<name>"
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::testing
