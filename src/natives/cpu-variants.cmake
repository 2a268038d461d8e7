# Builds only the ggml CPU variants named in PARLEY_CPU_VARIANTS (comma-separated tags) out of the
# list GGML_CPU_ALL_VARIANTS declares: compiling all 14 x86-64 variants took 37 minutes on 2 cores.
# Loaded through CMAKE_PROJECT_ggml_INCLUDE, i.e. before ggml defines the function that adds one
# variant, so it cannot simply be redefined here. ggml sets GGML_CPU_TAG_NAME before adding each
# variant, after that function exists: on the first such set, the function is wrapped (CMake keeps
# the original as _ggml_add_cpu_backend_variant_impl) to skip the variants not asked for.
if (NOT PARLEY_CPU_VARIANTS)
    message(FATAL_ERROR "PARLEY_CPU_VARIANTS is empty")
endif()
string(REPLACE "," ";" parley_wanted "${PARLEY_CPU_VARIANTS}")
set_property(GLOBAL PROPERTY PARLEY_CPU_VARIANTS_WANTED "${parley_wanted}")
set_property(GLOBAL PROPERTY PARLEY_CPU_VARIANTS_ADDED "")

function(parley_wrap_cpu_variants variable access)
    get_property(wrapped GLOBAL PROPERTY PARLEY_CPU_VARIANTS_WRAPPED)
    if (wrapped OR NOT access STREQUAL "MODIFIED_ACCESS")
        return()
    endif()
    set_property(GLOBAL PROPERTY PARLEY_CPU_VARIANTS_WRAPPED TRUE)
    function(ggml_add_cpu_backend_variant_impl tag_name)
        get_property(wanted GLOBAL PROPERTY PARLEY_CPU_VARIANTS_WANTED)
        if (tag_name IN_LIST wanted)
            set_property(GLOBAL APPEND PROPERTY PARLEY_CPU_VARIANTS_ADDED "${tag_name}")
            _ggml_add_cpu_backend_variant_impl(${tag_name})
        else()
            message(STATUS "Parley: skipping CPU backend variant ${tag_name}")
        endif()
    endfunction()
endfunction()
variable_watch(GGML_CPU_TAG_NAME parley_wrap_cpu_variants)

# A tag ggml no longer declares (renamed upstream) must fail the build, not silently vanish.
function(parley_check_cpu_variants)
    get_property(wanted GLOBAL PROPERTY PARLEY_CPU_VARIANTS_WANTED)
    get_property(added GLOBAL PROPERTY PARLEY_CPU_VARIANTS_ADDED)
    foreach (tag IN LISTS wanted)
        if (NOT tag IN_LIST added)
            message(FATAL_ERROR "Parley: ggml declared no CPU variant '${tag}' (declared ones are listed in ggml/src/CMakeLists.txt)")
        endif()
    endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL parley_check_cpu_variants)
