// kevlar::Permit: one permit of a semaphore, given back by release() or by its owner's end.
#include <kevlar/permit.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>

namespace kevlar {
namespace {

using SemaphorePermit = Permit<UnpairedSemaphore>;

static_assert(!std::is_copy_constructible_v<SemaphorePermit>);
static_assert(std::is_nothrow_move_constructible_v<SemaphorePermit>);
static_assert(sizeof(SemaphorePermit) == sizeof(void*));

TEST(Permit, TakesAFreePermitAndGivesItBackWhenItGoes) {
  UnpairedSemaphore sem(2);
  {
    SemaphorePermit permit;
    EXPECT_FALSE(permit.held());
    ASSERT_TRUE(permit.try_acquire(sem));
    EXPECT_TRUE(permit.held());
    EXPECT_TRUE(static_cast<bool>(permit));
    EXPECT_EQ(sem.available(), 1U);
  }
  EXPECT_EQ(sem.available(), 2U);
}

TEST(Permit, TakesNothingWhenNoneIsFree) {
  UnpairedSemaphore sem(0);
  SemaphorePermit permit;
  EXPECT_FALSE(permit.try_acquire(sem));
  EXPECT_FALSE(permit.held());
  EXPECT_EQ(sem.available(), 0U);
}

TEST(Permit, ReleaseGivesItBackOnceAndTheEndGivesNothingMore) {
  UnpairedSemaphore sem(1);
  {
    SemaphorePermit permit;
    ASSERT_TRUE(permit.try_acquire(sem));
    permit.release();
    EXPECT_FALSE(permit.held());
    EXPECT_EQ(sem.available(), 1U);
    permit.release();  // nothing held: nothing happens
    EXPECT_EQ(sem.available(), 1U);
  }
  EXPECT_EQ(sem.available(), 1U) << "the end gave back a permit already given back";
}

TEST(Permit, AdoptsAGrantedPermit) {
  UnpairedSemaphore sem(1);
  ASSERT_TRUE(sem.try_acquire());  // as a granted wait leaves it: the caller owns one
  {
    SemaphorePermit permit;
    permit.adopt(sem);
    EXPECT_TRUE(permit.held());
    EXPECT_EQ(sem.available(), 0U);
  }
  EXPECT_EQ(sem.available(), 1U);
}

TEST(Permit, AMoveHandsTheOwnershipOver) {
  UnpairedSemaphore sem(2);
  SemaphorePermit first;
  ASSERT_TRUE(first.try_acquire(sem));
  SemaphorePermit second(std::move(first));
  EXPECT_FALSE(first.held());  // NOLINT(bugprone-use-after-move): moved-from holds nothing
  EXPECT_TRUE(second.held());
  EXPECT_EQ(sem.available(), 1U);
  SemaphorePermit third;
  ASSERT_TRUE(third.try_acquire(sem));
  EXPECT_EQ(sem.available(), 0U);
  third = std::move(second);  // third's own permit goes back, second's is third's now
  EXPECT_EQ(sem.available(), 1U);
  EXPECT_TRUE(third.held());
  third.release();
  EXPECT_EQ(sem.available(), 2U);
}

}  // namespace
}  // namespace kevlar
