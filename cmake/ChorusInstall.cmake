# cmake --install + find_package(chorus) for outside projects.
include(CMakePackageConfigHelpers)
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in
  ${PROJECT_BINARY_DIR}/chorusConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/chorusConfig.cmake ${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCUDAToolkit.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
