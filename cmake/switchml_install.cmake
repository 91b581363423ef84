# Installation and packages (docs/operations.md "Installing"): `cmake --install` and CPack.
#
#   bin/switchml                          the CLI (every subcommand)
#   lib/libswitchml.a                     the client library, its internal modules in one archive
#   lib/libswitchml_mpi{,_mpich}.so       the MPI interposers (when built)
#   include/switchml/*.h                  the public API
#   lib/cmake/SwitchML/                   find_package(SwitchML CONFIG) -> SwitchML::switchml
#   share/doc/switchml/                   `switchml <cmd> --help` texts, sample configs
#   share/man/man1/switchml.1             a man page made of the same texts
#   lib/systemd/system/*.service          units for the switch and the controller (naming these paths)
#   etc/switchml/*.conf                   sample configuration (/etc/switchml when the prefix is /usr)
#
# The in-tree `switchml` library links its modules (switchml_client_core, switchml_proto, ...)
# as separate static libraries; a downstream project gets one archive instead, made of the
# objects of every internal static library `switchml` needs, and links only the external
# packages those modules use (found again by SwitchMLConfig.cmake through find_dependency).

# The Python wheel (pyproject.toml, scikit-build-core) installs only its own rules
# (integrations/pytorch/CMakeLists.txt) and builds only their targets.
if(SKBUILD)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(_switchml_docdir ${CMAKE_INSTALL_DATAROOTDIR}/doc/switchml)

# External package of each imported-target namespace a module of libswitchml may link:
# NAMESPACE|find_dependency arguments|Debian packages (gRPC's CMake config checks that grpc_cpp_plugin exists).
set(_switchml_known_packages
    "gRPC|gRPC CONFIG|libgrpc++-dev, protobuf-compiler-grpc"
    "protobuf|Protobuf|libprotobuf-dev"
    "hwy|hwy CONFIG|libhwy-dev"
    "Threads|Threads|"
    "nlohmann_json|nlohmann_json CONFIG|nlohmann-json3-dev"
    "CLI11|CLI11 CONFIG|libcli11-dev"
    "prometheus-cpp|prometheus-cpp CONFIG|libprometheus-cpp-dev"
    "OpenSSL|OpenSSL|libssl-dev"
    "absl|absl CONFIG|libabsl-dev")

# Walks the link dependencies of `switchml`: the internal static libraries (whose objects go into
# the installed archive) and the external link items (imported targets, plain library names).
set(_switchml_internal "")
set(_switchml_external "")
set(_switchml_todo switchml)
set(_switchml_seen "")
while(_switchml_todo)
  list(POP_FRONT _switchml_todo t)
  if(t IN_LIST _switchml_seen)
    continue()
  endif()
  list(APPEND _switchml_seen ${t})
  get_target_property(type ${t} TYPE)
  set(items "")
  if(type STREQUAL "STATIC_LIBRARY")
    list(APPEND _switchml_internal ${t})
    get_target_property(items ${t} LINK_LIBRARIES)
  endif()
  get_target_property(iface ${t} INTERFACE_LINK_LIBRARIES)
  foreach(item IN LISTS items iface)
    if(NOT item OR item MATCHES "-NOTFOUND$")
      continue()
    endif()
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(item MATCHES "^\\$<")
      message(FATAL_ERROR "switchml_install.cmake: cannot follow the link item '${item}' of ${t}")
    endif()
    if(TARGET ${item})
      get_target_property(imported ${item} IMPORTED)
      if(imported)
        list(APPEND _switchml_external ${item})
      else()
        list(APPEND _switchml_todo ${item})
      endif()
    else()
      list(APPEND _switchml_external ${item})  # a plain library name (m, dl, ...)
    endif()
  endforeach()
endwhile()
list(REMOVE_DUPLICATES _switchml_external)

set(SWITCHML_FIND_DEPENDENCIES "")
set(_switchml_dev_depends "")
foreach(item IN LISTS _switchml_external)
  if(NOT item MATCHES "::")
    continue()
  endif()
  string(REGEX REPLACE "::.*" "" ns "${item}")
  set(found "")
  foreach(entry IN LISTS _switchml_known_packages)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 known_ns)
    if(known_ns STREQUAL ns)
      list(GET fields 1 found)
      list(GET fields 2 deb)
    endif()
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "switchml_install.cmake: libswitchml links ${item}, whose package is unknown; "
                        "add its namespace to _switchml_known_packages")
  endif()
  string(FIND "${SWITCHML_FIND_DEPENDENCIES}" "find_dependency(${found})" at)
  if(at EQUAL -1)
    string(APPEND SWITCHML_FIND_DEPENDENCIES "find_dependency(${found})\n")
    if(deb)
      list(APPEND _switchml_dev_depends ${deb})
    endif()
  endif()
endforeach()

# The installed library: one archive of every internal module's objects (not linked in-tree).
set(_switchml_objects "")
foreach(t IN LISTS _switchml_internal)
  list(APPEND _switchml_objects $<TARGET_OBJECTS:${t}>)
endforeach()
add_library(switchml_installed STATIC ${_switchml_objects})
set_target_properties(switchml_installed PROPERTIES OUTPUT_NAME switchml EXPORT_NAME switchml
                      ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib LINKER_LANGUAGE CXX)
target_include_directories(switchml_installed INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(switchml_installed INTERFACE cxx_std_20)
target_link_libraries(switchml_installed INTERFACE ${_switchml_external})

install(TARGETS switchml_installed EXPORT SwitchMLTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/switchml DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
set(_switchml_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/SwitchML)
install(EXPORT SwitchMLTargets NAMESPACE SwitchML:: DESTINATION ${_switchml_cmake_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/packaging/SwitchMLConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/packaging/SwitchMLConfig.cmake
                              INSTALL_DESTINATION ${_switchml_cmake_dir})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/packaging/SwitchMLConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/packaging/SwitchMLConfig.cmake
              ${PROJECT_BINARY_DIR}/packaging/SwitchMLConfigVersion.cmake
        DESTINATION ${_switchml_cmake_dir} COMPONENT dev)

# The CLI and the MPI interposers.
install(TARGETS switchml_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT switch)
foreach(t switchml_mpi switchml_mpi_mpich)
  if(TARGET ${t})
    install(TARGETS ${t} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT mpi)
  endif()
endforeach()

# `switchml <cmd> --help` as text files and a man page, made from the built binary.
set(_switchml_help_dir ${PROJECT_BINARY_DIR}/doc)
add_custom_command(OUTPUT ${_switchml_help_dir}/switchml.1 ${_switchml_help_dir}/switchml.txt
                   COMMAND ${CMAKE_COMMAND} -DSWITCHML=$<TARGET_FILE:switchml_cli> -DOUT=${_switchml_help_dir}
                           -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/packaging/help_docs.cmake
                   DEPENDS switchml_cli ${PROJECT_SOURCE_DIR}/packaging/help_docs.cmake
                   COMMENT "switchml --help -> doc/*.txt, doc/switchml.1" VERBATIM)
add_custom_target(switchml_help_docs ALL DEPENDS ${_switchml_help_dir}/switchml.1)
install(DIRECTORY ${_switchml_help_dir}/ DESTINATION ${_switchml_docdir} COMPONENT switch
        FILES_MATCHING PATTERN "*.txt")
install(FILES ${_switchml_help_dir}/switchml.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT switch)
install(FILES ${PROJECT_SOURCE_DIR}/docs/operations.md DESTINATION ${_switchml_docdir} COMPONENT switch)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/etc/switch.conf ${PROJECT_SOURCE_DIR}/packaging/etc/controller.conf
        DESTINATION ${_switchml_docdir}/examples COMPONENT switch)

# systemd units, and the sample configuration files they read. The configuration goes to
# PREFIX/etc/switchml, except for the prefixes / and /usr (the Debian package's), where it goes
# to /etc/switchml, as GNUInstallDirs' CMAKE_INSTALL_FULL_SYSCONFDIR does. Decided at install
# time, so that `cmake --install build --prefix DIR` and CPack use one build tree; the units
# (packaging/systemd/*.service.in) get the install-time binary and configuration directories.
install(CODE "
  if(CMAKE_INSTALL_PREFIX MATCHES \"^/(usr/?)?$\")
    set(SWITCHML_CONFDIR /etc/switchml)
  else()
    set(SWITCHML_CONFDIR \"\${CMAKE_INSTALL_PREFIX}/etc/switchml\")
  endif()
  set(SWITCHML_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  string(REGEX REPLACE \"//+\" \"/\" SWITCHML_BINDIR \"\${SWITCHML_BINDIR}\")
  file(INSTALL \"${PROJECT_SOURCE_DIR}/packaging/etc/switch.conf\"
               \"${PROJECT_SOURCE_DIR}/packaging/etc/controller.conf\"
       DESTINATION \"\${SWITCHML_CONFDIR}\" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  string(MD5 _switchml_units \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  set(_switchml_units \"${PROJECT_BINARY_DIR}/packaging/units/\${_switchml_units}\")
  foreach(unit switchml-switch.service switchml-controller.service)
    configure_file(\"${PROJECT_SOURCE_DIR}/packaging/systemd/\${unit}.in\" \"\${_switchml_units}/\${unit}\" @ONLY)
    file(INSTALL \"\${_switchml_units}/\${unit}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\"
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endforeach()
" COMPONENT switch)

# The Debian packages (cpack -G DEB in the build directory): switchml (CLI, units, configs,
# docs), libswitchml-dev (library, headers, CMake package), switchml-mpi (the interposers).
set(CPACK_PACKAGE_NAME switchml)
set(CPACK_PACKAGE_VENDOR "SwitchML-C++")
set(CPACK_PACKAGE_CONTACT "SwitchML-C++ maintainers <switchml@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Software switch and client library for in-network aggregation (SwitchML)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# DESTDIR installation, so that /etc/switchml (an absolute path) lands in the package root.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL switch dev)
if(TARGET switchml_mpi OR TARGET switchml_mpi_mpich)
  list(APPEND CPACK_COMPONENTS_ALL mpi)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_SWITCH_PACKAGE_NAME switchml)
set(CPACK_DEBIAN_SWITCH_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
    ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_SWITCH_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libswitchml-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
list(JOIN _switchml_dev_depends ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_MPI_PACKAGE_NAME switchml-mpi)
set(CPACK_COMPONENT_SWITCH_DESCRIPTION "switchml: the software switch, controller and CLI, with systemd units")
set(CPACK_COMPONENT_DEV_DESCRIPTION "libswitchml: static client library, headers, CMake package SwitchML")
set(CPACK_COMPONENT_MPI_DESCRIPTION "MPI interposers (LD_PRELOAD) routing MPI_Allreduce through a switch")
include(CPack)

if(SWITCHML_BUILD_TESTS)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/packaging ${PROJECT_BINARY_DIR}/tests/packaging)
endif()
