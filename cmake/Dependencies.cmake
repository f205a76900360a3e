# Third-party dependencies, found once. Debian 12 package names in tools/dev/install-deps.sh.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)

# OpenBLAS, OpenMP flavour: its threads and our kernels' OpenMP loops then share one libgomp
# pool instead of two pools fighting over the cores (PLATFORM.md, "Threads").
find_library(TESSERA_OPENBLAS_LIB NAMES openblas
             HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp REQUIRED NO_DEFAULT_PATH)
find_path(TESSERA_CBLAS_INCLUDE NAMES cblas.h
          HINTS /usr/include/x86_64-linux-gnu/openblas-openmp REQUIRED NO_DEFAULT_PATH)
add_library(tessera_blas INTERFACE)
target_link_libraries(tessera_blas INTERFACE ${TESSERA_OPENBLAS_LIB} OpenMP::OpenMP_CXX)
target_include_directories(tessera_blas SYSTEM INTERFACE ${TESSERA_CBLAS_INCLUDE})

find_package(yaml-cpp REQUIRED)
