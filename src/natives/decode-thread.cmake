# Loaded through CMAKE_PROJECT_INCLUDE after every project() of the natives build; acts only on
# node-llama-cpp's addon. Once its CMakeLists has defined the target, adds decode-thread.cpp and
# has the linker route the addon's calls to llama_decode through it (why: see that file).
if (PROJECT_NAME STREQUAL "llama-addon")
    set(PARLEY_DECODE_THREAD_SOURCE "${CMAKE_CURRENT_LIST_DIR}/decode-thread.cpp")
    function(parley_decode_on_one_thread)
        target_sources(llama-addon PRIVATE "${PARLEY_DECODE_THREAD_SOURCE}")
        target_link_options(llama-addon PRIVATE "LINKER:--wrap=llama_decode")
    endfunction()
    cmake_language(DEFER CALL parley_decode_on_one_thread)
endif()
