# Hardening regressions (issue 17) that are best seen at the command line:
# tests/harden_cli.sh. Defects found in one area are tested there (bad-input
# corpora, unit tests); this file holds what crosses areas.
add_test(NAME harden_cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/harden_cli.sh $<TARGET_FILE:flexplan>
                                 ${CMAKE_SOURCE_DIR})
set_tests_properties(harden_cli PROPERTIES TIMEOUT 120 LABELS cli)
