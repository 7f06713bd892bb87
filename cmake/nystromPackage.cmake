# Installation of the package configuration: `cmake --install build --prefix P` writes
# P/<libdir>/cmake/nystrom/{nystromConfig,nystromConfigVersion,nystromTargets,nystromDependencies}.cmake beside the
# library, the headers, the program and the CUDA module (installed by lib/, lib/cuda/ and experiments/), and the
# licence and the documents to P/share/doc/nystrom (CMAKE_INSTALL_DOCDIR).
include(CMakePackageConfigHelpers)
set(NYSTROM_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/nystrom)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nystromConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/nystromConfig.cmake INSTALL_DESTINATION ${NYSTROM_CONFIG_DIR})
# Before 1.0, minor versions may change the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nystromConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(EXPORT nystromTargets NAMESPACE nystrom:: DESTINATION ${NYSTROM_CONFIG_DIR})
install(FILES ${PROJECT_BINARY_DIR}/nystromConfig.cmake ${PROJECT_BINARY_DIR}/nystromConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/nystromDependencies.cmake DESTINATION ${NYSTROM_CONFIG_DIR})
# The documents in the source tree's layout, so that their links to one another resolve where they are installed: the
# licence, the README and the CHANGELOG at the top, and docs/ as a whole beneath (every document and figure it holds
# when installing, so a new document needs no entry here; docs/README.md is its index).
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
