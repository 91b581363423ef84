# switchml_unit_test(NAME SOURCES... LIBS ...): a GoogleTest binary registered with CTest,
# labelled `unit`. Unit tests live beside the code they test (foo.cc + foo_test.cc).
function(switchml_unit_test name)
  if(NOT SWITCHML_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  gtest_discover_tests(${name} PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endfunction()

# Include paths (README "Layout"). include/ is the public API ("switchml/*.h"); no target gets
# src/ or the repository root as an include directory. A module src/<m>/ is included as
# "<m>/x.h" through the INTERFACE target switchml_<m>_headers, whose include directory is
# <build>/include_roots/<m>/ holding one symbolic link, <m> -> src/<m>; the module's library
# links it PUBLIC. So a target may include a module's headers only if it links that module's
# library (or, for header-only use, switchml_<m>_headers) by name or through a library that
# depends on it PUBLIC; otherwise "<m>/x.h" is not found and the compile fails.

# Makes `link` a symbolic link to `original` (replacing a stale link, refusing anything else).
function(_switchml_include_link original link)
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} current)
    if(current STREQUAL original)
      return()
    endif()
    file(REMOVE ${link})
  elseif(EXISTS ${link})
    message(FATAL_ERROR "${link} exists and is not a symbolic link; remove it and re-run CMake")
  endif()
  get_filename_component(dir ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  file(CREATE_LINK ${original} ${link} RESULT rc SYMBOLIC)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cannot create the symbolic link ${link} -> ${original}: ${rc}")
  endif()
endfunction()

# switchml_module(TARGET MODULE): TARGET is (one of) the library of src/MODULE/; it and whatever
# links it may include "MODULE/x.h". Creates switchml_MODULE_headers on first use.
function(switchml_module target module)
  set(headers switchml_${module}_headers)
  if(NOT TARGET ${headers})
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${module})
      message(FATAL_ERROR "switchml_module: no folder src/${module}")
    endif()
    set(root ${PROJECT_BINARY_DIR}/include_roots/${module})
    _switchml_include_link(${PROJECT_SOURCE_DIR}/src/${module} ${root}/${module})
    add_library(${headers} INTERFACE)
    target_include_directories(${headers} INTERFACE ${root})
  endif()
  target_link_libraries(${target} PUBLIC ${headers})
endfunction()

# switchml_export_headers(TARGET PREFIX HEADER...): the listed headers of the current folder,
# and no other file, become includable as "PREFIX/HEADER" by TARGET and whatever links it
# (e.g. tools/cli_util.h, shared with bench/ through switchml_cli_util).
function(switchml_export_headers target prefix)
  set(root ${PROJECT_BINARY_DIR}/include_roots/${target})
  foreach(header IN LISTS ARGN)
    _switchml_include_link(${CMAKE_CURRENT_SOURCE_DIR}/${header} ${root}/${prefix}/${header})
  endforeach()
  target_include_directories(${target} PUBLIC ${root})
endfunction()

# switchml_test_deadlines(): gives every test of the calling directory that has a TIMEOUT the
# environment variable SML_DEADLINE_S = TIMEOUT less a tenth (at least 10 s). The shell tests
# (scripts/lib.sh sml_deadline, through tests/e2e/lib.sh and tests/netns/lib.sh) fail on that
# deadline and clean up what they made; CTest, killing a test at its TIMEOUT, skips a test's
# cleanup. Call it after the directory's last add_test.
function(switchml_test_deadlines)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} TIMEOUT timeout)
    if(timeout)
      math(EXPR margin "${timeout} / 10")
      if(margin LESS 10)
        set(margin 10)
      endif()
      math(EXPR deadline "${timeout} - ${margin}")
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "SML_DEADLINE_S=${deadline}")
    endif()
  endforeach()
endfunction()
