# Script (cmake -P) run at every build by the target nystrom_git_revision (experiments/CMakeLists.txt): writes
# OUTPUT, a header defining NYSTROM_GIT_REVISION as `git describe --always --dirty --abbrev=12` of SOURCE_DIR
# ("unknown" without git or outside a git checkout), and rewrites it only when the revision changed, so that the
# one file including it recompiles only then. The program reports this build-time revision (`nystrom --version`,
# the results attribute git_revision).
set(revision "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=12 WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE result)
  if(result EQUAL 0 AND NOT described STREQUAL "")
    set(revision "${described}")
  endif()
endif()
set(content "// Generated at build time by cmake/GitRevision.cmake: the source tree's git revision.\n#pragma once\n#define NYSTROM_GIT_REVISION \"${revision}\"\n")
set(previous "")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} previous)
endif()
if(NOT previous STREQUAL content)
  file(WRITE ${OUTPUT} "${content}")
endif()
