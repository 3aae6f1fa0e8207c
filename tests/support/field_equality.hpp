// A check that every field of a value type takes part in its operator==.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace kevlar::test {

/// Checks that `base` equals a copy of itself and that each of `changes`, applied to a copy, makes
/// the copy compare unequal to `base` both ways: a defaulted == that lost a field fails here.
template <class T>
void expect_every_field_compared(const T& base, const std::vector<void (*)(T&)>& changes) {
  const T same = base;
  EXPECT_TRUE(same == base);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    T changed = base;
    changes[i](changed);
    EXPECT_FALSE(changed == base) << "change " << i << " is not seen by ==";
    EXPECT_FALSE(base == changed) << "change " << i << " is not seen by == (reversed)";
  }
}

}  // namespace kevlar::test
