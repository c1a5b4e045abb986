# Wraps CMake's own FindCUDAToolkit module for one bug of CMake 3.25.1 (Debian 12's CMake) with
# CUDA >= 12.9 (which ships no libnvToolsExt): for any project whose cmake_minimum_required is
# 3.25 or newer, the stock module sets a DEPRECATION property on CUDA::nvToolsExt without checking
# that the target exists, and configuration fails with
#   set_property could not find TARGET CUDA::nvToolsExt.
# The module takes that branch only when CMAKE_MINIMUM_REQUIRED_VERSION >= 3.25, so the wrapper
# lowers that variable for the module's run and restores it after; nothing else changes. It is
# found first because cmake/ is on CMAKE_MODULE_PATH, and it is installed beside chorusConfig.cmake
# so that find_package(chorus) -> find_dependency(CUDAToolkit) works in users' projects too.
set(_chorus_saved_min_version "${CMAKE_MINIMUM_REQUIRED_VERSION}")
if(CMAKE_VERSION VERSION_LESS 3.26 AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
endif()
include("${CMAKE_ROOT}/Modules/FindCUDAToolkit.cmake")
set(CMAKE_MINIMUM_REQUIRED_VERSION "${_chorus_saved_min_version}")
unset(_chorus_saved_min_version)
