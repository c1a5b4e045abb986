# Run by CTest: install the build tree, move the installed tree to another prefix, check it, then
# configure/build/run tests/install/consumer against the moved copy. Proves (issue 23, items 1-3):
# - headers are reachable only as <chorus/...> and include each other that way, so the consumer's
#   own core/error.h and model/model.h (first on its include path) do not collide with chorus's;
# - the package is relocatable: no absolute path of this machine in its CMake files, and the
#   consumer builds and runs from a prefix chorus was never installed to;
# - only the public link interface is found: with shared chorus libraries the consumer configures
#   with CUDA, MPI, oneDNN, zlib, libpng, libjpeg and OpenMP all hidden from find_package.
# With -DSTATIC_PACKAGE=<file> (the test install_static_package, in a shared build) the package is a
# static chorus's, made without compiling: SOURCE_DIR is configured again with BUILD_SHARED_LIBS=OFF
# in WORK_DIR/static-build, each module's static library is archived there from the object files
# BUILD_DIR already compiled for its shared library (the same sources, flags and -fPIC; <file>,
# written by tests/install/CMakeLists.txt, lists them and the build's options), and its
# `library` install component is installed. The same checks then prove the static package: its
# chorusConfig.cmake finds every private dependency its exported targets name, the consumer links
# (its call into launch/build_info pulls in code calling every private library) and runs. The
# installed programs of a static build are checked by scripts/static-install-check.sh.
file(REMOVE_RECURSE ${WORK_DIR})
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
set(first_prefix ${WORK_DIR}/prefix)
if(STATIC_PACKAGE)
  include(${STATIC_PACKAGE})  # CHORUS_STATIC_MODULES, CHORUS_OBJECTS_<module>, CHORUS_STATIC_ARGS, ...
  set(static_build ${WORK_DIR}/static-build)
  run_step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${static_build} -G ${GENERATOR} -DBUILD_SHARED_LIBS=OFF
           -DCHORUS_BUILD_TESTS=OFF -DCHORUS_BUILD_BENCH=OFF ${CHORUS_STATIC_ARGS})
  # The objects fit only a configuration that found the same libraries.
  file(STRINGS ${BUILD_DIR}/chorusConfig.cmake shared_with REGEX "^set\\(CHORUS_WITH_")
  file(STRINGS ${static_build}/chorusConfig.cmake static_with REGEX "^set\\(CHORUS_WITH_")
  if(NOT shared_with STREQUAL static_with)
    message(FATAL_ERROR "the static configure found other libraries than ${BUILD_DIR}:\n"
                        "  ${static_with}\n  instead of\n  ${shared_with}")
  endif()
  foreach(module ${CHORUS_STATIC_MODULES})
    if(NOT CHORUS_OBJECTS_${module})
      message(FATAL_ERROR "no object files listed for chorus_${module}")
    endif()
    run_step(${CHORUS_AR} qcs ${static_build}/lib/${CHORUS_STATIC_PREFIX}chorus_${module}${CHORUS_STATIC_SUFFIX}
             ${CHORUS_OBJECTS_${module}})
  endforeach()
  run_step(${CMAKE_COMMAND} --install ${static_build} --prefix ${first_prefix} --component library)
  file(STRINGS ${first_prefix}/lib/cmake/chorus/chorusConfig.cmake static REGEX "^set\\(CHORUS_SHARED_LIBS OFF\\)")
  if(NOT static)
    message(FATAL_ERROR "${first_prefix}/lib/cmake/chorus/chorusConfig.cmake is not a static package's")
  endif()
else()
  run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${first_prefix})
endif()
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
  file(STRINGS ${include_root}/${header} external REGEX "^#include <(cuda|cudnn|nccl|mpi|dnnl|zlib|png|jpeg|omp)[a-z_]*\\.h")
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

# 3. The consumer, built from the moved prefix. A shared chorus needs nothing found but Threads; a
# static one needs its private dependencies found (and nothing is hidden).
set(extra "")
if(CUDA_COMPILER)
  set(extra -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER})
endif()
file(STRINGS ${prefix}/lib/cmake/chorus/chorusConfig.cmake shared REGEX "^set\\(CHORUS_SHARED_LIBS ON\\)")
if(shared)
  foreach(pkg CUDAToolkit MPI dnnl ZLIB PNG JPEG OpenMP)
    list(APPEND extra -DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON)
  endforeach()
endif()
run_step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release ${extra})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/consumer)
if(STATIC_PACKAGE)
  return()  # the `programs` component was not installed
endif()
# The installed tools run from the moved prefix too (their RUNPATH is $ORIGIN-relative).
foreach(tool chorus-devices mnist_mirrored)
  if(EXISTS ${prefix}/bin/${tool})
    run_step(${prefix}/bin/${tool} --version)
  else()
    message(FATAL_ERROR "${tool} was not installed into ${prefix}/bin")
  endif()
endforeach()
