/*
 * zpp-perf's bandwidth arithmetic against cases computed by hand from the
 * nccl-tests definitions (DESIGN.md, "How we measure").
 */
#include <math.h>
#include <string.h>

#include "perf_math.h"
#include "testutil.h"

#define CHECK_NEAR(a, b)                                                                        \
  do {                                                                                          \
    double a_ = (a), b_ = (b);                                                                  \
    CHECK_MSG(fabs(a_ - b_) <= 1e-12 * fabs(b_) + 1e-15, "%s = %.17g, want %.17g", #a, a_, b_); \
  } while (0)

static void checkCounts(zppPerfColl_t coll, size_t size, size_t tsize, int n, size_t api, size_t total,
                        size_t bytes, size_t send, size_t recv) {
  zppPerfCounts_t c;
  CHECK_EQ_INT(zppPerfCounts(coll, size, tsize, n, &c), 0);
  CHECK_EQ_INT(c.apiCount, api);
  CHECK_EQ_INT(c.totalCount, total);
  CHECK_EQ_INT(c.bytes, bytes);
  CHECK_EQ_INT(c.sendCount, send);
  CHECK_EQ_INT(c.recvCount, recv);
}

static void testCounts(void) {
  /* 1 MiB of float on 4 ranks: each rank's block is 1 MiB / 4 / 4 B. */
  checkCounts(ZPP_PERF_ALLGATHER, 1048576, 4, 4, 65536, 262144, 1048576, 65536, 262144);
  checkCounts(ZPP_PERF_REDUCESCATTER, 1048576, 4, 4, 65536, 262144, 1048576, 262144, 65536);
  checkCounts(ZPP_PERF_ALLTOALL, 1048576, 4, 4, 65536, 262144, 1048576, 262144, 262144);
  /* 1000 B of float on 3 ranks: 250 elements, 83 per rank, 249 in all. */
  checkCounts(ZPP_PERF_ALLGATHER, 1000, 4, 3, 83, 249, 996, 83, 249);
  checkCounts(ZPP_PERF_REDUCESCATTER, 1000, 4, 3, 83, 249, 996, 249, 83);
  checkCounts(ZPP_PERF_ALLTOALL, 1000, 4, 3, 83, 249, 996, 249, 249);
  /* all-reduce and broadcast count the buffer once, whatever the ranks. */
  checkCounts(ZPP_PERF_ALLREDUCE, 1001, 4, 3, 250, 250, 1000, 250, 250);
  checkCounts(ZPP_PERF_BROADCAST, 6, 2, 8, 3, 3, 6, 3, 3);
  /* 8 B of float on 4 ranks is less than one element each: skipped. */
  checkCounts(ZPP_PERF_ALLGATHER, 8, 4, 4, 0, 0, 0, 0, 0);
  zppPerfCounts_t c;
  CHECK_EQ_INT(zppPerfCounts(ZPP_PERF_ALLGATHER, 64, 0, 4, &c), -1);
  CHECK_EQ_INT(zppPerfCounts(ZPP_PERF_ALLGATHER, 64, 4, 0, &c), -1);
  CHECK_EQ_INT(zppPerfCounts((zppPerfColl_t)99, 64, 4, 2, &c), -1);
}

static void testBandwidth(void) {
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_ALLGATHER, 4), 0.75);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_REDUCESCATTER, 8), 0.875);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_ALLTOALL, 2), 0.5);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_ALLREDUCE, 4), 1.5);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_BROADCAST, 4), 1.0);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_ALLGATHER, 1), 0.0);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_ALLREDUCE, 1), 0.0);
  CHECK_NEAR(zppPerfBusFactor(ZPP_PERF_BROADCAST, 1), 1.0);

  CHECK_NEAR(zppPerfAlgBw(1000000000, 1.0), 1.0);
  CHECK_NEAR(zppPerfAlgBw(1048576, 1e-3), 1.048576);
  CHECK_NEAR(zppPerfAlgBw(1048576, 0.0), 0.0);
  /* 128 MiB all-reduce on 8 ranks in 1 ms: algbw 134.217728 GB/s, busbw
   * 7/4 of it. */
  CHECK_NEAR(zppPerfAlgBw(134217728, 1e-3), 134.217728);
  CHECK_NEAR(zppPerfBusBw(ZPP_PERF_ALLREDUCE, 8, 134217728, 1e-3), 234.881024);
  /* 64 MiB bf16 all-gather on 2x2 ranks in 0.5 s: 0.134217728 GB/s, 3/4 of it. */
  CHECK_NEAR(zppPerfBusBw(ZPP_PERF_ALLGATHER, 4, 67108864, 0.5), 0.100663296);
  CHECK_NEAR(zppPerfBusBw(ZPP_PERF_BROADCAST, 4, 4000, 2e-6), 2.0);
}

static void testSizeSeq(void) {
  size_t s[32];
  CHECK_EQ_INT(zppPerfSizeSeq(8, 1048576, 0, 4.0, s, 32), 9);
  CHECK_EQ_INT(s[0], 8);
  CHECK_EQ_INT(s[1], 32);
  CHECK_EQ_INT(s[8], 524288);
  CHECK_EQ_INT(zppPerfSizeSeq(1 << 20, 4 << 20, 1 << 20, 1.0, s, 32), 4);
  CHECK_EQ_INT(s[3], 4 << 20);
  CHECK_EQ_INT(zppPerfSizeSeq(32 << 20, 32 << 20, 1 << 20, 1.0, s, 32), 1);
  CHECK_EQ_INT(zppPerfSizeSeq(8, 64 << 20, 0, 2.0, NULL, 0), 24); /* 2^3 .. 2^26 */
  /* A factor that cannot move a small size still steps by at least 1. */
  CHECK_EQ_INT(zppPerfSizeSeq(1, 10, 0, 1.5, s, 32), 6);
  CHECK_EQ_INT(s[1], 2);
  CHECK_EQ_INT(s[5], 9);
  CHECK_EQ_INT(zppPerfSizeSeq(5, 4, 1, 1.0, s, 32), -1);
  CHECK_EQ_INT(zppPerfSizeSeq(0, 4, 1, 1.0, s, 32), -1);
  CHECK_EQ_INT(zppPerfSizeSeq(1, 4, 0, 1.0, s, 32), -1);
  /* cap limits what is written, not what is counted */
  CHECK_EQ_INT(zppPerfSizeSeq(1, 100, 1, 1.0, s, 3), 100);
}

static void testParseSize(void) {
  size_t b = 0;
  CHECK(zppPerfParseSize("32M", &b) == 0 && b == 33554432);
  CHECK(zppPerfParseSize("1G", &b) == 0 && b == 1073741824);
  CHECK(zppPerfParseSize("4096", &b) == 0 && b == 4096);
  CHECK(zppPerfParseSize("64KiB", &b) == 0 && b == 65536);
  CHECK(zppPerfParseSize("1kb", &b) == 0 && b == 1024);
  CHECK(zppPerfParseSize("7B", &b) == 0 && b == 7);
  b = 5;
  CHECK(zppPerfParseSize("-1", &b) == -1 && b == 5);
  CHECK(zppPerfParseSize("", &b) == -1);
  CHECK(zppPerfParseSize("M", &b) == -1);
  CHECK(zppPerfParseSize("12x", &b) == -1);
  CHECK(zppPerfParseSize("1MM", &b) == -1);
  CHECK(zppPerfParseSize("99999999999999999999", &b) == -1);
  CHECK(zppPerfParseSize("17179869184G", &b) == -1); /* 2^34 GiB overflows */
}

static void testStats(void) {
  double a[] = {3, 1, 2};
  CHECK_NEAR(zppPerfMedian(a, 3), 2.0);
  double b[] = {4, 1, 3, 2};
  CHECK_NEAR(zppPerfMedian(b, 4), 2.5);
  double c[] = {10, 1, 1, 1, 1};
  CHECK_NEAR(zppPerfMedian(c, 5), 1.0); /* one slow iteration does not move it */
  CHECK_NEAR(zppPerfMean(c, 5), 2.8);
  CHECK_NEAR(zppPerfMedian(c, 0), 0.0);
  char buf[32];
  zppPerfFormatSize(1048576, buf, sizeof buf);
  CHECK(strcmp(buf, "1 MiB") == 0);
  zppPerfFormatSize(512, buf, sizeof buf);
  CHECK(strcmp(buf, "512 B") == 0);
  zppPerfFormatSize(1536, buf, sizeof buf);
  CHECK(strcmp(buf, "1.5 KiB") == 0);
}

int main(void) {
  testCounts();
  testBandwidth();
  testSizeSeq();
  testParseSize();
  testStats();
  return zppTestExit("test_perf_math");
}
