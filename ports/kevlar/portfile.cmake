# Overlay port for kevlar.
#
# Where the sources come from, in this order:
#   1. the environment variable KEVLAR_SOURCE_PATH (a kevlar checkout; CI and local iteration);
#   2. the checkout this port lives in (ports/kevlar/../..), when it is one — the usual case for
#      `--overlay-ports=<checkout>/ports` and the vcpkg presets in CMakePresets.json;
#   3. the release archive of tag v${VERSION}, downloaded with vcpkg_from_github and checked
#      against KEVLAR_RELEASE_SHA512 below. A release records the archive's hash there (see
#      ports/README.md); until then this branch refuses to run rather than trust an unchecked
#      download.
# vcpkg does not hash a local source tree into the package ABI, so when building from a path
# use `vcpkg install --editable` or `--no-binarycaching` to avoid reusing a stale binary.

set(KEVLAR_RELEASE_REPO "kevlar-cpp/kevlar")
set(KEVLAR_RELEASE_SHA512 "")

get_filename_component(kevlar_checkout "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(DEFINED ENV{KEVLAR_SOURCE_PATH} AND NOT "$ENV{KEVLAR_SOURCE_PATH}" STREQUAL "")
  file(TO_CMAKE_PATH "$ENV{KEVLAR_SOURCE_PATH}" SOURCE_PATH)
  message(STATUS "kevlar: building from KEVLAR_SOURCE_PATH=${SOURCE_PATH}")
elseif(EXISTS "${kevlar_checkout}/Directory.cmake" AND EXISTS "${kevlar_checkout}/include/kevlar/basic_shield.hpp")
  set(SOURCE_PATH "${kevlar_checkout}")
  message(STATUS "kevlar: building from the checkout holding this port: ${SOURCE_PATH}")
elseif(NOT KEVLAR_RELEASE_SHA512 STREQUAL "")
  vcpkg_from_github(
    OUT_SOURCE_PATH SOURCE_PATH
    REPO "${KEVLAR_RELEASE_REPO}"
    REF "v${VERSION}"
    SHA512 "${KEVLAR_RELEASE_SHA512}"
    HEAD_REF main
  )
else()
  message(FATAL_ERROR
    "kevlar ${VERSION}: no release archive hash is recorded in this port yet. "
    "Set the environment variable KEVLAR_SOURCE_PATH to a kevlar checkout "
    "(on Windows also list it in VCPKG_KEEP_ENV_VARS), or use the port from inside a checkout.")
endif()

if(NOT EXISTS "${SOURCE_PATH}/CMakeLists.txt")
  message(FATAL_ERROR "kevlar: ${SOURCE_PATH} holds no CMakeLists.txt")
endif()

vcpkg_check_features(OUT_FEATURE_OPTIONS feature_options FEATURES spdlog KEVLAR_WITH_SPDLOG)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${feature_options}
    -DKEVLAR_BUILD_TESTS=OFF
    -DKEVLAR_BUILD_BENCHMARKS=OFF
    -DKEVLAR_BUILD_SAMPLES=OFF
    -DKEVLAR_PACKAGE_TESTS=OFF
    -DKEVLAR_INSTALL=ON
    -DKEVLAR_WARNINGS_AS_ERRORS=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/kevlar PACKAGE_NAME kevlar)

file(REMOVE_RECURSE
  "${CURRENT_PACKAGES_DIR}/debug/include"
  "${CURRENT_PACKAGES_DIR}/debug/share"
)

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
