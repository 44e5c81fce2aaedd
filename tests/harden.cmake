# Hardening regressions (issue 17) that are best seen at the command line:
# tests/harden_cli.sh. Defects found in one area are tested there (bad-input
# corpora, unit tests); this file holds what crosses areas.
add_test(NAME harden_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/harden_cli.sh $<TARGET_FILE:flexplan>
                                 ${CMAKE_SOURCE_DIR})
set_tests_properties(harden_cli PROPERTIES TIMEOUT 120 LABELS cli)
# the command line's options (getopt_long): --help for every command, both
# value forms for every option, did you mean, the no-spec note
add_test(NAME cli_options COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_options.sh $<TARGET_FILE:flexplan>
                                  ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_options PROPERTIES TIMEOUT 300 LABELS cli)
# issue 31: output names from the input, names printed with escapes on every
# command, NUL bytes located, long output names, SIGTERM and a full disk
# during a write, verify/print of a transfer (tests/harden31_cli.sh); the
# shim sends SIGTERM in the middle of the first write to a temporary
add_library(sigterm_write MODULE sigterm_write.c)
target_link_libraries(sigterm_write PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME harden31_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/harden31_cli.sh $<TARGET_FILE:flexplan>
                                   ${CMAKE_SOURCE_DIR} $<TARGET_FILE:sigterm_write>)
set_tests_properties(harden31_cli PROPERTIES TIMEOUT 120 LABELS cli)
