# Loaded through CMAKE_PROJECT_INCLUDE after every project() of the natives build; acts only on
# node-llama-cpp's addon. Once its CMakeLists has defined the target:
# - adds decode-thread.cpp, and has the linker route the addon's calls to llama_decode through it
#   (why: see that file);
# - where the project has node-llama-cpp's addon sources, adds decode-steps.cpp (and
#   token-logprobs.cpp, pooled-embeddings.cpp, sequence-state.cpp, infill-sampler.cpp, vision.cpp with llama.cpp's mtmd
#   sources), and has the linker route napi_define_class through it, which gives
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
                           "${PARLEY_NATIVES_DIR}/pooled-embeddings.cpp" "${PARLEY_NATIVES_DIR}/sequence-state.cpp"
                           "${PARLEY_NATIVES_DIR}/infill-sampler.cpp" "${PARLEY_NATIVES_DIR}/vision.cpp")
            target_include_directories(llama-addon PRIVATE "${PARLEY_ADDON_SOURCES}" "${PARLEY_NATIVES_DIR}")
            # llama.cpp's mtmd (images in prompts, vision.cpp), compiled into the addon rather than
            # linked as its own shared library: one file less to ship and find, and its decodes go
            # through the decode thread like the addon's. Its sources as tools/mtmd/CMakeLists.txt
            # lists them: the library's files, its models, none of its programs.
            set(parley_mtmd "${PROJECT_SOURCE_DIR}/llama.cpp/tools/mtmd")
            file(GLOB parley_mtmd_models "${parley_mtmd}/models/*.cpp")
            if (NOT EXISTS "${parley_mtmd}/mtmd.cpp" OR NOT parley_mtmd_models)
                message(FATAL_ERROR "Parley: ${parley_mtmd} has no mtmd sources that src/natives/vision.cpp needs")
            endif()
            target_sources(llama-addon PRIVATE "${parley_mtmd}/mtmd.cpp" "${parley_mtmd}/mtmd-audio.cpp" "${parley_mtmd}/mtmd-image.cpp"
                           "${parley_mtmd}/mtmd-helper.cpp" "${parley_mtmd}/mtmd-helper-gen.cpp" "${parley_mtmd}/clip.cpp" ${parley_mtmd_models})
            # node-llama-cpp links the addon with the plain signature, so this does too.
            target_include_directories(llama-addon PRIVATE "${parley_mtmd}")
            target_link_libraries(llama-addon vendor::hash vendor::miniaudio vendor::stb vendor::sheredom)
            target_link_options(llama-addon PRIVATE "LINKER:--wrap=napi_define_class" "LINKER:--wrap=llama_log_set"
                                "LINKER:--wrap=llama_memory_seq_add" "LINKER:--wrap=llama_memory_seq_div")
        endif()
    endfunction()
    cmake_language(DEFER CALL parley_decode_on_one_thread)
endif()
