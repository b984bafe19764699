# dfi_target_options(<target>): warnings and sanitizer flags shared by every DFI target.
# Kept per target (no add_definitions / global flags), see ../shared/STYLE.md.
function(dfi_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual)
  if(DFI_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(DFI_SANITIZE STREQUAL "address")
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  elseif(DFI_SANITIZE STREQUAL "thread")
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  elseif(NOT DFI_SANITIZE STREQUAL "")
    message(FATAL_ERROR "DFI_SANITIZE must be '', 'address' or 'thread', not '${DFI_SANITIZE}'")
  endif()
endfunction()

# dfi_layer(<name> SOURCES ... DEPENDS ...): one library per layer folder; DEPENDS may only
# name lower layers (checked by scripts/check-layers).
#
# The layer libraries are what the tree links (tests, tools). Their object files also make up
# the one installed libdfi (static and shared, cmake/DfiPackage.cmake): every layer is listed in
# the global property DFI_LAYERS and compiled position-independent, so that one compilation
# feeds both. -fno-semantic-interposition keeps what -fPIC would otherwise cost: calls to the
# library's own functions stay direct and inlinable (nobody interposes on DFI's symbols).
function(dfi_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(dfi_${name} STATIC ${ARG_SOURCES})
  # The generated dfi/version.hpp lives in the build tree's include/.
  target_include_directories(dfi_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include
                                                ${PROJECT_BINARY_DIR}/include)
  target_link_libraries(dfi_${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  set_target_properties(dfi_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(dfi_${name} PRIVATE -fno-semantic-interposition)
  dfi_target_options(dfi_${name})
  set_property(GLOBAL APPEND PROPERTY DFI_LAYERS dfi_${name})
endfunction()
