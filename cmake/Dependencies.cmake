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

# oneDNN (Debian libdnnl-dev, its OpenMP build: products run on the same libgomp pool), used only
# inside runtime/kernels/cpu/onednn_matmul.cc for bf16 matmul. Found by header and library
# rather than through its CMake config, which also demands the OpenCL development files for a
# GPU runtime Tessera does not use.
find_path(TESSERA_DNNL_INCLUDE NAMES oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(TESSERA_DNNL_LIB NAMES dnnl REQUIRED)
add_library(tessera_dnnl INTERFACE)
target_link_libraries(tessera_dnnl INTERFACE ${TESSERA_DNNL_LIB} OpenMP::OpenMP_CXX)
target_include_directories(tessera_dnnl SYSTEM INTERFACE ${TESSERA_DNNL_INCLUDE})
message(STATUS "oneDNN: ${TESSERA_DNNL_LIB}")

# liburing (Debian liburing-dev), used only inside optimizer/offload_file.cc: the disk tier of
# optimizer state (optimizer.offload: nvme) streams its chunks through an io_uring.
find_path(TESSERA_URING_INCLUDE NAMES liburing.h REQUIRED)
find_library(TESSERA_URING_LIB NAMES uring REQUIRED)
add_library(tessera_uring INTERFACE)
target_link_libraries(tessera_uring INTERFACE ${TESSERA_URING_LIB})
target_include_directories(tessera_uring SYSTEM INTERFACE ${TESSERA_URING_INCLUDE})
message(STATUS "liburing: ${TESSERA_URING_LIB}")

find_package(yaml-cpp REQUIRED)

# SentencePiece (Debian libsentencepiece-dev), used only inside
# runtime/train/data/sentencepiece_tokenizer.cc: a model's tokenizer.model for data tokenize.
find_path(TESSERA_SPM_INCLUDE NAMES sentencepiece_processor.h REQUIRED)
find_library(TESSERA_SPM_LIB NAMES sentencepiece REQUIRED)
add_library(tessera_sentencepiece INTERFACE)
target_link_libraries(tessera_sentencepiece INTERFACE ${TESSERA_SPM_LIB})
target_include_directories(tessera_sentencepiece SYSTEM INTERFACE ${TESSERA_SPM_INCLUDE})

# MPI (comm/: the host backend and the NCCL bootstrap). Skip Open MPI's deprecated C++ bindings:
# they break the link (PLATFORM.md).
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)

# NCCL (comm/nccl_communicator.cc): built when the CUDA toolkit and NCCL are found; a machine
# without them configures and builds everything else. The backend is plain C++ against the CUDA
# runtime, so no enable_language(CUDA) is needed here. NCCL ships no CMake config: find_path +
# find_library under the toolkit, wrapped in an imported target.
find_program(TESSERA_NVCC nvcc HINTS /usr/local/cuda/bin)
if(TESSERA_NVCC)
  set(tessera_nccl_default ON)
else()
  set(tessera_nccl_default OFF)
endif()
option(TESSERA_NCCL "Build the NCCL communicator backend (CUDA toolkit + NCCL)" ${tessera_nccl_default})
# For CUDA kernels elsewhere: "native" is a configure error without a GPU (PLATFORM.md).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
if(TESSERA_NCCL)
  find_package(CUDAToolkit QUIET)
  find_path(TESSERA_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(TESSERA_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(CUDAToolkit_FOUND AND TESSERA_NCCL_INCLUDE AND TESSERA_NCCL_LIB)
    add_library(tessera::nccl UNKNOWN IMPORTED)
    set_target_properties(tessera::nccl PROPERTIES IMPORTED_LOCATION ${TESSERA_NCCL_LIB}
                          INTERFACE_INCLUDE_DIRECTORIES ${TESSERA_NCCL_INCLUDE})
    message(STATUS "NCCL backend: ${TESSERA_NCCL_LIB}")
  else()
    message(STATUS "NCCL backend off (CUDA toolkit or NCCL not found)")
    set(TESSERA_NCCL OFF CACHE BOOL "Build the NCCL communicator backend (CUDA toolkit + NCCL)" FORCE)
  endif()
endif()

# The CUDA compute backend (runtime/kernels/cuda/): kernels in .cu files, so CMake's CUDA
# language, on by default where nvcc exists; everything else builds without it. CUDA 17 for
# nvcc (CMake 3.25 knows no CUDA20), the architecture from CMAKE_CUDA_ARCHITECTURES above
# (90 = H100/H200; e.g. -DCMAKE_CUDA_ARCHITECTURES=80 for an A100).
option(TESSERA_CUDA "Build the CUDA compute backend (needs nvcc and cuBLAS)" ${tessera_nccl_default})
if(TESSERA_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${TESSERA_NVCC})
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_${CMAKE_CUDA_ARCHITECTURES}")
endif()
