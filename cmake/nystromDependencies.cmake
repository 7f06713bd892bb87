# The dependencies that nystrom::nystrom's interface names besides Eigen3, OpenMP and Threads (which have CMake
# packages of their own), found the same way by the build (CMakeLists.txt) and by projects that use an installed
# nystrom (nystromConfig.cmake includes this file). They become imported targets, so that the exported interface
# names targets rather than paths on the machine that built it:
#   Spectra::Spectra   header-only Spectra 1.0: its own package configuration where installed (spectra-config.cmake,
#                      e.g. Debian's libspectra-dev), else an interface target on the directory holding
#                      Spectra/SymEigsSolver.h (SPECTRA_INCLUDE_DIR)
#   nystrom::openblas  LAPACKE and OpenBLAS (LAPACKE_LIBRARY, OPENBLAS_LIBRARY), when NYSTROM_WITH_OPENBLAS is ON
# Needs Eigen3 found first. Sets NYSTROM_MISSING_DEPENDENCIES to what was not found (empty when everything was).
set(NYSTROM_MISSING_DEPENDENCIES "")

if(NOT TARGET Spectra::Spectra)
  find_package(spectra 1.0 CONFIG QUIET)
endif()
if(NOT TARGET Spectra::Spectra)
  find_path(SPECTRA_INCLUDE_DIR Spectra/SymEigsSolver.h)
  if(SPECTRA_INCLUDE_DIR)
    add_library(Spectra::Spectra INTERFACE IMPORTED)
    set_target_properties(Spectra::Spectra PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SPECTRA_INCLUDE_DIR}"
                                                      INTERFACE_LINK_LIBRARIES Eigen3::Eigen)
  else()
    list(APPEND NYSTROM_MISSING_DEPENDENCIES "Spectra 1.0 (Spectra/SymEigsSolver.h)")
  endif()
endif()

if(NYSTROM_WITH_OPENBLAS AND NOT TARGET nystrom::openblas)
  find_library(OPENBLAS_LIBRARY NAMES openblas)
  find_library(LAPACKE_LIBRARY NAMES lapacke)
  if(OPENBLAS_LIBRARY AND LAPACKE_LIBRARY)
    add_library(nystrom::openblas INTERFACE IMPORTED)
    set_target_properties(nystrom::openblas PROPERTIES
                          INTERFACE_LINK_LIBRARIES "${LAPACKE_LIBRARY};${OPENBLAS_LIBRARY}")
  else()
    list(APPEND NYSTROM_MISSING_DEPENDENCIES "OpenBLAS and LAPACKE (libopenblas, liblapacke)")
  endif()
endif()
