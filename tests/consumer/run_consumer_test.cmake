# The test install_consumer (tests/CMakeLists.txt): installs the build tree into PREFIX, checks the installed
# layout, configures and builds the consumer project of this directory against it with CMAKE_PREFIX_PATH, runs it,
# and runs the installed `nystrom` (its build-time revision; with the CUDA module, that it loads the installed
# module, found relative to the program, or the one $NYSTROM_CUDA_MODULE names).
# Inputs: BUILD_DIR, PREFIX, CONSUMER_BUILD_DIR, CXX_COMPILER, CXX_LAUNCHER (may be empty), GIT_REVISION_HEADER, and
# the build's install directories BINDIR, LIBDIR, INCLUDEDIR, DOCDIR.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message("$ ${ARGN}\n${output}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})

set(expected_files ${BINDIR}/nystrom ${LIBDIR}/libnystrom.a
    ${INCLUDEDIR}/nystrom/nystrom.hpp ${INCLUDEDIR}/nystrom/detail/spectral_impl.hpp
    ${LIBDIR}/cmake/nystrom/nystromConfig.cmake
    ${LIBDIR}/cmake/nystrom/nystromConfigVersion.cmake
    ${LIBDIR}/cmake/nystrom/nystromTargets.cmake
    ${LIBDIR}/cmake/nystrom/nystromDependencies.cmake
    ${DOCDIR}/LICENSE ${DOCDIR}/README.md ${DOCDIR}/CHANGELOG.md)
# Every file of docs/, beneath DOCDIR/docs as in the source tree (cmake/nystromPackage.cmake).
get_filename_component(repository ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)
file(GLOB_RECURSE documents RELATIVE ${repository} ${repository}/docs/*)
foreach(document ${documents})
  list(APPEND expected_files ${DOCDIR}/${document})
endforeach()
foreach(file ${expected_files})
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "not installed: ${PREFIX}/${file}")
  endif()
endforeach()
# The interface an installed consumer gets must not carry the build machine's instruction set or paths into
# the source and build trees.
file(READ ${PREFIX}/${LIBDIR}/cmake/nystrom/nystromTargets.cmake targets)
foreach(forbidden "-march=native" "NYSTROM_WITH_CUDA" "${BUILD_DIR}")
  string(FIND "${targets}" "${forbidden}" position)
  if(NOT position EQUAL -1)
    message(FATAL_ERROR "nystromTargets.cmake contains '${forbidden}'")
  endif()
endforeach()

set(launcher "")
if(CXX_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER})
endif()
get_filename_component(source_dir ${CMAKE_CURRENT_LIST_FILE} DIRECTORY)
run(${CMAKE_COMMAND} -S ${source_dir} -B ${CONSUMER_BUILD_DIR} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER} ${launcher})
run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD_DIR})
run(${CONSUMER_BUILD_DIR}/consumer)

# The installed program reports the revision it was built from.
run(${PREFIX}/${BINDIR}/nystrom --version)
file(STRINGS ${GIT_REVISION_HEADER} revision_line REGEX "NYSTROM_GIT_REVISION")
string(REGEX REPLACE ".*NYSTROM_GIT_REVISION \"([^\"]*)\".*" "\\1" revision "${revision_line}")
if(NOT output MATCHES "\\(${revision}\\)")
  message(FATAL_ERROR "nystrom --version does not show the build revision ${revision}")
endif()

# With the CUDA module: `--device cuda` loads the installed module (found relative to the installed program) on
# the first request for the GPU, whether or not a GPU is present (LD_DEBUG=files lists every file loaded), and
# NYSTROM_CUDA_MODULE replaces the search.
set(module ${PREFIX}/${LIBDIR}/libnystrom_cuda.so)
if(EXISTS ${module})
  set(request ${PREFIX}/${BINDIR}/nystrom spectrum --device cuda --input ${PREFIX}/missing.h5)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_DEBUG=files ${request}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(FIND "${output}" "file=${module}" position)
  string(FIND "${output}" "cannot load" failed)
  if(NOT result EQUAL 2 OR position EQUAL -1 OR NOT failed EQUAL -1)
    message(FATAL_ERROR "the installed nystrom did not load ${module} (exit ${result}):\n${output}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env NYSTROM_CUDA_MODULE=${PREFIX}/none.so ${request}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(FIND "${output}" "cannot load the CUDA backend module: ${PREFIX}/none.so" position)
  if(NOT result EQUAL 2 OR position EQUAL -1)
    message(FATAL_ERROR "NYSTROM_CUDA_MODULE was not obeyed (exit ${result}):\n${output}")
  endif()
  message("the installed program loads ${module}; NYSTROM_CUDA_MODULE overrides it")
endif()
