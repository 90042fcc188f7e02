# LoomAot.cmake -- loom_add_aot: compile a loom kernel template ahead of time, at build time.
#
#   loom_add_aot(TARGET tgt NAME template PREFIX p
#                SHAPES "k=v,..." ["k=v,..." ...]
#                [CONFIG "k=v,..." | TUNED] [STAGE n] [ARCH sm_90a] [OUTPUT_DIR dir])
#
# runs `loomc aot template --shape ... --prefix p -o dir` when the build needs dir/p.h or
# dir/p.c (and again when loomc changes, and in loom's own tree when libloom does), adds
# p.c to tgt's sources and dir to its include directories (PUBLIC for a library, so its
# users can include p.h too), and links what the generated code needs: dl and pthread (it
# dlopens the CUDA driver itself; not libloom).
# OUTPUT_DIR defaults to ${CMAKE_CURRENT_BINARY_DIR}/loom_aot.  Call it in the directory
# that creates tgt.  See docs/install.md.
#
# Which loomc: LOOM_LOOMC_EXECUTABLE when set (a path), else the target loom::loomc: the
# imported one of find_package(loom), or, inside loom's own build, the alias of loomc
# there (built first, then run from the build tree).
include_guard(GLOBAL)

function(loom_add_aot)
  cmake_parse_arguments(PARSE_ARGV 0 AOT "TUNED" "TARGET;NAME;PREFIX;CONFIG;STAGE;ARCH;OUTPUT_DIR;PLUGIN" "SHAPES")
  if(AOT_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "loom_add_aot: unknown arguments: ${AOT_UNPARSED_ARGUMENTS}")
  endif()
  foreach(req TARGET NAME PREFIX SHAPES)
    if(NOT AOT_${req})
      message(FATAL_ERROR "loom_add_aot: ${req} is required")
    endif()
  endforeach()
  if(NOT TARGET ${AOT_TARGET})
    message(FATAL_ERROR "loom_add_aot: ${AOT_TARGET} is not a target (create it before calling loom_add_aot)")
  endif()
  get_target_property(type ${AOT_TARGET} TYPE)
  if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
    message(FATAL_ERROR "loom_add_aot: ${AOT_TARGET} is a ${type}; it needs a target that compiles sources")
  endif()
  if(AOT_TUNED AND DEFINED AOT_CONFIG)
    message(FATAL_ERROR "loom_add_aot: CONFIG and TUNED exclude each other")
  endif()
  if(NOT AOT_PREFIX MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "loom_add_aot: PREFIX '${AOT_PREFIX}' is not a C identifier")
  endif()

  set(deps "")
  if(LOOM_LOOMC_EXECUTABLE)
    set(loomc "${LOOM_LOOMC_EXECUTABLE}")
  elseif(TARGET loom::loomc)
    set(loomc loom::loomc)
    get_target_property(aliased loom::loomc ALIASED_TARGET) # loom's own tree: loomc itself
    if(aliased)
      set(loomc ${aliased})
      # the generator is in libloom.so: run again when it changes, not only when loomc does
      get_target_property(lib loom::loom ALIASED_TARGET)
      if(lib)
        set(deps ${lib})
      endif()
    endif()
  else()
    message(FATAL_ERROR "loom_add_aot: no loomc: find_package(loom) first, or set LOOM_LOOMC_EXECUTABLE")
  endif()

  if(AOT_OUTPUT_DIR)
    get_filename_component(dir "${AOT_OUTPUT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(dir "${CMAKE_CURRENT_BINARY_DIR}/loom_aot")
  endif()

  set(args aot ${AOT_NAME})
  if(AOT_PLUGIN) # a user's templates: a plugin's file, or the target that builds it
    if(TARGET ${AOT_PLUGIN})
      list(APPEND args --plugin "$<TARGET_FILE:${AOT_PLUGIN}>")
      list(APPEND deps ${AOT_PLUGIN})
    else()
      list(APPEND args --plugin "${AOT_PLUGIN}")
    endif()
  endif()
  foreach(s IN LISTS AOT_SHAPES)
    list(APPEND args --shape "${s}")
  endforeach()
  if(DEFINED AOT_CONFIG)
    list(APPEND args --config "${AOT_CONFIG}")
  endif()
  if(AOT_TUNED)
    list(APPEND args --tuned)
  endif()
  if(DEFINED AOT_STAGE)
    list(APPEND args --stage ${AOT_STAGE})
  endif()
  if(DEFINED AOT_ARCH)
    list(APPEND args --arch ${AOT_ARCH})
  endif()
  list(APPEND args --prefix ${AOT_PREFIX} -o "${dir}")

  add_custom_command(
    OUTPUT "${dir}/${AOT_PREFIX}.h" "${dir}/${AOT_PREFIX}.c"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${dir}"
    COMMAND ${loomc} ${args}
    DEPENDS ${loomc} ${deps}
    COMMENT "loomc aot ${AOT_NAME} -> ${AOT_PREFIX}.h, ${AOT_PREFIX}.c"
    VERBATIM)
  target_sources(${AOT_TARGET} PRIVATE "${dir}/${AOT_PREFIX}.c" "${dir}/${AOT_PREFIX}.h")

  # dl and pthread, by property rather than target_link_libraries, so this works whichever
  # signature (plain or PRIVATE/PUBLIC) the project uses for tgt
  find_package(Threads REQUIRED)
  set(libs Threads::Threads ${CMAKE_DL_LIBS})
  if(type STREQUAL "EXECUTABLE")
    target_include_directories(${AOT_TARGET} PRIVATE "${dir}")
  else()
    target_include_directories(${AOT_TARGET} PUBLIC "$<BUILD_INTERFACE:${dir}>")
  endif()
  set_property(TARGET ${AOT_TARGET} APPEND PROPERTY LINK_LIBRARIES ${libs})
  if(type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY)$")
    foreach(l IN LISTS libs)
      set_property(TARGET ${AOT_TARGET} APPEND PROPERTY INTERFACE_LINK_LIBRARIES "$<LINK_ONLY:${l}>")
    endforeach()
  endif()
endfunction()
