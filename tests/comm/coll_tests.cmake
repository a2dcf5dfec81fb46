# Transports, host executor and plain collectives (communicator issue, part
# B); included from CMakeLists.txt next to this file. Multi-rank tests fork
# their ranks with perf/common/launch.h.
add_library(zpp_coll_testlib STATIC coll_testlib.c)
target_link_libraries(zpp_coll_testlib PUBLIC zpp_static zpp_testutil)

# test_coll NRANKS [LAYOUT]: every collective, type and op, checked exactly.
zpp_test_executable(test_coll SOURCES test_coll.c LIBS zpp_coll_testlib zpp_launch)
macro(zpp_coll_test name)
  zpp_test(${name} EXE test_coll LABELS comm TIMEOUT 300 ${ARGN})
endmacro()
zpp_coll_test(test_coll_1 ARGS 1)
zpp_coll_test(test_coll_2 ARGS 2)
zpp_coll_test(test_coll_3_nodes_2_1 ARGS 3 2,1)
zpp_coll_test(test_coll_4_nodes_2x2 ARGS 4 2x2)
zpp_coll_test(test_coll_5 ARGS 5)
zpp_coll_test(test_coll_6_nodes_3x2 ARGS 6 3x2)
zpp_coll_test(test_coll_8 ARGS 8)
# Ranks on nodes in turn and shuffled: the node-ordered rings and the
# hierarchical paths follow the topology, not rank numbers.
zpp_coll_test(test_coll_4_nodes_2x2_cyclic ARGS 4 2x2/cyclic)
zpp_coll_test(test_coll_6_nodes_2x3_cyclic ARGS 6 2x3/cyclic)
zpp_coll_test(test_coll_6_nodes_3x2_shuffled ARGS 6 3x2/shuffle:1)
# Each algorithm forced, with tiny pipeline chunks (many messages, the tag's
# step field wraps) and the opposite ones.
zpp_coll_test(test_coll_5_ring_chunks ARGS 5 3,2
  ENV "ZPP_ALGO_ALLGATHER=ring;ZPP_ALGO_REDUCESCATTER=ring;ZPP_ALGO_ALLREDUCE=ring;ZPP_ALGO_BROADCAST=pipeline;ZPP_ALGO_REDUCE=rsg;ZPP_PIPELINE_CHUNK_BYTES=1024;ZPP_PIPELINE_DEPTH=3")
# (all-gather rd on 7 ranks runs Bruck; on 4, recursive doubling even for
# large blocks, and Bruck forced where auto would take recursive doubling)
zpp_coll_test(test_coll_7_small_algos ARGS 7
  ENV "ZPP_ALGO_ALLGATHER=rd;ZPP_ALGO_REDUCESCATTER=direct;ZPP_ALGO_ALLREDUCE=rd;ZPP_ALGO_BROADCAST=binomial;ZPP_ALGO_REDUCE=binomial")
zpp_coll_test(test_coll_4_small_algos ARGS 4 2x2
  ENV "ZPP_ALGO_ALLGATHER=rd;ZPP_ALGO_REDUCESCATTER=direct;ZPP_ALGO_ALLREDUCE=rd;ZPP_ALGO_BROADCAST=binomial;ZPP_ALGO_REDUCE=binomial")
zpp_coll_test(test_coll_8_bruck ARGS 8 ENV "ZPP_ALGO_ALLGATHER=bruck")
# The flat broadcast (auto inside one node, tested there by test_coll_8)
# forced across nodes and at every size, with more sends than one batch.
zpp_coll_test(test_coll_10_nodes_5x2_flat ARGS 10 5x2 ENV "ZPP_ALGO_BROADCAST=flat")
# Reduce-scatter by recursive doubling (auto only for 3 ranks that share
# cores) forced at every size, on a rank count that folds.
zpp_coll_test(test_coll_6_nodes_3x2_rd ARGS 6 3x2 ENV "ZPP_ALGO_REDUCESCATTER=rd")

# Faults and bad input: each case its own process, the times asserted inside.
zpp_test_executable(test_coll_faults SOURCES test_coll_faults.c LIBS zpp_coll_testlib zpp_launch)
foreach(case kill stall mismatch abort leave revoke args roots vcounts)
  zpp_test(test_coll_faults_${case} EXE test_coll_faults ARGS ${case} LABELS comm TIMEOUT 300)
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
zpp_test_executable(test_coll_transport SOURCES test_coll_transport.c
                    LIBS zpp_coll_testlib zpp_launch)
foreach(case net noshm stream)
  zpp_test(test_coll_transport_${case} EXE test_coll_transport ARGS ${case} LABELS comm)
endforeach()

zpp_test(test_reduce_ops SOURCES test_reduce_ops.c LABELS "comm" TIMEOUT 60)
zpp_test(test_scratch_pool SOURCES test_scratch_pool.c LABELS "comm" TIMEOUT 30)

# The adaptive busy-poll window: its rules, and two ranks sharing a core.
zpp_test_executable(test_busy_poll SOURCES test_busy_poll.c LIBS zpp_coll_testlib zpp_launch)
zpp_test(test_busy_poll_logic EXE test_busy_poll ARGS logic LABELS comm TIMEOUT 30)
zpp_test(test_busy_poll_shared_core EXE test_busy_poll ARGS shared_core LABELS comm timing)
zpp_test(test_busy_poll_leave_core EXE test_busy_poll ARGS leave_core LABELS comm timing)

# Device buffers through NCCL: label gpu, exits 77 without a CUDA device.
if(ZPP_HAVE_NCCL)
  zpp_test(test_coll_gpu SOURCES test_coll_gpu.c LIBS zpp_coll_testlib zpp_launch LABELS gpu
           TIMEOUT 600)
endif()

# Across network namespaces with shaped links (label netns: emucluster.sh
# exits 77, skipped, without root). The rank program checks itself.
zpp_test_executable(test_coll_netns SOURCES test_coll_netns.c LIBS zpp_coll_testlib)
zpp_test(test_coll_netns_crossing
         COMMAND bash ${ZPP_EMUCLUSTER} -q -n 2 -l 2 -r 200mbit --no-check-rate --timeout 90
                 -- $<TARGET_FILE:test_coll_netns> crossing 200
         LABELS comm netns TIMEOUT 150 PROCESSORS 2 LOCK emucluster_rate)
zpp_test(test_coll_netns_linkdown
         COMMAND bash ${ZPP_EMUCLUSTER} -q -n 2 -l 2 --no-check-rate --no-fail-fast --timeout 90
                 --link-down 1@4+60 -- $<TARGET_FILE:test_coll_netns> linkdown 4
         LABELS comm netns TIMEOUT 150 PROCESSORS 2 LOCK emucluster_rate ENV ZPP_TIMEOUT=5)

# zpp's own shared-memory rings for small intra-node messages (part of the
# UCX host transport: its internals are included).
if(ZPP_HAVE_UCX)
  zpp_test_executable(test_shm_rings SOURCES test_shm_rings.c
                      LIBS zpp_coll_testlib zpp_launch PkgConfig::UCX)
  foreach(case ring order off paths queued_error stale)
    zpp_test(test_shm_rings_${case} EXE test_shm_rings ARGS ${case} LABELS comm)
  endforeach()
  # A lost wake-up only costs time (a sleep ends within 100 ms): timed cases.
  foreach(case wake wake_fences wake_many)
    zpp_test(test_shm_rings_${case} EXE test_shm_rings ARGS ${case} LABELS comm timing)
  endforeach()
endif()

# A dead or stopped peer, 20 trials per size and layout (issue 19): every
# survivor errs within ZPP_TIMEOUT + a margin, the resumed rank errs too.
# All of them run in the test command; the ASan leg of CI runs the ones on
# interleaved nodes (where ASan found a write into freed memory), one on a
# single node (shm) and one stopped-rank case, and leaves the rest (label
# sanitized_long: 15 tests, 333 s of test time under ASan) to its longer suite:
# ZPP_SANITIZED_LONG=1 bash scripts/test-sanitized.sh.
zpp_test_executable(test_coll_deadpeer SOURCES test_coll_deadpeer.c LIBS zpp_coll_testlib zpp_launch)
set(deadpeer_sanitized kill_1_4096 kill_2x2_cyclic_4194304 stop_2x2_4096)
# Also with ranks placed on the nodes in turn (the victim, rank 3, shares its
# node with rank 1), at 4 MiB, where the UCX abort was seen.
foreach(mode kill stop)
  foreach(layout 1 2x2 2x2/cyclic)
    foreach(bytes 4096 4194304)
      if(layout STREQUAL "2x2/cyclic" AND bytes EQUAL 4096)
        continue()
      endif()
      # A stop trial waits out the timeout (1 s) and more: 10 of them, where a kill
      # trial, over in milliseconds, runs 20 (CI time: 20 stops took 50-72 s).
      if(mode STREQUAL "stop")
        set(timeout 1)
        set(trials 10)
      else()
        set(timeout 2)
        set(trials 20)
      endif()
      string(REPLACE "/" "_" tag ${layout})
      set(labels comm)
      if(NOT "${mode}_${tag}_${bytes}" IN_LIST deadpeer_sanitized)
        list(APPEND labels sanitized_long)
      endif()
      zpp_test(test_coll_deadpeer_${mode}_${tag}_${bytes} EXE test_coll_deadpeer
               ARGS ${mode} ${bytes} ${layout} ${trials} LABELS ${labels} TIMEOUT 300
               ENV ZPP_TIMEOUT=${timeout})
    endforeach()
  endforeach()
endforeach()
# The same for the rooted collectives and all-to-all-v (roots rotate, so the
# victim is a root in one call of four), killed, 10 trials each.
foreach(coll reduce gather scatter alltoallv)
  foreach(bytes 4096 4194304)
    zpp_test(test_coll_deadpeer_kill_2x2_${bytes}_${coll} EXE test_coll_deadpeer
             ARGS kill ${bytes} 2x2 10 ${coll} LABELS comm sanitized_long TIMEOUT 300 ENV ZPP_TIMEOUT=2)
  endforeach()
  # Ranks on the nodes in turn too: a survivor that wrote a ring message into
  # freed memory crashed in 4 of 120 trials (ASan) before bb4e64b.
  zpp_test(test_coll_deadpeer_kill_2x2_cyclic_4194304_${coll} EXE test_coll_deadpeer
           ARGS kill 4194304 2x2/cyclic 10 ${coll} LABELS comm TIMEOUT 300 ENV ZPP_TIMEOUT=2)
endforeach()

# zppCommSplit: colors, keys, NOCOLOR, splits of splits, collectives on the
# new communicators, bad colors, destroy order; ranks on nodes in turn.
zpp_test_executable(test_comm_split SOURCES test_comm_split.c LIBS zpp_launch)
foreach(args "6;3x2" "5;3,2" "4;2x2/cyclic" "1")
  string(REPLACE ";" "_" tag "${args}")
  string(REPLACE "/" "_" tag "${tag}")
  string(REPLACE "," "_" tag "${tag}")
  zpp_test(test_comm_split_${tag} EXE test_comm_split ARGS ${args} LABELS comm TIMEOUT 120)
endforeach()

# zppCommShrink: survivors of a dead, a hung rank; disagreeing lists; bad arguments.
zpp_test_executable(test_comm_shrink SOURCES test_comm_shrink.c comm_exercise.c LIBS zpp_launch)
foreach(case hung disagree args)
  zpp_test(test_comm_shrink_${case} EXE test_comm_shrink ARGS ${case} LABELS comm TIMEOUT 120)
endforeach()
# Five trials each, on contiguous and on interleaved nodes (there the rank that sees the death first
# may have no endpoint to some survivor, whose error notice must come through another); about 1 s
# per trial. test_comm_lost_node below repeats kill, shrink and grow 96 times more, interleaved
# nodes included.
zpp_test(test_comm_shrink_dead EXE test_comm_shrink ARGS dead 2x2 5 LABELS comm TIMEOUT 120)
zpp_test(test_comm_shrink_dead_cyclic EXE test_comm_shrink ARGS dead 2x2/cyclic 5 LABELS comm
         TIMEOUT 120)

# zppCommGrow: a lost rank replaced by a new process after a shrink, then one more newcomer, five
# trials each on contiguous and on interleaved nodes (and test_comm_lost_node's grows below); bad use
# failing on every member alike.
zpp_test_executable(test_comm_grow SOURCES test_comm_grow.c comm_exercise.c LIBS zpp_launch)
zpp_test(test_comm_grow_replace EXE test_comm_grow ARGS replace 5 LABELS comm TIMEOUT 120)
zpp_test(test_comm_grow_replace_cyclic EXE test_comm_grow ARGS replace 5 cyclic LABELS comm
         TIMEOUT 120)
zpp_test(test_comm_grow_bad EXE test_comm_grow ARGS bad LABELS comm TIMEOUT 120)

# A lost node during every kind of call (issue 44's matrix): SIGKILL, SIGSTOP (found by a 2 s
# timeout), and two failures in a row, each shrunk and grown back, on 2x2, 3x2 and 4x1; one trial
# per call and size here (a 1-in-5 failure shows in 12 trials 19 times in 20; by hand: 20 trials per
# case, docs/fault-tolerance.md).
zpp_test_executable(test_comm_lost_node SOURCES test_comm_lost_node.c comm_exercise.c LIBS zpp_launch)
# Under the sanitizers only 2x2 kill: the others take the same paths (and CI's time is short).
# 3x2 twice is where a survivor may learn of the second failure only at its 20 s timeout (about
# once in 250 trials): its shrink then takes 21 s, and must succeed (docs/fault-tolerance.md).
# By hand, not here: 4x1 twice and the stop mode (a hung node; test_coll_deadpeer stop and
# test_comm_shrink_hung take those paths in CI).
foreach(args "2x2;kill;12" "2x2/cyclic;kill;12" "3x2;kill;12" "4x1;kill;12" "2x2;twice;12" "3x2;twice;12")
  string(REPLACE ";" "_" tag "${args}")
  string(REPLACE "/" "_" tag "${tag}")
  set(labels comm)
  if(NOT tag STREQUAL "2x2_kill_12")
    list(APPEND labels sanitized_long)
  endif()
  zpp_test(test_comm_lost_node_${tag} EXE test_comm_lost_node ARGS ${args} LABELS ${labels} TIMEOUT 180)
endforeach()

# Non-blocking creation (config.blocking = 0): ready after a wait, with split and shrink; a
# creation that cannot finish ended by abort, destroy, revoke, or its timeout.
zpp_test_executable(test_comm_nonblocking SOURCES test_comm_nonblocking.c comm_exercise.c
                    LIBS zpp_launch)
foreach(case ready pending)
  zpp_test(test_comm_nonblocking_${case} EXE test_comm_nonblocking ARGS ${case} LABELS comm
           TIMEOUT 120)
endforeach()
