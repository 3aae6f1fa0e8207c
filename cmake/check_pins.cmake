# check_pins.cmake — run as `cmake -DKEVLAR_SOURCE_DIR=<repo> -P cmake/check_pins.cmake`.
#
# Directory.cmake is the single source of the dependency floors (KEVLAR_DEP_<pkg>_VERSION).
# vcpkg.json repeats them as `version>=` constraints; this script fails, naming every
# disagreement, when
#   * a `version>=` floor in the root manifest (top-level or inside a feature) differs from the
#     Directory.cmake pin of the package it maps to (compared at the pin's precision: the pin
#     1.12 agrees with the floor 1.12.1 but not with 1.13.0; the pin 1.7.1 needs exactly 1.7.1),
#   * a pinned package does not appear (with a floor) in the root manifest,
#   * a dependency carries a floor but maps to no pinned package (so nothing keeps it honest),
#   * an `overrides` entry pins a version below the floor,
#   * the manifest's own version differs from project(kevlar VERSION ...) in CMakeLists.txt.
# Overlay-port manifests (ports/*/vcpkg.json) are checked for floor agreement and version too,
# but need not list every pin (the port needs no test dependencies).
#
# Inputs (all optional except KEVLAR_SOURCE_DIR when the others are not given):
#   KEVLAR_SOURCE_DIR        repository root
#   KEVLAR_VCPKG_JSON        root manifest to check (default <root>/vcpkg.json); the tests point
#                            it at deliberately wrong fixtures to prove the check fails
#   KEVLAR_DIRECTORY_CMAKE   pins file (default <root>/Directory.cmake)
#   KEVLAR_PORT_MANIFESTS    list of port manifests (default: glob <root>/ports/*/vcpkg.json;
#                            pass "NONE" to skip them)

cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED KEVLAR_SOURCE_DIR)
  get_filename_component(KEVLAR_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
if(NOT DEFINED KEVLAR_VCPKG_JSON)
  set(KEVLAR_VCPKG_JSON "${KEVLAR_SOURCE_DIR}/vcpkg.json")
endif()
if(NOT DEFINED KEVLAR_DIRECTORY_CMAKE)
  set(KEVLAR_DIRECTORY_CMAKE "${KEVLAR_SOURCE_DIR}/Directory.cmake")
endif()
if(NOT DEFINED KEVLAR_PORT_MANIFESTS)
  file(GLOB KEVLAR_PORT_MANIFESTS "${KEVLAR_SOURCE_DIR}/ports/*/vcpkg.json")
elseif(KEVLAR_PORT_MANIFESTS STREQUAL "NONE")
  set(KEVLAR_PORT_MANIFESTS "")
endif()

foreach(file IN ITEMS "${KEVLAR_VCPKG_JSON}" "${KEVLAR_DIRECTORY_CMAKE}")
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "check_pins: ${file} does not exist")
  endif()
endforeach()

# --- the pins -------------------------------------------------------------------------------
include("${KEVLAR_DIRECTORY_CMAKE}")
get_cmake_property(all_vars VARIABLES)
set(pinned_packages "")
foreach(var IN LISTS all_vars)
  if(var MATCHES "^KEVLAR_DEP_(.+)_VERSION$")
    list(APPEND pinned_packages "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT pinned_packages)
  message(FATAL_ERROR "check_pins: ${KEVLAR_DIRECTORY_CMAKE} pins no KEVLAR_DEP_<pkg>_VERSION")
endif()

# The project version, for the manifests' own "version".
set(project_version "")
if(EXISTS "${KEVLAR_SOURCE_DIR}/CMakeLists.txt")
  file(READ "${KEVLAR_SOURCE_DIR}/CMakeLists.txt" top_cmake)
  if(top_cmake MATCHES "project\\([ \t\r\n]*kevlar[ \t\r\n]+VERSION[ \t\r\n]+([0-9.]+)")
    set(project_version "${CMAKE_MATCH_1}")
  endif()
endif()

# vcpkg port name -> find_package name. Every Boost library port maps to the one Boost pin.
function(kevlar_port_to_package port out)
  if(port MATCHES "^boost(-.*)?$")
    set(pkg Boost)
  elseif(port STREQUAL "gtest")
    set(pkg GTest)
  elseif(port STREQUAL "benchmark")
    set(pkg benchmark)
  elseif(port STREQUAL "spdlog")
    set(pkg spdlog)
  elseif(port STREQUAL "fmt")
    set(pkg fmt)
  else()
    set(pkg "")
  endif()
  set(${out} "${pkg}" PARENT_SCOPE)
endfunction()

# "1.81.0#2" -> "1.81.0" (the port-version suffix is not part of the upstream version).
function(kevlar_strip_port_version version out)
  string(REGEX REPLACE "#[0-9]+$" "" version "${version}")
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# A pin agrees with a floor at the pin's own precision: pin 1.12 accepts the floor 1.12.1 (vcpkg
# only knows released versions, and 1.12.1 is the release Debian ships), pin 1.7.1 needs 1.7.1.
# kevlar_truncate_like(<version> <pin> <out>) keeps as many components of <version> as <pin> has.
function(kevlar_truncate_like version pin out)
  string(REPLACE "." ";" version_parts "${version}")
  string(REPLACE "." ";" pin_parts "${pin}")
  list(LENGTH pin_parts n)
  list(LENGTH version_parts have)
  if(have GREATER n)
    list(SUBLIST version_parts 0 ${n} version_parts)
  endif()
  list(JOIN version_parts "." version)
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

set(errors "")
set(seen_packages "")

# kevlar_check_dependency(<manifest> <where> <STRING|OBJECT> <the dependency>)
macro(kevlar_check_dependency manifest where dep_type dep_json)
  set(floor "")
  if("${dep_type}" STREQUAL "STRING")
    set(port "${dep_json}")
  else()
    string(JSON port GET "${dep_json}" name)
    string(JSON floor ERROR_VARIABLE no_floor GET "${dep_json}" "version>=")
    if(no_floor)
      set(floor "")
    endif()
  endif()
  kevlar_port_to_package("${port}" pkg)
  if(pkg)
    if(floor STREQUAL "")
      string(APPEND errors "\n  - ${manifest}: ${where} '${port}' (${pkg}) has no \"version>=\" floor; "
                         "Directory.cmake pins ${pkg} ${KEVLAR_DEP_${pkg}_VERSION}")
    elseif(NOT DEFINED KEVLAR_DEP_${pkg}_VERSION)
      string(APPEND errors "\n  - ${manifest}: ${where} '${port}' has floor ${floor} but Directory.cmake "
                         "pins no KEVLAR_DEP_${pkg}_VERSION")
    else()
      kevlar_strip_port_version("${floor}" floor_version)
      kevlar_truncate_like("${floor_version}" "${KEVLAR_DEP_${pkg}_VERSION}" floor_version)
      if(NOT floor_version VERSION_EQUAL KEVLAR_DEP_${pkg}_VERSION)
        string(APPEND errors "\n  - ${manifest}: ${where} '${port}' has \"version>=\": \"${floor}\" but "
                           "Directory.cmake pins KEVLAR_DEP_${pkg}_VERSION ${KEVLAR_DEP_${pkg}_VERSION}")
      endif()
      list(APPEND seen_packages "${pkg}")
    endif()
  elseif(NOT floor STREQUAL "")
    string(APPEND errors "\n  - ${manifest}: ${where} '${port}' has floor ${floor} but maps to no "
                       "package pinned in Directory.cmake (add a pin and a mapping)")
  endif()
endmacro()

# kevlar_check_dependency_array(<manifest> <where> <json> <path...>)
macro(kevlar_check_dependency_array manifest where json)
  string(JSON n ERROR_VARIABLE no_array LENGTH "${json}" ${ARGN})
  if(NOT no_array AND n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON dep_kind TYPE "${json}" ${ARGN} ${i})
      string(JSON dep GET "${json}" ${ARGN} ${i})
      kevlar_check_dependency("${manifest}" "${where}" "${dep_kind}" "${dep}")
    endforeach()
  endif()
endmacro()

# kevlar_check_manifest(<path> <require_all_pins>)
macro(kevlar_check_manifest manifest require_all)
  file(READ "${manifest}" json)
  string(JSON kind ERROR_VARIABLE parse_error TYPE "${json}")
  if(parse_error)
    message(FATAL_ERROR "check_pins: ${manifest} is not valid JSON: ${parse_error}")
  endif()
  set(seen_packages "")

  string(JSON manifest_version ERROR_VARIABLE no_version GET "${json}" version)
  if(no_version)
    string(APPEND errors "\n  - ${manifest}: no \"version\" field")
  elseif(project_version AND NOT manifest_version VERSION_EQUAL project_version)
    string(APPEND errors "\n  - ${manifest}: \"version\": \"${manifest_version}\" but CMakeLists.txt "
                       "declares project(kevlar VERSION ${project_version})")
  endif()

  kevlar_check_dependency_array("${manifest}" "dependency" "${json}" dependencies)

  string(JSON n_features ERROR_VARIABLE no_features LENGTH "${json}" features)
  if(NOT no_features AND n_features GREATER 0)
    math(EXPR last_feature "${n_features} - 1")
    foreach(f RANGE ${last_feature})
      string(JSON feature MEMBER "${json}" features ${f})
      kevlar_check_dependency_array("${manifest}" "feature '${feature}' dependency" "${json}"
                                    features ${feature} dependencies)
    endforeach()
  endif()

  string(JSON n_overrides ERROR_VARIABLE no_overrides LENGTH "${json}" overrides)
  if(NOT no_overrides AND n_overrides GREATER 0)
    math(EXPR last_override "${n_overrides} - 1")
    foreach(i RANGE ${last_override})
      string(JSON port GET "${json}" overrides ${i} name)
      string(JSON pinned GET "${json}" overrides ${i} version)
      kevlar_port_to_package("${port}" pkg)
      kevlar_strip_port_version("${pinned}" pinned)
      if(pkg AND DEFINED KEVLAR_DEP_${pkg}_VERSION
         AND pinned VERSION_LESS KEVLAR_DEP_${pkg}_VERSION)
        string(APPEND errors "\n  - ${manifest}: override '${port}' pins ${pinned}, below the "
                           "Directory.cmake floor ${KEVLAR_DEP_${pkg}_VERSION}")
      endif()
    endforeach()
  endif()

  if(${require_all})
    foreach(pkg IN LISTS pinned_packages)
      if(NOT pkg IN_LIST seen_packages)
        string(APPEND errors "\n  - ${manifest}: Directory.cmake pins ${pkg} "
                           "${KEVLAR_DEP_${pkg}_VERSION} but no dependency with a floor maps to "
                           "${pkg} (missing from vcpkg.json)")
      endif()
    endforeach()
  endif()
endmacro()

kevlar_check_manifest("${KEVLAR_VCPKG_JSON}" TRUE)
foreach(port_manifest IN LISTS KEVLAR_PORT_MANIFESTS)
  kevlar_check_manifest("${port_manifest}" FALSE)
endforeach()

if(errors)
  message(FATAL_ERROR "check_pins: vcpkg manifests disagree with Directory.cmake:${errors}")
endif()

list(REMOVE_DUPLICATES pinned_packages)
list(JOIN pinned_packages ", " pinned_text)
message(STATUS "check_pins: ${KEVLAR_VCPKG_JSON} agrees with ${KEVLAR_DIRECTORY_CMAKE} (${pinned_text})")
