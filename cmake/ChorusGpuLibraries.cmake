# NCCL and cuDNN as imported targets chorus_deps::nccl and chorus_deps::cudnn (CMake's
# FindCUDAToolkit has no target for either). Included after find_package(CUDAToolkit) by the build
# (cmake/ChorusDependencies.cmake) and, for a static chorus only, by the installed chorusConfig.cmake:
# a static library's private dependencies reach its users' link line, and naming them by target
# instead of by this machine's path keeps the installed package relocatable. Looked for beside the
# toolkit, then under $NCCL_HOME / $CUDNN_HOME. Sets CHORUS_FOUND_NCCL and CHORUS_FOUND_CUDNN.
function(_chorus_gpu_library target header library home_var)
  string(TOUPPER "${library}" upper)
  find_path(CHORUS_${upper}_INCLUDE ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{${home_var}}/include)
  find_library(CHORUS_${upper}_LIBRARY ${library} HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{${home_var}}/lib)
  set(CHORUS_FOUND_${upper} OFF PARENT_SCOPE)
  if(CHORUS_${upper}_INCLUDE AND CHORUS_${upper}_LIBRARY)
    if(NOT TARGET chorus_deps::${target})
      add_library(chorus_deps::${target} UNKNOWN IMPORTED)
      set_target_properties(chorus_deps::${target} PROPERTIES
        IMPORTED_LOCATION "${CHORUS_${upper}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CHORUS_${upper}_INCLUDE}")
    endif()
    set(CHORUS_FOUND_${upper} ON PARENT_SCOPE)
  endif()
endfunction()
_chorus_gpu_library(nccl nccl.h nccl NCCL_HOME)
_chorus_gpu_library(cudnn cudnn.h cudnn CUDNN_HOME)
