# Fuzz targets (tests/fuzz; tests/fuzz/README.md): the front end, the plan
# loader, the .fpir parser, the safetensors reader and the transfer loader.
#
# Every build replays each target's seed corpus and saved crashes
# (tests/fuzz/corpus/T, tests/fuzz/regress/T) through a plain main()
# (fuzz_T_replay, the project's compiler; ASan and UBSan under the asan
# preset). Where clang's libFuzzer links (clang and, on Debian 12,
# libclang-rt-14-dev: .ci/packages), the targets are also built with clang,
# -fsanitize=fuzzer,address,undefined, in a sub-build (build/fuzz) over the
# same sources, and the default preset fuzzes each for FP_FUZZ_SECONDS
# (label fuzz).
set(FP_FUZZ_TARGETS frontend plan fpir safetensors xfer)
set(FP_FUZZ_SECONDS 15 CACHE STRING "seconds each fuzz test (label fuzz) fuzzes its target")
set(fp_fuzz_dir ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
foreach(t ${FP_FUZZ_TARGETS})
  add_executable(fuzz_${t}_replay ${fp_fuzz_dir}/fuzz_${t}.c ${fp_fuzz_dir}/replay.c)
  target_link_libraries(fuzz_${t}_replay PRIVATE flexplan_st flexplan_core)
  add_test(NAME fuzz_replay_${t} COMMAND fuzz_${t}_replay ${fp_fuzz_dir}/corpus/${t} ${fp_fuzz_dir}/regress/${t})
  set_tests_properties(fuzz_replay_${t} PROPERTIES TIMEOUT 300 LABELS fuzz)
endforeach()
# a path the replay cannot read is a failure, never a silent pass
add_test(NAME fuzz_replay_missing COMMAND fuzz_plan_replay ${fp_fuzz_dir}/corpus/no-such-target)
set_tests_properties(fuzz_replay_missing PROPERTIES LABELS fuzz WILL_FAIL TRUE)

# libFuzzer: does clang link a fuzzer with the sanitizers? (the project's
# compiler may be gcc, so the probe runs clang itself)
find_program(FP_CLANG NAMES clang clang-14 clang-15 clang-16 DOC "clang for the libFuzzer targets")
set(fp_fuzz_why "")
if(NOT FP_CLANG)
  set(fp_fuzz_why "clang was not found")
else()
  set(fp_probe ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe.c)
  file(WRITE ${fp_probe} "#include <stddef.h>\n#include <stdint.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(d && n > 1000); }\n")
  execute_process(COMMAND ${FP_CLANG} -fsanitize=fuzzer,address,undefined ${fp_probe} -o
                          ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe
                  RESULT_VARIABLE fp_probe_rc OUTPUT_QUIET ERROR_VARIABLE fp_probe_err)
  if(NOT fp_probe_rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" fp_probe_err "${fp_probe_err}")
    set(fp_fuzz_why "${FP_CLANG} -fsanitize=fuzzer does not link (on Debian 12: apt-get install libclang-rt-14-dev): ${fp_probe_err}")
  endif()
endif()
if(FP_SANITIZE)
  set(fp_fuzz_why "the asan preset replays the corpora (fuzz_replay_*); the default preset fuzzes")
endif()
if(fp_fuzz_why STREQUAL "")
  message(STATUS "flexplan: libFuzzer targets ON (${FP_CLANG})")
  # the sources of the components the targets link, as the main build has them
  # (a base-layer component, when there is one, first)
  set(fp_fuzz_sources "")
  foreach(c flexplan_base flexplan_ir flexplan_planner flexplan_st)
    if(TARGET ${c}_obj)
      get_target_property(s ${c}_obj SOURCES)
      list(APPEND fp_fuzz_sources ${s})
    endif()
  endforeach()
  string(REPLACE ";" "|" fp_fuzz_sources "${fp_fuzz_sources}")
  include(ExternalProject)
  ExternalProject_Add(fp_fuzz
    SOURCE_DIR ${fp_fuzz_dir}
    BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
    LIST_SEPARATOR |
    CMAKE_ARGS -DCMAKE_C_COMPILER=${FP_CLANG} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP_SOURCE_DIR=${CMAKE_SOURCE_DIR}
               -DFP_FUZZ_SOURCES=${fp_fuzz_sources} -DFP_WERROR=${FP_WERROR}
    BUILD_ALWAYS ON
    INSTALL_COMMAND ""
    USES_TERMINAL_BUILD ON)
  foreach(t ${FP_FUZZ_TARGETS})
    add_test(NAME fuzz_${t}
             COMMAND bash ${fp_fuzz_dir}/run_fuzz.sh ${CMAKE_BINARY_DIR}/fuzz/fuzz_${t} ${t} ${fp_fuzz_dir}
                     ${CMAKE_CURRENT_BINARY_DIR}/fuzz-work/${t} ${FP_FUZZ_SECONDS})
    set_tests_properties(fuzz_${t} PROPERTIES TIMEOUT 300 LABELS fuzz)
  endforeach()
else()
  message(STATUS "flexplan: libFuzzer targets OFF: ${fp_fuzz_why} (the corpora are still replayed)")
endif()
