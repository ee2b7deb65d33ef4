// Which timed GEMM candidate an engine keeps (backends/cuda/tuning.h): CUDA-free, so it runs here.
#include <gtest/gtest.h>

#include "backends/cuda/tuning.h"

using tensoracle::cuda::choose_timed;
using tensoracle::cuda::median_of;

TEST(Tuning, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({7}), 7);
}

TEST(Tuning, AClearlyFasterCandidateReplacesTheFirstChoice) {
  // Candidate 2's median (90) is 10% below candidate 0's (100).
  EXPECT_EQ(choose_timed({{100, 101, 99}, {95, 97, 96}, {90, 91, 89}}, 0.02), 2);
}

TEST(Tuning, TheFirstChoiceStaysWithinTheMargin) {
  // Candidate 1 is 1% faster by its median: noise, not a win.
  EXPECT_EQ(choose_timed({{100, 100, 100}, {99, 99, 99}}, 0.02), 0);
  // Without a margin the lowest median wins.
  EXPECT_EQ(choose_timed({{100, 100, 100}, {99, 99, 99}}, 0), 1);
}

TEST(Tuning, OneLuckyRoundDoesNotWin) {
  // Candidate 1 ran once very fast and otherwise slower than candidate 0: the median decides.
  EXPECT_EQ(choose_timed({{100, 101, 100, 102, 100}, {70, 110, 111, 109, 112}}, 0.02), 0);
}

TEST(Tuning, FailedCandidatesAreNeverChosen) {
  EXPECT_EQ(choose_timed({{}, {120, 121, 119}, {110, 111, 112}}, 0.02), 2);  // the first choice failed
  EXPECT_EQ(choose_timed({{100, 100}, {}, {}}, 0.02), 0);
  EXPECT_EQ(choose_timed({{}, {}}, 0.02), -1);
  EXPECT_EQ(choose_timed({}, 0.02), -1);
}
