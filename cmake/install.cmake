# What `cmake --install` puts in the prefix, laid out as NCCL, UCX and UCC are
# (GNUInstallDirs: lib/ under any prefix but /usr, where Debian's multiarch
# lib/x86_64-linux-gnu/ is the rule):
#
#   lib/libzpp.so -> libzpp.so.0 -> libzpp.so.0.x.y
#   include/zpp.h, include/zpp_version.h
#   bin/zpp-perf, zpp-health, zpp-info, zpp-train, zpp-perf-compare,
#       zpp-emucluster (a link to libexec/zpp/emucluster/emucluster.sh)
#   libexec/zpp/emucluster/   the emulated cluster's scripts, side by side
#   lib/pkgconfig/zpp.pc, lib/cmake/zpp/ (find_package(zpp) -> zpp::zpp)
#   share/zpp/corpus.txt      zpp-train's default text
#   share/doc/zpp/            README.md, docs/*.md, zpp-perf.schema.json
#
# tests/install checks every item and builds a program against the result.
include(CMakePackageConfigHelpers)

set(_zpp_tools zpp-perf zpp-health zpp-info zpp-train)

# The installed files must not lean on the build tree: CMake drops the build
# RPATH on install, and USE_LINK_PATH keeps the directories of libraries
# linked from outside the system's (an MPI under /opt), which the loader would
# not search. CUDA's and NCCL's are found as in the build tree, through
# ld.so.conf (CMake counts the toolkit's directory as implicit: no RPATH).
# The tools link the static archive, so they need no path to libzpp.so.
set_target_properties(zpp ${_zpp_tools} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS zpp EXPORT zppTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${ZPP_BUILD_INCLUDE_DIR}/zpp.h ${ZPP_BUILD_INCLUDE_DIR}/zpp_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${_zpp_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS perf/zpp-perf/zpp-perf-compare.py DESTINATION ${CMAKE_INSTALL_BINDIR}
        RENAME zpp-perf-compare)

# The emulated cluster finds its parts beside itself (emucluster.sh resolves
# its own path with readlink -f, sources its emucluster-*.sh parts and hands
# netns-rsh to mpirun), so they go into one folder, and bin/ gets a link.
# A directory rule, not a list: a part added later comes along.
set(_zpp_emu_dir ${CMAKE_INSTALL_LIBEXECDIR}/zpp/emucluster)
install(DIRECTORY perf/emucluster/ DESTINATION ${_zpp_emu_dir} USE_SOURCE_PERMISSIONS
        FILES_MATCHING PATTERN "*.sh" PATTERN "netns-rsh")
# Relative, so that the prefix can move (a DESTDIR, a package); made in the
# build tree and installed as the link it is.
file(RELATIVE_PATH _zpp_emu_link ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}
     ${CMAKE_INSTALL_PREFIX}/${_zpp_emu_dir}/emucluster.sh)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/install-links)
file(CREATE_LINK ${_zpp_emu_link} ${CMAKE_BINARY_DIR}/install-links/zpp-emucluster SYMBOLIC)
install(FILES ${CMAKE_BINARY_DIR}/install-links/zpp-emucluster DESTINATION ${CMAKE_INSTALL_BINDIR})

# zpp-train looks for its text at this path relative to its own directory
# before the source tree's (examples/CMakeLists.txt).
install(FILES examples/data/corpus.txt DESTINATION ${CMAKE_INSTALL_DATADIR}/zpp)

install(FILES README.md perf/zpp-perf/zpp-perf.schema.json DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

# pkg-config: the prefix is found from the .pc file's own place (pcfiledir),
# so the files stay right under `cmake --install --prefix P`, a DESTDIR or a
# package, whatever prefix was configured. The library's own dependencies
# (UCX, CUDA, NCCL, pthread) are linked into libzpp.so: a user of the shared
# library names none of them.
file(RELATIVE_PATH ZPP_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" ZPP_PC_TO_PREFIX "${ZPP_PC_TO_PREFIX}")
configure_file(cmake/zpp.pc.in ${CMAKE_BINARY_DIR}/install-files/zpp.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install-files/zpp.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake: find_package(zpp) -> zpp::zpp, relocatable the same way.
set(_zpp_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/zpp)
install(EXPORT zppTargets NAMESPACE zpp:: DESTINATION ${_zpp_cmake_dir})
configure_package_config_file(cmake/zppConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install-files/zppConfig.cmake INSTALL_DESTINATION ${_zpp_cmake_dir})
# The soname changes with the major version, and so does compatibility.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install-files/zppConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install-files/zppConfig.cmake
              ${CMAKE_BINARY_DIR}/install-files/zppConfigVersion.cmake
        DESTINATION ${_zpp_cmake_dir})

# --- Debian package: cpack -G DEB in the build directory -------------------------
# One package with everything above, installed under /usr. Its dependencies
# come from dpkg-shlibdeps (libucx0, libopenmpi3, libc6, ... as linked here);
# CUDA and NCCL from /usr/local/cuda are no Debian packages, so a CUDA build's
# package names them in no Depends and expects them where they were (and
# found by the loader, as they are here).
set(CPACK_PACKAGE_NAME zpp)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "communication-compressing collectives (ZeRO++) on NCCL and UCX, with their tools")
set(CPACK_PACKAGE_CONTACT "zpp maintainers <zpp@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The tools' scripts: bash (emulated cluster), iproute2 (its namespaces and tc),
# python3 (zpp-perf-compare).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "bash, iproute2, python3")
include(CPack)
