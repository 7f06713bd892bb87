# The dependencies that nystrom::nystrom's interface names besides Eigen3, OpenMP and Threads (which have CMake
# packages of their own), found the same way by the build (CMakeLists.txt) and by projects that use an installed
# nystrom (nystromConfig.cmake includes this file). They become imported targets, so that the exported interface
# names targets rather than paths on the machine that built it:
#   Spectra::Spectra   header-only Spectra 1.0: its own package configuration where installed (spectra-config.cmake,
#                      e.g. Debian's libspectra-dev), else an interface target on the directory holding
#                      Spectra/SymEigsSolver.h (SPECTRA_INCLUDE_DIR)
#   nystrom::lapacke   LAPACK through LAPACKE (LAPACKE_LIBRARY, LAPACKE_INCLUDE_DIR): every dense SVD, always
#   nystrom::openblas  OpenBLAS (OPENBLAS_LIBRARY) as Eigen's BLAS and LAPACK's, when NYSTROM_WITH_OPENBLAS is ON
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

if(NOT TARGET nystrom::lapacke)
  find_library(LAPACKE_LIBRARY NAMES lapacke)
  find_path(LAPACKE_INCLUDE_DIR lapacke.h)
  if(LAPACKE_LIBRARY AND LAPACKE_INCLUDE_DIR)
    add_library(nystrom::lapacke INTERFACE IMPORTED)
    set_target_properties(nystrom::lapacke PROPERTIES INTERFACE_LINK_LIBRARIES "${LAPACKE_LIBRARY}"
                                                      INTERFACE_INCLUDE_DIRECTORIES "${LAPACKE_INCLUDE_DIR}")
  else()
    list(APPEND NYSTROM_MISSING_DEPENDENCIES "LAPACKE (liblapacke, lapacke.h)")
  endif()
endif()

if(NYSTROM_WITH_OPENBLAS AND NOT TARGET nystrom::openblas)
  find_library(OPENBLAS_LIBRARY NAMES openblas)
  if(OPENBLAS_LIBRARY)
    add_library(nystrom::openblas INTERFACE IMPORTED)
    set_target_properties(nystrom::openblas PROPERTIES INTERFACE_LINK_LIBRARIES "${OPENBLAS_LIBRARY}")
  else()
    list(APPEND NYSTROM_MISSING_DEPENDENCIES "OpenBLAS (libopenblas)")
  endif()
endif()
