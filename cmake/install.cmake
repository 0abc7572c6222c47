# `cmake --install`: public headers, the static and shared libraries, the `squeezekv` program, a
# CMake package (find_package(squeezekv CONFIG): squeezekv::squeezekv is the shared library,
# squeezekv::squeezekv_static the static one) and a pkg-config file (squeezekv.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SQUEEZEKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/squeezekv)

# The public headers: the C API and the C++ entry points (the cache, the configuration and the
# registry, the model, engine, tokenizer, generation, saved caches, perplexity), with every header
# they include (cmake/public_headers.cmake). The rest of include/ (kernels, the policies', the
# allocators' and the engine's insides) and all of src/ stay the library's own.
# tests/package/headers_alone.sh checks that each installed header compiles alone from the install.
set(squeezekv_entry_headers c/squeezekv.h c/squeezekv.hpp cache/model_cache.h cache/layer_cache.h
    methods/kv_cache_config.h methods/registry.h engine/engine.h engine/model.h engine/generate.h
    engine/tokenizer.h engine/cache_file.h eval/perplexity.h)
include(cmake/public_headers.cmake)
squeezekv_public_headers(squeezekv_installed_headers ${CMAKE_CURRENT_SOURCE_DIR}/include ${squeezekv_entry_headers})
foreach(header ${squeezekv_installed_headers})
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES include/squeezekv/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/squeezekv/${folder})
endforeach()

set_target_properties(squeezekv PROPERTIES EXPORT_NAME squeezekv_static)
set(squeezekv_install_targets squeezekv)
if(TARGET squeezekv_shared)
  list(APPEND squeezekv_install_targets squeezekv_shared)
endif()
install(TARGETS ${squeezekv_install_targets} EXPORT squeezekvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS squeezekv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT squeezekvTargets NAMESPACE squeezekv:: DESTINATION ${SQUEEZEKV_CMAKE_DIR})

configure_package_config_file(cmake/squeezekvConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/squeezekvConfig.cmake
                              INSTALL_DESTINATION ${SQUEEZEKV_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/squeezekvConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/squeezekvConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/squeezekvConfigVersion.cmake
        DESTINATION ${SQUEEZEKV_CMAKE_DIR})

# The .pc file finds its prefix from its own place, so `cmake --install --prefix DIR` works too.
set(SQUEEZEKV_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH SQUEEZEKV_PC_TO_PREFIX /${SQUEEZEKV_PC_DIR} /)
string(REGEX REPLACE "/$" "" SQUEEZEKV_PC_TO_PREFIX "${SQUEEZEKV_PC_TO_PREFIX}")
configure_file(cmake/squeezekv.pc.in ${CMAKE_CURRENT_BINARY_DIR}/squeezekv.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/squeezekv.pc DESTINATION ${SQUEEZEKV_PC_DIR})
