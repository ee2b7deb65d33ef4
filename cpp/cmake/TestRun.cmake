# For CTest scripts (cmake -P): run(WHAT COMMAND...) runs the command, fails the script with its
# output when it exits non-zero, and leaves its stdout in `last_output` in the caller's scope.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
