# libsqueezekv.so from the objects the static library already compiled (no second compile).
if(NOT SQUEEZEKV_BUILD_SHARED)
  return()
endif()
add_library(squeezekv_shared SHARED)
foreach(layer ${SQUEEZEKV_LAYERS})
  target_sources(squeezekv_shared PRIVATE $<TARGET_OBJECTS:squeezekv_${layer}>)
endforeach()
set_target_properties(squeezekv_shared PROPERTIES OUTPUT_NAME squeezekv EXPORT_NAME squeezekv
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
target_include_directories(squeezekv_shared PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
target_link_libraries(squeezekv_shared PUBLIC Threads::Threads PRIVATE hwy::hwy PkgConfig::PCRE2)
# Undefined symbols are link errors here, not surprises for whoever loads the library.
target_link_options(squeezekv_shared PRIVATE -Wl,--no-undefined)
