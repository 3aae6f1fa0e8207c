// detail::IntrusiveList, the list behind the semaphore's wait queue, the deadline queue and the
// trampoline, an execution's attempts and the partition cache's LRU: order, pushing at both ends,
// unlinking from every position, splicing, links cleared on the way out, a node in two lists
// through two hooks, and a randomized run against std::list.
#include <kevlar/detail/intrusive_list.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <list>
#include <random>
#include <vector>

namespace kevlar::detail {
namespace {

struct Item : IntrusiveListHook<Item> {
  explicit Item(int v = 0) : value(v) {}
  int value;
};

using List = IntrusiveList<Item>;

/// The values from front to back, walking `next`; checks the `prev` links and back() on the way.
std::vector<int> values(const List& list) {
  std::vector<int> out;
  const Item* before = nullptr;
  for (const Item* i = list.front(); i != nullptr; i = List::next(i)) {
    EXPECT_EQ(List::prev(i), before);
    out.push_back(i->value);
    before = i;
  }
  EXPECT_EQ(list.back(), before);
  EXPECT_EQ(list.empty(), out.empty());
  return out;
}

bool unlinked(const Item& i) {
  return List::next(&i) == nullptr && List::prev(&i) == nullptr;
}

TEST(IntrusiveList, AnEmptyListHasNoEnds) {
  List list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.front(), nullptr);
  EXPECT_EQ(list.back(), nullptr);
  EXPECT_EQ(list.pop_front(), nullptr);
}

TEST(IntrusiveList, PopFrontReturnsNodesInPushOrderWithTheirLinksCleared) {
  std::array<Item, 3> items{Item(1), Item(2), Item(3)};
  List list;
  for (Item& i : items) list.push_back(&i);
  EXPECT_EQ(values(list), (std::vector<int>{1, 2, 3}));
  for (Item& i : items) {
    EXPECT_EQ(list.pop_front(), &i);
    EXPECT_TRUE(unlinked(i));
  }
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.back(), nullptr);
}

TEST(IntrusiveList, UnlinkTakesANodeFromAnyPosition) {
  for (int victim = 1; victim <= 3; ++victim) {
    std::array<Item, 3> items{Item(1), Item(2), Item(3)};
    List list;
    for (Item& i : items) list.push_back(&i);
    list.unlink(&items[static_cast<std::size_t>(victim - 1)]);
    EXPECT_TRUE(unlinked(items[static_cast<std::size_t>(victim - 1)]));
    std::vector<int> expected{1, 2, 3};
    expected.erase(expected.begin() + (victim - 1));
    EXPECT_EQ(values(list), expected) << "victim " << victim;
  }
  Item only(7);
  List list;
  list.push_back(&only);
  list.unlink(&only);
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.back(), nullptr);
  EXPECT_TRUE(unlinked(only));
}

TEST(IntrusiveList, AnUnlinkedNodeCanBeLinkedAgain) {
  Item a(1);
  Item b(2);
  List list;
  list.push_back(&a);
  list.push_back(&b);
  list.unlink(&a);
  list.push_back(&a);
  EXPECT_EQ(values(list), (std::vector<int>{2, 1}));
  EXPECT_EQ(list.pop_front(), &b);
  list.push_back(&b);
  EXPECT_EQ(values(list), (std::vector<int>{1, 2}));
}

TEST(IntrusiveList, InsertBeforePlacesANodeAtTheFrontInTheMiddleOrAtTheBack) {
  std::array<Item, 5> items{Item(1), Item(2), Item(3), Item(4), Item(5)};
  List list;
  list.insert_before(nullptr, &items[2]);       // into an empty list: 3
  list.insert_before(list.front(), &items[0]);  // front: 1 3
  list.insert_before(nullptr, &items[4]);       // back: 1 3 5
  list.insert_before(&items[2], &items[1]);     // middle: 1 2 3 5
  list.insert_before(&items[4], &items[3]);     // before the back: 1 2 3 4 5
  EXPECT_EQ(values(list), (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(IntrusiveList, SpliceBackMovesEveryNodeInOrderAndEmptiesTheSource) {
  std::array<Item, 4> items{Item(1), Item(2), Item(3), Item(4)};
  List a;
  List b;
  a.splice_back(b);  // both empty
  EXPECT_TRUE(a.empty());
  b.push_back(&items[0]);
  b.push_back(&items[1]);
  a.splice_back(b);  // into an empty list
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.back(), nullptr);
  EXPECT_EQ(values(a), (std::vector<int>{1, 2}));
  b.push_back(&items[2]);
  b.push_back(&items[3]);
  a.splice_back(b);  // onto a non-empty list
  EXPECT_EQ(values(a), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(b.empty());
  a.splice_back(b);  // from an empty list
  EXPECT_EQ(values(a), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(a.contains(&items[3]));
  EXPECT_FALSE(b.contains(&items[3]));
}

// The semaphore's waiter operation is both a waiter (in the wait queue) and a trampoline job (in
// a trampoline level): one node, two hooks, two lists at once.
struct Waiter : IntrusiveListHook<Waiter> {};
struct Job : IntrusiveListHook<Job> {};
struct Operation : Waiter, Job {
  explicit Operation(int v) : value(v) {}
  int value;
};

TEST(IntrusiveList, PushFrontPutsANodeBeforeEveryOther) {
  Item a(1);
  Item b(2);
  Item c(3);
  List list;
  list.push_front(&b);
  EXPECT_EQ(values(list), (std::vector<int>{2}));
  list.push_back(&c);
  list.push_front(&a);
  EXPECT_EQ(values(list), (std::vector<int>{1, 2, 3}));
  list.unlink(&a);
  list.push_front(&a);
  EXPECT_EQ(values(list), (std::vector<int>{1, 2, 3})) << "the front again after an unlink";
}

TEST(IntrusiveList, ForgetAllEmptiesTheListWithoutTouchingItsNodes) {
  Item a(1);
  Item b(2);
  List list;
  list.push_back(&a);
  list.push_back(&b);
  list.forget_all();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.back(), nullptr);
  EXPECT_EQ(List::next(&a), &b) << "the nodes keep their links: their container ends them";
}

TEST(IntrusiveList, ANodeWithTwoHooksIsInTwoListsIndependently) {
  std::array<Operation, 3> ops{Operation(1), Operation(2), Operation(3)};
  IntrusiveList<Waiter> waiters;
  IntrusiveList<Job> jobs;
  for (Operation& op : ops) waiters.push_back(&op);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) jobs.push_back(&*it);
  waiters.unlink(&ops[1]);
  EXPECT_TRUE(jobs.contains(&ops[1]));
  EXPECT_EQ(static_cast<Operation*>(waiters.pop_front())->value, 1);
  EXPECT_EQ(static_cast<Operation*>(waiters.pop_front())->value, 3);
  EXPECT_EQ(static_cast<Operation*>(jobs.pop_front())->value, 3);
  EXPECT_EQ(static_cast<Operation*>(jobs.pop_front())->value, 2);
  EXPECT_EQ(static_cast<Operation*>(jobs.pop_front())->value, 1);
}

// Random operations on a pool of nodes, mirrored on std::list: after every step the two hold the
// same values in the same order.
TEST(IntrusiveList, RandomOperationsMatchStdList) {
  constexpr int pool_size = 12;
  std::vector<Item> pool;
  pool.reserve(pool_size);
  for (int v = 0; v < pool_size; ++v) pool.emplace_back(v);
  List list;
  List other;
  std::list<int> model;
  std::list<int> other_model;
  std::vector<bool> in_list(pool_size, false);
  std::vector<bool> in_other(pool_size, false);
  std::mt19937 rng(12345);
  const auto pick = [&](const std::vector<bool>& where, bool want) -> int {
    std::vector<int> candidates;
    for (int v = 0; v < pool_size; ++v) {
      if (where[static_cast<std::size_t>(v)] == want &&
          !(want == false && in_other[static_cast<std::size_t>(v)])) {
        candidates.push_back(v);
      }
    }
    if (candidates.empty()) return -1;
    return candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(rng)];
  };
  const auto node = [&](int v) { return &pool[static_cast<std::size_t>(v)]; };
  const auto unlink_from_list = [&](int v) {
    list.unlink(node(v));
    model.remove(v);
    in_list[static_cast<std::size_t>(v)] = false;
  };
  for (int step = 0; step < 20000; ++step) {
    switch (std::uniform_int_distribution<int>(0, 6)(rng)) {
      case 6: {  // push_front
        const int v = pick(in_list, false);
        if (v < 0) break;
        list.push_front(node(v));
        model.push_front(v);
        in_list[static_cast<std::size_t>(v)] = true;
        break;
      }
      case 0: {  // push_back
        const int v = pick(in_list, false);
        if (v < 0) break;
        list.push_back(node(v));
        model.push_back(v);
        in_list[static_cast<std::size_t>(v)] = true;
        break;
      }
      case 1: {  // pop_front
        Item* i = list.pop_front();
        if (model.empty()) {
          ASSERT_EQ(i, nullptr);
          break;
        }
        ASSERT_NE(i, nullptr);
        ASSERT_EQ(i->value, model.front());
        ASSERT_TRUE(unlinked(*i));
        model.pop_front();
        in_list[static_cast<std::size_t>(i->value)] = false;
        break;
      }
      case 2: {  // unlink
        const int v = pick(in_list, true);
        if (v >= 0) unlink_from_list(v);
        break;
      }
      case 3: {  // insert_before a random member (or the back)
        const int v = pick(in_list, false);
        if (v < 0) break;
        const int pos =
            std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? -1 : pick(in_list, true);
        Item* at = pos < 0 ? nullptr : node(pos);
        list.insert_before(at, node(v));
        model.insert(pos < 0 ? model.end() : std::find(model.begin(), model.end(), pos), v);
        in_list[static_cast<std::size_t>(v)] = true;
        break;
      }
      case 4: {  // move a node to the other list
        const int v = pick(in_list, true);
        if (v < 0) break;
        unlink_from_list(v);
        other.push_back(node(v));
        other_model.push_back(v);
        in_other[static_cast<std::size_t>(v)] = true;
        break;
      }
      default: {  // splice the other list back
        list.splice_back(other);
        model.splice(model.end(), other_model);
        for (int v = 0; v < pool_size; ++v) {
          if (in_other[static_cast<std::size_t>(v)]) in_list[static_cast<std::size_t>(v)] = true;
        }
        std::fill(in_other.begin(), in_other.end(), false);
        break;
      }
    }
    ASSERT_EQ(values(list), std::vector<int>(model.begin(), model.end())) << "step " << step;
    ASSERT_EQ(values(other), std::vector<int>(other_model.begin(), other_model.end()));
  }
}

}  // namespace
}  // namespace kevlar::detail
