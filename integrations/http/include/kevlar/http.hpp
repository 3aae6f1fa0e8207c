// kevlar — HTTP on Boost.Beast (target kevlar::http): which responses and transport errors are
// transient (<kevlar/http/clause.hpp>), Retry-After (<kevlar/http/retry_after.hpp>), a deadline
// carried as a budget header (<kevlar/http/deadline.hpp>), and the standard shield with one
// exchange run through it (<kevlar/http/exchange.hpp>).
#pragma once

#include <kevlar/http/clause.hpp>
#include <kevlar/http/deadline.hpp>
#include <kevlar/http/exchange.hpp>
#include <kevlar/http/retry_after.hpp>
