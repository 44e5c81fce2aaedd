# Python tests (label "python"): one ctest per pytest file under
# tests/python/, run by the venv's interpreter (.venv/, made by the README's
# test command from python/requirements-test.txt) against this build's
# library and CLI. Where the venv is missing or cannot import torch and
# pytest, and under the asan preset, each test exits 77: ctest reports it
# skipped, never passed (tests/python/run_pytest.sh).
#
# fp_add_pytest(NAME FILE [LABELS l...] [MPI N] [TIMEOUT s])
#   FILE    relative to tests/python/
#   MPI N   run N ranks of pytest under mpiexec (label "mpi" too)
set(FP_VENV_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
    "the Python interpreter of the Python tests (a venv with python/requirements-test.txt)")
if(FP_SANITIZE)
  set(fp_py_sanitize 1)
else()
  set(fp_py_sanitize 0)
endif()

function(fp_add_pytest name file)
  cmake_parse_arguments(PT "" "MPI;TIMEOUT" "LABELS" ${ARGN})
  set(launcher)
  set(labels python ${PT_LABELS})
  set(procs 1)
  if(PT_MPI)
    set(launcher ${FP_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${PT_MPI} ${FP_MPIEXEC_PREFLAGS})
    list(APPEND labels mpi)
    set(procs ${PT_MPI})
  endif()
  if(NOT PT_TIMEOUT)
    set(PT_TIMEOUT 600)
  endif()
  add_test(NAME ${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/python/run_pytest.sh ${FP_VENV_PYTHON} ${fp_py_sanitize}
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/${file} ${launcher}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${PT_TIMEOUT} SKIP_RETURN_CODE 77
                       PROCESSORS ${procs}
                       ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/python;FLEXPLAN_LIBRARY=$<TARGET_FILE:flexplan_shared>;FLEXPLAN_CLI=$<TARGET_FILE:flexplan>;FLEXPLAN_SOURCE_DIR=${CMAKE_SOURCE_DIR};${FP_MPI_ENV}")
endfunction()

fp_add_pytest(python_api test_api.py)
# argument errors: OverflowError / ValueError / TypeError naming the argument (issue 31)
fp_add_pytest(python_args test_args.py)
# flexplan.torch: TypeError / ValueError naming the argument (issue 29, item 7)
fp_add_pytest(python_torch_args test_torch_args.py)
fp_add_pytest(python_stream_contract test_stream_contract.py)
fp_add_pytest(python_capi_exec test_capi_exec.py MPI 1)
# the enums and defines flexplan._lib copies, against include/*.h (issue 42)
fp_add_pytest(python_enums test_enums.py)
# the public Python API annotated whole, and mypy over the package (issue 42)
fp_add_pytest(python_typing test_typing.py)
add_test(NAME python_mypy
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/python/run_mypy.sh ${FP_VENV_PYTHON} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/mypy-cache)
set_tests_properties(python_mypy PROPERTIES LABELS "python;lint" TIMEOUT 600 SKIP_RETURN_CODE 77)
fp_add_pytest(python_describe test_describe.py)
# transformers families beyond Llama, T5's default units, long sequences scaled (issue 29)
fp_add_pytest(python_describe_families test_describe_families.py TIMEOUT 300)

# flexplan.torch (docs/torch.md): each file launches its own mpiexec runs
# (tests/python/torch_mpi.py), one per rank count, many configs per run.
fp_add_pytest(python_torch_parity test_torch_parity.py LABELS mpi TIMEOUT 1500)
fp_add_pytest(python_torch_fsdp2 test_torch_fsdp2.py LABELS mpi TIMEOUT 600)
fp_add_pytest(python_torch_tp test_torch_tp.py LABELS mpi TIMEOUT 900)
fp_add_pytest(python_torch_faults test_torch_faults.py LABELS mpi TIMEOUT 300)
fp_add_pytest(python_torch_example test_torch_example.py LABELS mpi TIMEOUT 300)
fp_add_pytest(python_executor test_executor_py.py LABELS mpi TIMEOUT 300)
fp_add_pytest(python_mxfp8 test_mxfp8_py.py LABELS mpi TIMEOUT 300)
fp_add_pytest(python_torch_errors test_torch_errors.py LABELS mpi TIMEOUT 300)

fp_add_pytest(python_reshard test_reshard.py)
# placement plug-ins from Python (docs/placements.md); their torch parity is
# torch_worker.py's moe_expert_owned and mlp_block_cyclic
fp_add_pytest(python_placement test_placement.py)
# reshard transform plug-ins from Python (docs/reshard.md "Transforms"): a torch
# user transform against torch, faulty ones refused, runs under mpiexec
fp_add_pytest(python_transform test_transform.py LABELS mpi TIMEOUT 600)
# checkpoints through torch.distributed.checkpoint (issue 30): DCP round trips
# at 1-4 ranks, resume on another world size and plan, corrupt checkpoints
fp_add_pytest(python_torch_checkpoint test_torch_checkpoint.py LABELS mpi TIMEOUT 900)
# checksummed, atomic saves: kill points and corruption (issue 40)
fp_add_pytest(python_torch_ckpt_safety test_torch_ckpt_safety.py LABELS mpi TIMEOUT 1500)
# launched by torchrun (issue 38): torch.distributed on gloo, no MPI, the external
# backend over its process groups; each test launches its own torchrun runs
# (tests/python/torch_run.py: python -m torch.distributed.run --standalone
# --nproc-per-node N), as the mpirun tests launch theirs
fp_add_pytest(python_torchrun test_torchrun.py LABELS torchrun TIMEOUT 1200)

# Issue 40, item 5 under AddressSanitizer: an Executor's views after
# destroy() (tests/python/lifetime_asan.py), the venv's interpreter with the
# ASan and UBSan runtimes preloaded and this (ASan) build's library, so that
# a read or write of freed memory inside the library aborts the run. Only in
# the asan preset (the default preset's Python tests run the same checks
# with torch: torch_errors.py, "lifetimes").
if(FP_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE fp_libasan
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libubsan.so OUTPUT_VARIABLE fp_libubsan
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  add_test(NAME asan_python_lifetimes
           COMMAND sh -c "[ -x \"$1\" ] || { echo \"skipped: no Python test environment: $1\"; exit 77; }; exec \"$@\""
                   sh ${FP_VENV_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/lifetime_asan.py)
  set_tests_properties(asan_python_lifetimes PROPERTIES LABELS "python;asan" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${FP_MPI_ENV};LD_PRELOAD=${fp_libasan} ${fp_libubsan};PYTHONPATH=${CMAKE_SOURCE_DIR}/python;FLEXPLAN_LIBRARY=$<TARGET_FILE:flexplan_shared>;FLEXPLAN_SOURCE_DIR=${CMAKE_SOURCE_DIR};ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
  # (the interpreter's own allocations live to exit: leaks are not this test's question)
endif()
