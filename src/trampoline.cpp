// The grant trampoline (detail/trampoline.hpp): a level's deliveries, run or sent on.
#include <kevlar/detail/trampoline.hpp>

#include <cstddef>

namespace kevlar::detail {

void TrampolineLevel::flush() noexcept {
  if (!owns_) return;
  while (TrampolineJob* job = jobs_.pop_front()) job->reschedule(job);
  close();
}

void TrampolineLevel::drain() {
  if (!owns_) return;
  Trampoline& t = tl_trampoline;
  std::size_t ran = 0;
  while (TrampolineJob* job = jobs_.pop_front()) {
    if (++ran > trampoline_limit || !job->runnable(job)) {
      job->reschedule(job);
      continue;
    }
    t.from_drain = true;  // the entry point this delivery reaches joins this level
    try {
      job->run(job);
    } catch (...) {
      t.from_drain = false;
      throw;  // the destructor sends the deliveries left through their executors
    }
    t.from_drain = false;
  }
  close();
}

}  // namespace kevlar::detail
