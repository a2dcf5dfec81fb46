# Transports, host executor and plain collectives (communicator issue, part
# B); included from CMakeLists.txt next to this file. Multi-rank tests fork
# their ranks with tools/launch.h.
add_library(zpp_coll_testlib STATIC coll_testlib.c)
target_link_libraries(zpp_coll_testlib PUBLIC zpp_static zpp_testutil)

# test_coll NRANKS [LAYOUT]: every collective, type and op, checked exactly.
function(zpp_coll_test name)
  cmake_parse_arguments(C "" "TIMEOUT" "ARGS;ENV" ${ARGN})
  if(NOT C_TIMEOUT)
    set(C_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND test_coll ${C_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "comm" TIMEOUT ${C_TIMEOUT} SKIP_RETURN_CODE 77
                                          ENVIRONMENT "${C_ENV}")
endfunction()

add_executable(test_coll test_coll.c)
target_link_libraries(test_coll PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
zpp_coll_test(test_coll_1 ARGS 1)
zpp_coll_test(test_coll_2 ARGS 2)
zpp_coll_test(test_coll_3_nodes_2_1 ARGS 3 2,1)
zpp_coll_test(test_coll_4_nodes_2x2 ARGS 4 2x2)
zpp_coll_test(test_coll_5 ARGS 5)
zpp_coll_test(test_coll_6_nodes_3x2 ARGS 6 3x2)
zpp_coll_test(test_coll_8 ARGS 8)
# Each algorithm forced, with tiny pipeline chunks (many messages, the tag's
# step field wraps) and the opposite ones.
zpp_coll_test(test_coll_5_ring_chunks ARGS 5 3,2
  ENV "ZPP_ALGO_ALLGATHER=ring;ZPP_ALGO_REDUCESCATTER=ring;ZPP_ALGO_ALLREDUCE=ring;ZPP_ALGO_BROADCAST=pipeline;ZPP_PIPELINE_CHUNK_BYTES=1024;ZPP_PIPELINE_DEPTH=3")
# (all-gather rd on 7 ranks runs Bruck; on 4, recursive doubling even for
# large blocks, and Bruck forced where auto would take recursive doubling)
zpp_coll_test(test_coll_7_small_algos ARGS 7
  ENV "ZPP_ALGO_ALLGATHER=rd;ZPP_ALGO_REDUCESCATTER=direct;ZPP_ALGO_ALLREDUCE=rd;ZPP_ALGO_BROADCAST=binomial")
zpp_coll_test(test_coll_4_small_algos ARGS 4 2x2
  ENV "ZPP_ALGO_ALLGATHER=rd;ZPP_ALGO_REDUCESCATTER=direct;ZPP_ALGO_ALLREDUCE=rd;ZPP_ALGO_BROADCAST=binomial")
zpp_coll_test(test_coll_8_bruck ARGS 8 ENV "ZPP_ALGO_ALLGATHER=bruck")
# The flat broadcast (auto inside one node, tested there by test_coll_8)
# forced across nodes and at every size, with more sends than one batch.
zpp_coll_test(test_coll_10_nodes_5x2_flat ARGS 10 5x2 ENV "ZPP_ALGO_BROADCAST=flat")
# Reduce-scatter by recursive doubling (auto only for 3 ranks that share
# cores) forced at every size, on a rank count that folds.
zpp_coll_test(test_coll_6_nodes_3x2_rd ARGS 6 3x2 ENV "ZPP_ALGO_REDUCESCATTER=rd")

# Faults and bad input: each case its own process, the times asserted inside.
add_executable(test_coll_faults test_coll_faults.c)
target_link_libraries(test_coll_faults PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
foreach(case kill stall mismatch abort args roots)
  add_test(NAME test_coll_faults_${case} COMMAND test_coll_faults ${case})
  set_tests_properties(test_coll_faults_${case} PROPERTIES LABELS "comm" TIMEOUT 120
                                                          SKIP_RETURN_CODE 77)
endforeach()
# A stress shim, not a test of its own: LD_PRELOAD it to delay every
# ucp_ep_create at random (see slow_connect.c), e.g.
#   LD_PRELOAD=build/lib/libzpp_test_slow_connect.so ctest -R faults_mismatch --repeat until-fail:40
# Not under the sanitizers, whose runtime must come first in the process.
if(ZPP_HAVE_UCX AND NOT ZPP_SANITIZE_ADDRESS AND NOT ZPP_SANITIZE_THREAD)
  add_library(zpp_test_slow_connect MODULE slow_connect.c)
  target_link_libraries(zpp_test_slow_connect PRIVATE PkgConfig::UCX ${CMAKE_DL_LIBS})
endif()

# Transport and executor: inter-node endpoints are network only, host streams.
add_executable(test_coll_transport test_coll_transport.c)
target_link_libraries(test_coll_transport PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
foreach(case net noshm stream)
  add_test(NAME test_coll_transport_${case} COMMAND test_coll_transport ${case})
  set_tests_properties(test_coll_transport_${case} PROPERTIES LABELS "comm" TIMEOUT 120
                                                              SKIP_RETURN_CODE 77)
endforeach()

zpp_add_test(test_reduce_ops SOURCES test_reduce_ops.c LABELS "comm" TIMEOUT 60)

# The adaptive busy-poll window: its rules, and two ranks sharing a core.
add_executable(test_busy_poll test_busy_poll.c)
target_link_libraries(test_busy_poll PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
add_test(NAME test_busy_poll_logic COMMAND test_busy_poll logic)
set_tests_properties(test_busy_poll_logic PROPERTIES LABELS "comm" TIMEOUT 30)
add_test(NAME test_busy_poll_shared_core COMMAND test_busy_poll shared_core)
set_tests_properties(test_busy_poll_shared_core PROPERTIES LABELS "comm;timing" TIMEOUT 120
                                                           SKIP_RETURN_CODE 77)
add_test(NAME test_busy_poll_leave_core COMMAND test_busy_poll leave_core)
set_tests_properties(test_busy_poll_leave_core PROPERTIES LABELS "comm;timing" TIMEOUT 120
                                                          SKIP_RETURN_CODE 77)

# Device buffers through NCCL: label gpu, exits 77 without a CUDA device.
if(ZPP_HAVE_NCCL)
  add_executable(test_coll_gpu test_coll_gpu.c)
  target_link_libraries(test_coll_gpu PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
  add_test(NAME test_coll_gpu COMMAND test_coll_gpu)
  set_tests_properties(test_coll_gpu PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()

# Across network namespaces with shaped links (label netns: emucluster.sh
# exits 77, skipped, without root). The rank program checks itself.
add_executable(test_coll_netns test_coll_netns.c)
target_link_libraries(test_coll_netns PRIVATE zpp_static zpp_testutil zpp_coll_testlib)
set(ZPP_EMUCLUSTER ${CMAKE_SOURCE_DIR}/perf/emucluster.sh)
add_test(NAME test_coll_netns_crossing
         COMMAND bash ${ZPP_EMUCLUSTER} -q -n 2 -l 2 -r 200mbit --no-check-rate --timeout 90
                 -- $<TARGET_FILE:test_coll_netns> crossing 200)
add_test(NAME test_coll_netns_linkdown
         COMMAND bash ${ZPP_EMUCLUSTER} -q -n 2 -l 2 --no-check-rate --no-fail-fast --timeout 90
                 --link-down 1@4+60 -- $<TARGET_FILE:test_coll_netns> linkdown 4)
set_tests_properties(test_coll_netns_crossing test_coll_netns_linkdown PROPERTIES
                     LABELS "comm;netns" TIMEOUT 150 SKIP_RETURN_CODE 77 PROCESSORS 2
                     RESOURCE_LOCK emucluster_rate)
set_tests_properties(test_coll_netns_linkdown PROPERTIES ENVIRONMENT "ZPP_TIMEOUT=5")

# zpp's own shared-memory rings for small intra-node messages (part of the
# UCX host transport: its internals are included).
if(ZPP_HAVE_UCX)
  add_executable(test_shm_rings test_shm_rings.c)
  target_link_libraries(test_shm_rings PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch
                                               PkgConfig::UCX)
  foreach(case ring order off paths queued_error wake wake_fences wake_many stale)
    add_test(NAME test_shm_rings_${case} COMMAND test_shm_rings ${case})
    set_tests_properties(test_shm_rings_${case} PROPERTIES LABELS "comm" TIMEOUT 120
                                                           SKIP_RETURN_CODE 77)
  endforeach()
  # A lost wake-up only costs time (a sleep ends within 100 ms): timed cases.
  set_tests_properties(test_shm_rings_wake test_shm_rings_wake_fences test_shm_rings_wake_many
                       PROPERTIES LABELS "comm;timing")
endif()

# A dead or stopped peer, 20 trials per size and layout (issue 19): every
# survivor errs within ZPP_TIMEOUT + a margin, the resumed rank errs too.
add_executable(test_coll_deadpeer test_coll_deadpeer.c)
target_link_libraries(test_coll_deadpeer PRIVATE zpp_static zpp_testutil zpp_coll_testlib zpp_launch)
foreach(mode kill stop)
  foreach(layout 1 2x2)
    foreach(bytes 4096 4194304)
      set(name test_coll_deadpeer_${mode}_${layout}_${bytes})
      add_test(NAME ${name} COMMAND test_coll_deadpeer ${mode} ${bytes} ${layout} 20)
      # A stop trial waits out the timeout: 1 s keeps 20 of them near a minute.
      if(mode STREQUAL "stop")
        set(timeout 1)
      else()
        set(timeout 2)
      endif()
      set_tests_properties(${name} PROPERTIES LABELS "comm" TIMEOUT 300 SKIP_RETURN_CODE 77
                                              ENVIRONMENT "ZPP_TIMEOUT=${timeout}")
    endforeach()
  endforeach()
endforeach()
