# Loaded through CMAKE_PROJECT_INCLUDE after every project() of the natives build; acts only on
# node-llama-cpp's addon. Once its CMakeLists has defined the target:
# - adds decode-thread.cpp, and has the linker route the addon's calls to llama_decode through it
#   (why: see that file);
# - where the project has node-llama-cpp's addon sources, adds decode-steps.cpp, and has the
#   linker route napi_define_class through it, which gives AddonContext its methods, and
#   llama_log_set, which keeps an aborted step out of the log (why: see that file). The stand-in
#   addon of the hook's test has no such sources.
if (PROJECT_NAME STREQUAL "llama-addon")
    set(PARLEY_NATIVES_DIR "${CMAKE_CURRENT_LIST_DIR}")
    set(PARLEY_ADDON_SOURCES "${PROJECT_SOURCE_DIR}/addon")
    function(parley_decode_on_one_thread)
        target_sources(llama-addon PRIVATE "${PARLEY_NATIVES_DIR}/decode-thread.cpp")
        target_link_options(llama-addon PRIVATE "LINKER:--wrap=llama_decode")
        if (EXISTS "${PARLEY_ADDON_SOURCES}/AddonContext.h")
            target_sources(llama-addon PRIVATE "${PARLEY_NATIVES_DIR}/decode-steps.cpp")
            target_include_directories(llama-addon PRIVATE "${PARLEY_ADDON_SOURCES}" "${PARLEY_NATIVES_DIR}")
            target_link_options(llama-addon PRIVATE "LINKER:--wrap=napi_define_class" "LINKER:--wrap=llama_log_set")
        endif()
    endfunction()
    cmake_language(DEFER CALL parley_decode_on_one_thread)
endif()
