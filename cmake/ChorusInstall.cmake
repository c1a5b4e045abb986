# cmake --install + find_package(chorus) for outside projects.
include(CMakePackageConfigHelpers)
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in
  ${PROJECT_BINARY_DIR}/chorusConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chorusConfig.cmake ${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
if(NOT BUILD_SHARED_LIBS)  # what chorusConfig.cmake needs to find a static build's private dependencies
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindCUDAToolkit.cmake ${PROJECT_SOURCE_DIR}/cmake/ChorusGpuLibraries.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
endif()
