// keep_second_thread_alive(), shared by kevlar_benchmarks and the instruction-count driver.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace kevlar::bench {

/// glibc elides the lock prefix of pthread mutexes while a process has one thread; a real server
/// has many. Benchmarks of mutex-based controls, and the handoff pairs, keep this parked thread
/// alive.
inline void keep_second_thread_alive() {
  struct Parked {
    std::mutex m;
    std::condition_variable cv;
    bool stop = false;
    std::thread t{[this] {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [this] { return stop; });
    }};
    ~Parked() {
      {
        std::lock_guard<std::mutex> lock(m);
        stop = true;
      }
      cv.notify_one();
      t.join();
    }
  };
  static Parked parked;
}

}  // namespace kevlar::bench
