// kevlar — resilience strategies for Boost.Asio. The umbrella header.
#pragma once

#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/context.hpp>
#include <kevlar/diagnostics.hpp>
#include <kevlar/error.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/partitioned_shield.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/timeout.hpp>
