# Helpers shared by every module's CMakeLists.txt.

set(CHORUS_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers)

if(CHORUS_SANITIZE STREQUAL "address")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
  set(CHORUS_SANITIZE_LINK_OPTIONS -fsanitize=address,undefined)
  # Every test and the processes it starts: the first report fails it. LeakSanitizer: Open MPI,
  # hwloc and PMIx keep allocations to process exit (not ours to fix: tests/sanitizers/lsan.supp).
  set(CHORUS_SANITIZER_TEST_ENV "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
      "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp")
  # Tests labelled mpi: their ranks' leak reports must reach Open MPI's frames to be suppressed, and
  # malloc's fast (frame-pointer) unwinder stops in Open MPI's first frame, whose MCA component is
  # unloaded by exit time ("<unknown module>"): the slow unwinder for those processes only.
  set(CHORUS_SANITIZER_MPI_TEST_ENV "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:fast_unwind_on_malloc=0")
elseif(CHORUS_SANITIZE STREQUAL "thread")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
  set(CHORUS_SANITIZE_LINK_OPTIONS -fsanitize=thread)
  # The first report fails the test; uninstrumented oneDNN and libgomp: tests/sanitizers/tsan.supp.
  set(CHORUS_SANITIZER_TEST_ENV
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan.supp")
elseif(NOT CHORUS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CHORUS_SANITIZE='${CHORUS_SANITIZE}': valid values are '', 'address', 'thread'")
endif()
# Sanitized code runs 2-15x slower (TSan most): every test's TIMEOUT is scaled by this.
if(CHORUS_SANITIZE STREQUAL "")
  set(CHORUS_TEST_TIMEOUT_SCALE 1)
else()
  set(CHORUS_TEST_TIMEOUT_SCALE 8)
endif()

# Headers that include a privately used library's header (besides *_internal.h and cuda/).
set(CHORUS_PRIVATE_HEADERS "nccl_check|zlib_stream")

# chorus_add_module(<name> SOURCES ... [CUDA_SOURCES ...] [DEPS ...])
# Creates the library target chorus_<name> (alias chorus::<name>) from the folder <name>/.
# Headers are installed under include/chorus/<name>/.
function(chorus_add_module name)
  cmake_parse_arguments(M "" "" "SOURCES;CUDA_SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(srcs ${M_SOURCES})
  if(CHORUS_WITH_CUDA)
    list(APPEND srcs ${M_CUDA_SOURCES})
  endif()
  add_library(chorus_${name} ${srcs})
  add_library(chorus::${name} ALIAS chorus_${name})
  target_compile_options(chorus_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CHORUS_WARNINGS}>)
  # <chorus/...> only (see the top CMakeLists.txt): the folder above chorus/, never chorus/ itself.
  target_include_directories(chorus_${name} PUBLIC
    $<BUILD_INTERFACE:${CHORUS_BUILD_INCLUDE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(chorus_${name} PUBLIC ${M_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  # A sanitized static library links only with the sanitizer's runtime: an installed sanitized
  # package brings the flag to its users (inside this build add_link_options does it).
  if(CHORUS_SANITIZE_LINK_OPTIONS)
    target_link_options(chorus_${name} INTERFACE $<INSTALL_INTERFACE:${CHORUS_SANITIZE_LINK_OPTIONS}>)
  endif()
  # The headers are C++20 (defaulted operator==, requires-clauses, std::span): every user of a module
  # compiles as C++20 or later, whatever CMAKE_CXX_STANDARD it sets. Exported with the target.
  target_compile_features(chorus_${name} PUBLIC cxx_std_20)
  set_target_properties(chorus_${name} PROPERTIES EXPORT_NAME ${name})
  install(TARGETS chorus_${name} EXPORT chorusTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # Public headers only. Not installed: a module's internal.h / detail.h / *_internal.h, for its
  # own .cc files; its cuda/ folder (kernels and CUDA error checks, which include the CUDA headers);
  # and the headers that include a library chorus uses privately (nccl.h, zlib.h), listed in
  # CHORUS_PRIVATE_HEADERS. tests/install checks that no installed header includes any of them.
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/chorus/${name}
          FILES_MATCHING PATTERN "*.h"
          REGEX "/(internal|detail|[a-z_]+_internal|${CHORUS_PRIVATE_HEADERS})\\.h$" EXCLUDE
          REGEX "/cuda$" EXCLUDE)
endfunction()

# chorus_set_test_environment(): the environment of every test of the calling folder added with
# add_test (gtest-discovered tests get the same from chorus_add_test). Call it at the end of the file.
# - Tests whose LABELS lack gpu run with CUDA_VISIBLE_DEVICES set empty, so that they test the CPU
#   paths on any machine: on a GPU machine chorus would otherwise place its work on GPU:0 (a cpu
#   test then checks a GPU kernel against a CPU formula, several reserve the whole GPU at once,
#   MPI ranks share one GPU for NCCL).
# - In a sanitizer build, CHORUS_SANITIZER_TEST_ENV (the options, with the suppression files in
#   tests/sanitizers/); processes started by the test (mpirun's ranks) inherit it. Timeouts are
#   scaled by CHORUS_TEST_TIMEOUT_SCALE.
function(chorus_set_test_environment)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t ${tests})
    get_test_property(${t} LABELS labels)
    get_test_property(${t} TIMEOUT timeout)
    if(timeout AND NOT CHORUS_TEST_TIMEOUT_SCALE EQUAL 1)
      math(EXPR timeout "${timeout} * ${CHORUS_TEST_TIMEOUT_SCALE}")
      set_tests_properties(${t} PROPERTIES TIMEOUT ${timeout})
    endif()
    if(NOT "gpu" IN_LIST labels)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "CUDA_VISIBLE_DEVICES=")
    endif()
    set(san_env ${CHORUS_SANITIZER_TEST_ENV})
    if("mpi" IN_LIST labels)
      list(APPEND san_env ${CHORUS_SANITIZER_MPI_TEST_ENV})  # the later setting of a variable wins
    endif()
    foreach(var IN LISTS san_env)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "${var}")
    endforeach()
  endforeach()
endfunction()
