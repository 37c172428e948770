# distgrad_add_library(NAME SOURCES...): the layer library distgrad_NAME (folder NAME/), used
# in the tree as distgrad::NAME and exported under the same name (cmake/DistgradPackage.cmake),
# compiled with distgrad's warnings (which consumers do not inherit).
function(distgrad_add_library name)
  add_library(distgrad_${name} ${ARGN})
  add_library(distgrad::${name} ALIAS distgrad_${name})
  set_target_properties(distgrad_${name} PROPERTIES EXPORT_NAME ${name})
  target_link_libraries(distgrad_${name} PRIVATE $<BUILD_INTERFACE:distgrad_warnings>)
  set_property(GLOBAL APPEND PROPERTY DISTGRAD_LIBRARIES distgrad_${name})
endfunction()
