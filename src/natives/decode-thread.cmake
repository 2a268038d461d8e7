# Loaded through CMAKE_PROJECT_INCLUDE after every project() of the natives build; acts only on
# node-llama-cpp's addon. Once its CMakeLists has defined the target:
# - adds decode-thread.cpp, and has the linker route the addon's calls to llama_decode through it
#   (why: see that file);
# - where the project has node-llama-cpp's addon sources, adds decode-steps.cpp (and
#   token-logprobs.cpp, pooled-embeddings.cpp, sequence-state.cpp), and has the linker route napi_define_class through it, which gives
#   AddonContext its methods,
#   llama_log_set, which keeps an aborted step out of the log, and llama_memory_seq_add/div, which
#   tell it of a pending position shift (why: see that file). The stand-in addon of the hook's
#   test has no such sources.
if (PROJECT_NAME STREQUAL "llama-addon")
    set(PARLEY_NATIVES_DIR "${CMAKE_CURRENT_LIST_DIR}")
    set(PARLEY_ADDON_SOURCES "${PROJECT_SOURCE_DIR}/addon")
    function(parley_decode_on_one_thread)
        target_sources(llama-addon PRIVATE "${PARLEY_NATIVES_DIR}/decode-thread.cpp")
        target_link_options(llama-addon PRIVATE "LINKER:--wrap=llama_decode")
        if (EXISTS "${PARLEY_ADDON_SOURCES}/AddonContext.h")
            # decode-steps.cpp includes the addon's private headers: written for one release only
            # (src/natives/version.ts, passed in by compiled.ts's options).
            file(READ "${PROJECT_SOURCE_DIR}/../package.json" parley_package)
            string(JSON parley_found GET "${parley_package}" version)
            if (NOT parley_found STREQUAL PARLEY_NODE_LLAMA_CPP_VERSION)
                message(FATAL_ERROR "Parley: src/natives/ is written for node-llama-cpp '${PARLEY_NODE_LLAMA_CPP_VERSION}', this addon is of '${parley_found}' (src/natives/version.ts)")
            endif()
            # decode-steps.cpp finds the classes by the names the addon defines them with: a renamed
            # class must fail the build, not leave the addon silently without the methods.
            foreach (class AddonContext AddonSampler)
                file(READ "${PARLEY_ADDON_SOURCES}/${class}.cpp" parley_source)
                string(REGEX MATCH "DefineClass\\([^,]*,[ \t\r\n]*\"${class}\"" parley_defined "${parley_source}")
                if (NOT parley_defined)
                    message(FATAL_ERROR "Parley: ${PARLEY_ADDON_SOURCES}/${class}.cpp no longer defines the class \"${class}\" that src/natives/decode-steps.cpp extends")
                endif()
            endforeach()
            target_sources(llama-addon PRIVATE "${PARLEY_NATIVES_DIR}/decode-steps.cpp" "${PARLEY_NATIVES_DIR}/token-logprobs.cpp"
                           "${PARLEY_NATIVES_DIR}/pooled-embeddings.cpp" "${PARLEY_NATIVES_DIR}/sequence-state.cpp")
            target_include_directories(llama-addon PRIVATE "${PARLEY_ADDON_SOURCES}" "${PARLEY_NATIVES_DIR}")
            target_link_options(llama-addon PRIVATE "LINKER:--wrap=napi_define_class" "LINKER:--wrap=llama_log_set"
                                "LINKER:--wrap=llama_memory_seq_add" "LINKER:--wrap=llama_memory_seq_div")
        endif()
    endfunction()
    cmake_language(DEFER CALL parley_decode_on_one_thread)
endif()
