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
