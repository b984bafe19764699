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
function(dfi_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(dfi_${name} STATIC ${ARG_SOURCES})
  target_include_directories(dfi_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(dfi_${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  dfi_target_options(dfi_${name})
endfunction()
