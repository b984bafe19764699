# The Debian package (issue 14 item 2): `cpack -G DEB` in a build tree (or `cpack --config
# <build>/CPackConfig.cmake`) packs what `cmake --install` installs (cmake/DfiPackage.cmake) under
# /usr into dfi_<version>_<arch>.deb, installable with `apt-get install ./dfi_*.deb`.
#
# Nothing is vendored: the shared libraries libdfi and dfi link (libucx0, libc6, libstdc++6, ...)
# become Depends through dpkg-shlibdeps; what the development files need is declared explicitly:
# dfi.pc has `Requires.private: ucx` and the CMake package finds UCX through pkg-config, so
# libucx-dev and pkg-config. One package holds the library, its headers and the CLI: a user of
# DFI builds against it, and splitting runtime and -dev packages can come when someone ships a
# program linked to libdfi without building it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dfi)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "DFI")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Data Flow Interface: flows of tuples between threads of many machines, over UCX")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "DFI maintainers <maintainers@users.noreply.invalid>")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # dfi_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)   # needs dpkg-dev and file (scripts/dev installs both)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libucx-dev, libcurl4-openssl-dev, pkg-config")
# The control file's Description: the summary, then this (CPackDeb indents it).
set(CPACK_PACKAGE_DESCRIPTION "Shuffle, replicate and combiner flows between threads of many \
processes, over shared memory, TCP, InfiniBand or RoCE through UCX. Contains libdfi (shared and \
static), its C++20 headers, the CMake package (find_package(dfi)), dfi.pc and the dfi command.")
# A sanitizer build's library needs the sanitizer runtimes of its users; packages come from
# release builds.
if(NOT DFI_SANITIZE STREQUAL "")
  string(APPEND CPACK_PACKAGE_DESCRIPTION " Built with -fsanitize=${DFI_SANITIZE}: for testing only.")
endif()
include(CPack)
