// common/clock.h — the one clock of the library. Time is passed into pure code as a value
// (pure cores take no clock), so tests can drive timeouts with a fake clock.
#pragma once

#include <chrono>

namespace switchml {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

}  // namespace switchml
