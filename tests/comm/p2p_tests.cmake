# Point-to-point (zppSend/zppRecv, groups, tagged and any-source); included
# from CMakeLists.txt next to this file, after coll_tests.cmake (its
# zpp_coll_testlib).
zpp_test_executable(test_p2p SOURCES test_p2p.c LIBS zpp_coll_testlib zpp_launch Threads::Threads)
zpp_test(test_p2p_1 EXE test_p2p ARGS basic 1 LABELS comm TIMEOUT 120)
zpp_test(test_p2p_2 EXE test_p2p ARGS basic 2 LABELS comm TIMEOUT 200)
zpp_test(test_p2p_3_nodes_2_1 EXE test_p2p ARGS basic 3 2,1 LABELS comm TIMEOUT 300)
zpp_test(test_p2p_4_nodes_2x2 EXE test_p2p ARGS basic 4 2x2 LABELS comm TIMEOUT 300)
zpp_test(test_p2p_5 EXE test_p2p ARGS basic 5 LABELS comm TIMEOUT 300)
zpp_test(test_p2p_mismatch EXE test_p2p ARGS mismatch LABELS comm TIMEOUT 200)
zpp_test(test_p2p_args EXE test_p2p ARGS args LABELS comm TIMEOUT 60)
# A peer killed at a random moment, through shared memory and across
# emulated nodes (tcp): each trial a group exchange or an any-source receive.
zpp_test(test_p2p_deadpeer_shm EXE test_p2p ARGS deadpeer 1 6 LABELS comm TIMEOUT 200)
zpp_test(test_p2p_deadpeer_net EXE test_p2p ARGS deadpeer 2x1 6 LABELS comm TIMEOUT 200)
