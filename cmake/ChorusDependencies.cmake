# Feature detection, one place (STYLE.md habit 12). Every optional library sets CHORUS_WITH_<LIB>
# and prints one line saying whether it was found and what turns off without it.
# Force a part off with -DCHORUS_ENABLE_<LIB>=OFF.

find_package(Threads REQUIRED)
# zlib (Debian zlib1g-dev): compressed TFRecord files (data/) and PNG image summaries (summary/).
find_package(ZLIB REQUIRED)
# libpng (Debian libpng-dev) and libjpeg-turbo (Debian libjpeg62-turbo-dev): the image codecs of
# data/io (decode_png, encode_png, decode_jpeg, decode_image), which TensorFlow builds on the same two.
find_package(PNG REQUIRED)
find_package(JPEG REQUIRED)
# nlohmann-json (Debian nlohmann-json3-dev, header only): every JSON chorus reads or writes
# (TF_CONFIG, timeline traces, bench output). Private to the libraries (core/json_internal.h).
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "chorus: nlohmann-json >= 3.10 not found (apt-get install nlohmann-json3-dev, or set "
                      "CMAKE_PREFIX_PATH to a folder with share/cmake/nlohmann_json)")
endif()
# What the modules link: header only, so it is a build-time dependency alone. Wrapped in
# BUILD_INTERFACE, a static chorus's exported link interface does not name it, and its users'
# find_package(chorus) need not find it (nothing of it reaches their link line).
set(CHORUS_JSON "$<BUILD_INTERFACE:nlohmann_json::nlohmann_json>")

option(CHORUS_ENABLE_CUDA "Use CUDA if found" ON)
option(CHORUS_ENABLE_MPI "Use MPI if found" ON)
option(CHORUS_ENABLE_DNNL "Use oneDNN if found" ON)
option(CHORUS_ENABLE_GLOO "Use Gloo if found (CPU collectives over TCP without MPI)" ON)

set(CHORUS_WITH_CUDA OFF)
set(CHORUS_WITH_NCCL OFF)
set(CHORUS_WITH_CUDNN OFF)
set(CHORUS_WITH_MPI OFF)
set(CHORUS_WITH_DNNL OFF)
set(CHORUS_WITH_GLOO OFF)

# --- CUDA runtime, cuBLAS, cuDNN, NCCL ------------------------------------------------------
if(CHORUS_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90 (H100/H200) plus PTX for newer chips; override with -DCMAKE_CUDA_ARCHITECTURES=...
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 flag; device code needs only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    find_package(CUDAToolkit)
  endif()
  if(CUDAToolkit_FOUND)
    set(CHORUS_WITH_CUDA ON)
    message(STATUS "chorus: CUDA ${CUDAToolkit_VERSION} found (${CUDAToolkit_BIN_DIR}): GPU devices ON, arch ${CMAKE_CUDA_ARCHITECTURES}")
  else()
    message(STATUS "chorus: CUDA not found: GPU devices OFF (CPU-only build)")
  endif()
else()
  message(STATUS "chorus: CUDA disabled by CHORUS_ENABLE_CUDA=OFF: GPU devices OFF")
endif()

if(CHORUS_WITH_CUDA)
  include(ChorusGpuLibraries)  # chorus_deps::nccl, chorus_deps::cudnn
  if(CHORUS_FOUND_NCCL)
    set(CHORUS_WITH_NCCL ON)
    message(STATUS "chorus: NCCL found (${CHORUS_NCCL_LIBRARY}): NCCL collectives ON")
  else()
    message(STATUS "chorus: NCCL not found: NCCL collectives OFF (set NCCL_HOME)")
  endif()
  if(CHORUS_FOUND_CUDNN)
    set(CHORUS_WITH_CUDNN ON)
    message(STATUS "chorus: cuDNN found (${CHORUS_CUDNN_LIBRARY}): cuDNN kernels ON")
  else()
    message(STATUS "chorus: cuDNN not found: cuDNN kernels OFF (set CUDNN_HOME)")
  endif()
endif()

# --- MPI ---------------------------------------------------------------------------------------
if(CHORUS_ENABLE_MPI)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(CHORUS_WITH_MPI ON)
    message(STATUS "chorus: MPI ${MPI_CXX_VERSION} found (${MPIEXEC_EXECUTABLE}): multi-process ON")
  else()
    message(STATUS "chorus: MPI not found: multi-process OFF (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()

# --- Gloo ---------------------------------------------------------------------------------------
# Debian's libgloo-dev ships a CMake package (/usr/share/cmake/Gloo) whose imported target `gloo`
# names only its include directory: libgloo.so itself pulls hiredis and ibverbs (DT_NEEDED), and
# its TCP transport runs a thread of its own, so chorus adds Threads. CMAKE_DISABLE_FIND_PACKAGE_Gloo=ON
# (or CHORUS_ENABLE_GLOO=OFF) hides it: collective/gloo/gloo.h then throws UnavailableError.
if(CHORUS_ENABLE_GLOO)
  find_package(Gloo CONFIG QUIET)
  if(Gloo_FOUND AND TARGET gloo)
    set(CHORUS_WITH_GLOO ON)
    message(STATUS "chorus: Gloo ${GLOO_VERSION} found (${Gloo_DIR}): Gloo collectives over TCP ON")
  else()
    message(STATUS "chorus: Gloo not found: Gloo collectives OFF (apt-get install libgloo-dev)")
  endif()
else()
  message(STATUS "chorus: Gloo disabled by CHORUS_ENABLE_GLOO=OFF: Gloo collectives OFF")
endif()

# --- oneDNN ------------------------------------------------------------------------------------
if(CHORUS_ENABLE_DNNL)
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(CHORUS_WITH_DNNL ON)
    message(STATUS "chorus: oneDNN ${dnnl_VERSION} found: oneDNN CPU kernels ON")
  else()
    message(STATUS "chorus: oneDNN not found: oneDNN CPU kernels OFF (apt-get install libdnnl-dev)")
  endif()
endif()
