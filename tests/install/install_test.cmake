# Run by CTest: install the build tree, move the installed tree to another prefix, check it, then
# configure/build/run tests/install/consumer against the moved copy. Proves (issue 23, items 1-3):
# - headers are reachable only as <chorus/...> and include each other that way, so the consumer's
#   own core/error.h and model/model.h (first on its include path) do not collide with chorus's;
# - the package is relocatable: no absolute path of this machine in its CMake files, and the
#   consumer builds and runs from a prefix chorus was never installed to;
# - only the public link interface is found: with shared chorus libraries the consumer configures
#   with CUDA, MPI, oneDNN, zlib and OpenMP all hidden from find_package.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
set(first_prefix ${WORK_DIR}/prefix)
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${first_prefix})
set(prefix ${WORK_DIR}/moved/prefix)
file(MAKE_DIRECTORY ${WORK_DIR}/moved)
file(RENAME ${first_prefix} ${prefix})

# 1. Headers: every installed header includes chorus headers only as <chorus/...>, each installed
# (private headers - internal.h, detail.h, *_internal.h, cuda/, those including a private library's
# header - are not, so a public header must not need one).
set(include_root ${prefix}/include)
file(GLOB_RECURSE installed RELATIVE ${include_root} ${include_root}/*.h)
set(problems "")
foreach(header ${installed})
  if(NOT header MATCHES "^chorus/")
    list(APPEND problems "${header} is installed outside include/chorus/")
  endif()
  if(header MATCHES "(^|/)(internal|detail|[a-z_]+_internal)\\.h$" OR header MATCHES "/cuda/")
    list(APPEND problems "${header} is private and was installed")
  endif()
  file(STRINGS ${include_root}/${header} quoted REGEX "^#include \"")
  foreach(line ${quoted})
    list(APPEND problems "${header}: ${line} (chorus headers include each other as <chorus/...>)")
  endforeach()
  file(STRINGS ${include_root}/${header} includes REGEX "^#include <chorus/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include <([^>]+)>.*" "\\1" included "${line}")
    if(NOT EXISTS ${include_root}/${included})
      list(APPEND problems "${header} includes <${included}>, which is not installed")
    endif()
  endforeach()
  file(STRINGS ${include_root}/${header} external REGEX "^#include <(cuda|cudnn|nccl|mpi|dnnl|zlib|omp)[a-z_]*\\.h")
  foreach(line ${external})
    list(APPEND problems "${header}: ${line} (a library chorus uses privately)")
  endforeach()
endforeach()
list(LENGTH installed nheaders)
if(nheaders LESS 20)
  message(FATAL_ERROR "only ${nheaders} headers installed under ${include_root}")
endif()

# 2. No absolute path in the installed CMake files: not this build's, not its sources', not the
# prefix's, not a library's (/usr/local/cuda/...). Paths are ${_IMPORT_PREFIX}- or
# ${CMAKE_CURRENT_LIST_DIR}-relative.
file(GLOB_RECURSE cmake_files ${prefix}/*.cmake)
if(NOT cmake_files)
  message(FATAL_ERROR "no CMake files installed under ${prefix}")
endif()
foreach(f ${cmake_files})
  file(STRINGS ${f} lines)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*#")
      continue()
    endif()
    # An absolute path: a / that starts a word (after a quote, blank, ; = ( or :) and a letter after it.
    if(line MATCHES "(^|[\"' \t;=(:])/[A-Za-z]" OR line MATCHES "${WORK_DIR}|${BUILD_DIR}|${SOURCE_DIR}")
      file(RELATIVE_PATH rel ${prefix} ${f})
      list(APPEND problems "${rel}: absolute path: ${line}")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "the installed package is not clean:\n  ${text}")
endif()

# 3. The consumer, built from the moved prefix. A shared chorus needs nothing found but Threads.
set(extra "")
if(CUDA_COMPILER)
  set(extra -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER})
endif()
file(STRINGS ${prefix}/lib/cmake/chorus/chorusConfig.cmake shared REGEX "^set\\(CHORUS_SHARED_LIBS ON\\)")
if(shared)
  foreach(pkg CUDAToolkit MPI dnnl ZLIB OpenMP)
    list(APPEND extra -DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON)
  endforeach()
endif()
run_step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release ${extra})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/consumer)
# The installed tools run from the moved prefix too (their RUNPATH is $ORIGIN-relative).
foreach(tool chorus-devices mnist_mirrored)
  if(EXISTS ${prefix}/bin/${tool})
    run_step(${prefix}/bin/${tool} --version)
  else()
    message(FATAL_ERROR "${tool} was not installed into ${prefix}/bin")
  endif()
endforeach()
