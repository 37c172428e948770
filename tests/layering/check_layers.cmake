# Checks distgrad's layering against the drawing in docs/architecture.md: every `#include` of a
# layer's sources and every distgrad library its CMakeLists.txt links must point at the layer
# itself or at a layer the drawing lets it depend on (directly or through others). Prints each
# forbidden arrow and fails when there is one.
#
#   cmake -DSOURCE_DIR=<distgrad tree> -P tests/layering/check_layers.cmake
#
# The drawing is the block fenced with ```layers in docs/architecture.md, one line per layer:
# "LAYER: LAYERS IT MAY USE DIRECTLY".
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "check_layers: pass -DSOURCE_DIR=<distgrad source tree>")
endif()

# --- The drawing.
file(READ ${SOURCE_DIR}/docs/architecture.md document)
string(REGEX MATCH "```layers\n([^`]*)```" block "${document}")
if(NOT block)
  message(FATAL_ERROR "check_layers: docs/architecture.md has no ```layers block")
endif()
string(REPLACE "\n" ";" lines "${CMAKE_MATCH_1}")
set(layers)
foreach(line ${lines})
  if(NOT line MATCHES "^([a-z_]+):(.*)$")
    message(FATAL_ERROR "check_layers: a line of the layers block does not read \"LAYER: LAYERS\": '${line}'")
  endif()
  set(layer ${CMAKE_MATCH_1})
  string(STRIP "${CMAKE_MATCH_2}" uses)
  string(REPLACE " " ";" uses "${uses}")
  list(APPEND layers ${layer})
  set(direct_${layer} ${uses})
endforeach()

# allowed_<layer>: every layer it may use, directly or through others (the drawing has no cycles).
foreach(layer ${layers})
  set(allowed ${direct_${layer}})
  set(frontier ${direct_${layer}})
  while(frontier)
    list(POP_FRONT frontier next)
    if(NOT next IN_LIST layers)
      message(FATAL_ERROR "check_layers: ${layer} uses '${next}', which is not a layer of the drawing")
    endif()
    foreach(below ${direct_${next}})
      if(below STREQUAL layer)
        message(FATAL_ERROR "check_layers: the drawing has a cycle through ${layer} and ${next}")
      endif()
      if(NOT below IN_LIST allowed)
        list(APPEND allowed ${below})
        list(APPEND frontier ${below})
      endif()
    endforeach()
  endwhile()
  set(allowed_${layer} ${allowed})
endforeach()

set(violations 0)
# Reports `layer` -> `target` (found as `what`) unless the drawing allows it.
function(check_arrow layer target what)
  if(target STREQUAL layer OR target IN_LIST allowed_${layer})
    return()
  endif()
  string(REPLACE ";" ", " allowed "${allowed_${layer}}")
  if(NOT allowed)
    set(allowed "nothing")
  endif()
  message(STATUS "forbidden: ${what}: ${layer} may not depend on ${target} "
                 "(docs/architecture.md lets ${layer} use ${allowed})")
  math(EXPR count "${violations} + 1")
  set(violations ${count} PARENT_SCOPE)
endfunction()

foreach(layer ${layers})
  if(NOT IS_DIRECTORY ${SOURCE_DIR}/${layer})
    message(FATAL_ERROR "check_layers: the drawing names ${layer}, which is not a folder of ${SOURCE_DIR}")
  endif()
  # --- Includes: "FOLDER/..." of every source, where FOLDER is a folder of this tree (others, such
  # as "absl/", are third-party); folders that are not layers (tests/, examples/, ...) are never
  # allowed.
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.cc
       ${SOURCE_DIR}/${layer}/*.cu ${SOURCE_DIR}/${layer}/*.proto)
  foreach(source ${sources})
    file(STRINGS ${SOURCE_DIR}/${source} includes REGEX "^[ \t]*(#include|import) \"[^\"]+/[^\"]+\"")
    foreach(include ${includes})
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" path "${include}")
      string(REGEX REPLACE "/.*$" "" target "${path}")
      if(IS_DIRECTORY ${SOURCE_DIR}/${target})
        check_arrow(${layer} ${target} "${source} includes ${path}")
      endif()
    endforeach()
  endforeach()
  # --- Links: the distgrad libraries named in the folder's CMake files.
  file(GLOB_RECURSE cmake_files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${layer}/CMakeLists.txt)
  foreach(cmake_file ${cmake_files})
    file(READ ${SOURCE_DIR}/${cmake_file} text)
    string(REGEX MATCHALL "target_link_libraries\\([^)]*\\)" calls "${text}")
    foreach(call ${calls})
      string(REGEX MATCHALL "distgrad(::|_)[a-z_]+" targets "${call}")
      list(POP_FRONT targets)  # the target being linked
      foreach(linked ${targets})
        string(REGEX REPLACE "^distgrad(::|_)" "" target "${linked}")
        if(target STREQUAL "warnings")  # build flags, not a layer
          continue()
        endif()
        check_arrow(${layer} ${target} "${cmake_file} links ${linked}")
      endforeach()
    endforeach()
  endforeach()
endforeach()

# --- Installed headers include no internal header (cmake/DistgradPackage.cmake lists those: a
# folder, or a file, not installed because it includes gRPC, protobuf's generated code or CUDA).
file(READ ${SOURCE_DIR}/cmake/DistgradPackage.cmake package)
string(REGEX MATCH "set\\(distgrad_internal_headers([^)]*)\\)" internal_list "${package}")
string(REGEX REPLACE "[ \t\n]+" ";" internals "${CMAKE_MATCH_1}")
list(FILTER internals EXCLUDE REGEX "^$")
if(NOT internals)
  message(FATAL_ERROR "check_layers: cmake/DistgradPackage.cmake lists no internal headers")
endif()
# Whether `header` is internal: listed, or inside a listed folder.
function(is_internal header result)
  set(${result} FALSE PARENT_SCOPE)
  foreach(internal ${internals})
    if(header STREQUAL internal OR header MATCHES "^${internal}/")
      set(${result} TRUE PARENT_SCOPE)
    endif()
  endforeach()
endfunction()
foreach(layer ${layers})
  file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${layer}/*.h)
  foreach(header ${headers})
    is_internal(${header} internal)
    if(internal)
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${header} includes REGEX "^[ \t]*#include \"[^\"]+\"")
    foreach(include ${includes})
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" path "${include}")
      is_internal(${path} included_internal)
      if(included_internal)
        message(STATUS "forbidden: ${header} includes ${path}: an installed header may not include an internal one "
                       "(cmake/DistgradPackage.cmake does not install it)")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "check_layers: ${violations} arrow(s) that docs/architecture.md does not allow")
endif()
list(LENGTH layers count)
message(STATUS "check_layers: ${count} layers, every include and link follows docs/architecture.md")
