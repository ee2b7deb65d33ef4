# cmake -DEXE=program -DDIR=folder -P RunInFreshDir.cmake: runs EXE in an empty DIR (removed
# and made again first), so that a test never sees files of an earlier run; fails with EXE.
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
execute_process(COMMAND "${EXE}" WORKING_DIRECTORY "${DIR}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXE} exited with ${status}")
endif()
