# tests/fuzz/FuzzTests.cmake — the fuzz targets in the main build's ctest (label `fuzz`).
#
# The main build uses g++; libFuzzer needs clang. So this file, included by tests/CMakeLists.txt,
# configures a second build of this same source tree with clang (an ExternalProject in
# build/fuzz, TESSERA_FUZZ_ONLY: only the parsers and tests/fuzz, see tests/fuzz/CMakeLists.txt)
# as part of `cmake --build build`, and registers two tests per tests/fuzz/<name>_fuzz.cc:
#   fuzz_<name>_replay  every seed (corpus/<name>) and regression input (regressions/<name>)
#                       once: fast, and what keeps a fixed crash fixed
#   fuzz_<name>         TESSERA_FUZZ_SECONDS of fuzzing from them; fails on any crash,
#                       sanitizer report, leak, slow input or memory limit (run_fuzz.sh)
#
# TESSERA_FUZZ: AUTO (default) builds them when clang++ can link -fsanitize=fuzzer (Debian:
# clang + libclang-rt-14-dev, tools/dev/install-deps.sh), ON requires it, OFF skips them. Without
# clang the project configures and builds as before, without fuzz tests, and says so once.
set(TESSERA_FUZZ AUTO CACHE STRING "libFuzzer targets under ctest: AUTO (when clang has libFuzzer) | ON | OFF")
set_property(CACHE TESSERA_FUZZ PROPERTY STRINGS AUTO ON OFF)
set(TESSERA_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz_<name> test fuzzes for")

if(TESSERA_FUZZ STREQUAL "OFF")
  message(STATUS "Fuzz tests off (TESSERA_FUZZ=OFF)")
  return()
endif()

# Can clang link a libFuzzer + ASan + UBSan program? Probed once per compiler while it can
# (cached); a failed probe runs again at the next configure, so installing the runtime is enough.
find_program(TESSERA_FUZZ_CXX NAMES clang++ clang++-14)
find_program(TESSERA_FUZZ_CC NAMES clang clang-14)
if(TESSERA_FUZZ_CXX AND TESSERA_FUZZ_CC AND
   (NOT TESSERA_FUZZ_WORKS OR NOT TESSERA_FUZZ_PROBED STREQUAL TESSERA_FUZZ_CXX))
  set(probe_dir ${CMAKE_BINARY_DIR}/fuzz_probe)
  file(WRITE ${probe_dir}/probe.cc
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${TESSERA_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cc -o probe
                  WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(probe_rc EQUAL 0)
    set(TESSERA_FUZZ_WORKS ON CACHE INTERNAL "clang links -fsanitize=fuzzer")
  else()
    set(TESSERA_FUZZ_WORKS OFF CACHE INTERNAL "clang links -fsanitize=fuzzer")
  endif()
  set(TESSERA_FUZZ_PROBED ${TESSERA_FUZZ_CXX} CACHE INTERNAL "compiler the probe ran with")
endif()

if(NOT TESSERA_FUZZ_WORKS)
  set(why "clang++ with libFuzzer not found (Debian: apt-get install clang libclang-rt-14-dev)")
  if(TESSERA_FUZZ STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_FUZZ=ON, but ${why}")
  endif()
  message(STATUS "Fuzz tests off: ${why}")
  return()
endif()

include(ExternalProject)
set(fuzz_build ${CMAKE_BINARY_DIR}/fuzz)
# RelWithDebInfo: -O2 with line tables for the reports, and none of Release's -march flags.
ExternalProject_Add(tessera_fuzz_targets
  SOURCE_DIR ${CMAKE_SOURCE_DIR}
  BINARY_DIR ${fuzz_build}
  CMAKE_ARGS -DTESSERA_FUZZ_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
             -DCMAKE_CXX_COMPILER=${TESSERA_FUZZ_CXX} -DCMAKE_C_COMPILER=${TESSERA_FUZZ_CC}
             -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
             -DCMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}
  INSTALL_COMMAND ""
  # The sub-build tracks its own sources: let its make decide what is out of date.
  BUILD_ALWAYS ON)
message(STATUS "Fuzz tests on: ${TESSERA_FUZZ_CXX}, targets built in ${fuzz_build}, "
               "${TESSERA_FUZZ_SECONDS} s each under ctest -L fuzz")

set(run_fuzz ${CMAKE_CURRENT_LIST_DIR}/run_fuzz.sh)
file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_fuzz.cc)
foreach(fuzz_src ${fuzz_sources})
  get_filename_component(target ${fuzz_src} NAME_WE)   # config_fuzz
  string(REGEX REPLACE "_fuzz$" "" name ${target})     # config
  set(binary ${fuzz_build}/tests/fuzz/${target})
  add_test(NAME fuzz_${name}_replay COMMAND bash ${run_fuzz} replay ${binary} ${name})
  add_test(NAME fuzz_${name}
           COMMAND bash ${run_fuzz} fuzz ${binary} ${name} ${CMAKE_BINARY_DIR}/fuzz-work/${name}
                   ${TESSERA_FUZZ_SECONDS})
  math(EXPR fuzz_timeout "${TESSERA_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz_${name}_replay PROPERTIES LABELS fuzz TIMEOUT 120)
  set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT ${fuzz_timeout})
endforeach()
