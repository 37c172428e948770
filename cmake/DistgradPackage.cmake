# Install rules: the headers (include/distgrad/, the tree's paths), the libraries, distgrad-run and distgrad-trace,
# the CMake package (find_package(distgrad): distgradConfig.cmake, its version file and the
# exported targets distgrad::*) and distgrad.pc for pkg-config.
include(CMakePackageConfigHelpers)

get_property(distgrad_libraries GLOBAL PROPERTY DISTGRAD_LIBRARIES)
set_target_properties(distgrad_run PROPERTIES EXPORT_NAME distgrad-run)
set_target_properties(distgrad_trace_tool PROPERTIES EXPORT_NAME distgrad-trace)
install(TARGETS ${distgrad_libraries} distgrad distgrad_run distgrad_trace_tool
        EXPORT distgradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Every header of the layers but the internal ones that include gRPC, protobuf's generated code
# or CUDA (no public header includes them; tests/layering checks it).
set(distgrad_internal_headers core/cpu core/cuda rendezvous/credentials.h rpc/call_client.h rpc/call_server.h
                              rpc/call_socket.h rpc/frame.h rpc/interceptor_chain.h rpc/loopback.h
                              rpc/tensor_paths.h)
# The folder of each library (distgrad_NAME in NAME/); proto's headers are generated in the build
# tree and included by .cc files only.
list(TRANSFORM distgrad_libraries REPLACE "^distgrad_" "" OUTPUT_VARIABLE distgrad_layers)
list(REMOVE_ITEM distgrad_layers proto)
foreach(layer ${distgrad_layers})
  set(excluded)
  foreach(internal ${distgrad_internal_headers})
    if(internal MATCHES "^${layer}/(.*)$")
      list(APPEND excluded PATTERN ${CMAKE_MATCH_1} EXCLUDE)
    endif()
  endforeach()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${DISTGRAD_INSTALL_INCLUDEDIR}/${layer}
          FILES_MATCHING PATTERN "*.h" ${excluded})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/distgrad.h DESTINATION ${DISTGRAD_INSTALL_INCLUDEDIR})

install(EXPORT distgradTargets NAMESPACE distgrad:: DESTINATION ${DISTGRAD_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/distgradConfig.cmake.in ${PROJECT_BINARY_DIR}/distgradConfig.cmake
                              INSTALL_DESTINATION ${DISTGRAD_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/distgradConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/distgradConfig.cmake ${PROJECT_BINARY_DIR}/distgradConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/distgradLibraryDependencies.cmake
        DESTINATION ${DISTGRAD_INSTALL_CMAKEDIR})

set(DISTGRAD_PC_CFLAGS "")
set(DISTGRAD_PC_LIBS "")
if(DISTGRAD_HAVE_CUDA)
  set(DISTGRAD_PC_CFLAGS " -DDISTGRAD_WITH_CUDA")
  string(APPEND DISTGRAD_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
if(DISTGRAD_HAVE_NCCL)
  string(APPEND DISTGRAD_PC_LIBS " ${NCCL_LIBRARY}")
endif()
# Relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix P).
file(RELATIVE_PATH DISTGRAD_PC_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/distgrad.pc.in ${PROJECT_BINARY_DIR}/distgrad.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/distgrad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
