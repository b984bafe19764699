# The installed DFI (`cmake --install <build> --prefix P`), for projects outside this tree:
#
#   P/include/dfi/**                    the public headers, and the generated dfi/version.hpp
#   P/lib/libdfi.so.<soversion>...      one shared library with a SONAME  (CMake: dfi::dfi)
#   P/lib/libdfi.a                      the same as a static archive      (CMake: dfi::dfi_static)
#   P/lib/cmake/dfi/                    find_package(dfi CONFIG): dfi::dfi, dfi::dfi_static
#   P/lib/pkgconfig/dfi.pc              pkg-config --cflags --libs dfi
#   P/bin/dfi                           the CLI (dfi cluster run, fabric check, info, bench)
#
# One libdfi instead of a library per layer: users link one thing, and the layering stays a
# property of the tree (scripts/check-layers). The tree keeps linking the per-layer libraries;
# libdfi is made of their object files ($<TARGET_OBJECTS:...> of every layer registered by
# dfi_layer), so nothing is compiled twice. That needs the layers compiled position-independent
# (dfi_layer sets it), which the shared library requires and the archive does not mind. The tools
# (dfi_tools, dfi_bench) are not part of the library: the CLI links them itself.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# dfi/version.hpp: DFI_VERSION_MAJOR/MINOR/PATCH, DFI_VERSION (comparable number) and
# DFI_VERSION_STRING, from project(). In the build tree's include/, seen by every layer.
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.hpp.in
               ${PROJECT_BINARY_DIR}/include/dfi/version.hpp @ONLY)

# Before 1.0 a minor release may change the ABI, so the SONAME carries major.minor
# (libdfi.so.0.1 -> libdfi.so.0.1.0); from 1.0 on, the major alone. The CMake package's version
# check follows the same rule (SameMinorVersion before 1.0, SameMajorVersion after).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(DFI_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(DFI_VERSION_COMPATIBILITY SameMinorVersion)
else()
  set(DFI_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(DFI_VERSION_COMPATIBILITY SameMajorVersion)
endif()

# A sanitizer build's library needs its users to link the same runtime (ASan must come first).
set(DFI_SANITIZE_LINK "")
if(DFI_SANITIZE STREQUAL "address")
  set(DFI_SANITIZE_LINK -fsanitize=address,undefined)
elseif(DFI_SANITIZE STREQUAL "thread")
  set(DFI_SANITIZE_LINK -fsanitize=thread)
endif()

get_property(dfi_layers GLOBAL PROPERTY DFI_LAYERS)
set(dfi_objects "")
foreach(layer ${dfi_layers})
  list(APPEND dfi_objects $<TARGET_OBJECTS:${layer}>)
endforeach()

# dfi_shared (installed as dfi::dfi) and dfi_static (dfi::dfi_static), both named libdfi.
# No public header includes UCX, nlohmann_json or CLI11: UCX is a link dependency only (private
# to the shared library, link-only for the archive, found again by dfiConfig.cmake), the JSON
# library is header-only and private, CLI11 belongs to the tools. Threads is public: the headers
# use std::thread and std::atomic.
add_library(dfi_shared SHARED ${dfi_objects})
add_library(dfi_static STATIC ${dfi_objects})
add_library(dfi::dfi ALIAS dfi_shared)
add_library(dfi::dfi_static ALIAS dfi_static)
set_target_properties(dfi_shared PROPERTIES OUTPUT_NAME dfi EXPORT_NAME dfi
                      VERSION ${PROJECT_VERSION} SOVERSION ${DFI_SOVERSION})
set_target_properties(dfi_static PROPERTIES OUTPUT_NAME dfi EXPORT_NAME dfi_static)
foreach(target dfi_shared dfi_static)
  target_include_directories(${target} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC Threads::Threads PRIVATE PkgConfig::UCX PkgConfig::CURL)
  target_compile_features(${target} INTERFACE cxx_std_20)
  target_link_options(${target} INTERFACE ${DFI_SANITIZE_LINK})
  dfi_target_options(${target})
endforeach()
# Every symbol the layers use must resolve in libdfi or its dependencies: a layer dependency
# missing here is a link error now, not an undefined symbol in a user's program later.
target_link_options(dfi_shared PRIVATE -Wl,--no-undefined)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dfi ${PROJECT_BINARY_DIR}/include/dfi
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(TARGETS dfi_shared dfi_static EXPORT dfiTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS dfi RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(DFI_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dfi)
install(EXPORT dfiTargets NAMESPACE dfi:: DESTINATION ${DFI_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dfiConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/dfiConfig.cmake
                              INSTALL_DESTINATION ${DFI_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/dfiConfigVersion.cmake
                                 COMPATIBILITY ${DFI_VERSION_COMPATIBILITY})
install(FILES ${PROJECT_BINARY_DIR}/package/dfiConfig.cmake
              ${PROJECT_BINARY_DIR}/package/dfiConfigVersion.cmake
        DESTINATION ${DFI_CMAKE_DIR})

# dfi.pc finds its prefix from where it lies (${pcfiledir}), so the prefix given to
# `cmake --install --prefix` need not be the one configured.
file(RELATIVE_PATH DFI_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" DFI_PC_TO_PREFIX "${DFI_PC_TO_PREFIX}")
list(JOIN DFI_SANITIZE_LINK " " DFI_PC_SANITIZE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/dfi.pc.in ${PROJECT_BINARY_DIR}/package/dfi.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/dfi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The same files as a Debian package: cpack -G DEB (cmake/DfiDeb.cmake).
include(${PROJECT_SOURCE_DIR}/cmake/DfiDeb.cmake)
