#!/usr/bin/env python3
"""Tests of tools/instructions-by-function.py's reading of callgrind_annotate (CTest:
tools.instructions_by_function_names). The inputs are shaped as valgrind 3.19 prints them."""
import importlib.util
import os
import unittest

_spec = importlib.util.spec_from_file_location(
    "instructions_by_function",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "instructions-by-function.py"))
ibf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ibf)


class Shorten(unittest.TestCase):
    def test_templates_parameters_and_the_object_file_go(self):
        self.assertEqual(
            ibf.shorten("???:void kevlar::detail::store<std::tuple<int>>(kevlar::State&, int&&) "
                        "[/build/kevlar_count_instructions]"),
            "void kevlar::detail::store")

    def test_a_source_file_prefix_goes_but_a_namespace_stays(self):
        self.assertEqual(ibf.shorten("/src/engine.cpp:kevlar::detail::CallBase::run(Step) [/b/x]"),
                         "kevlar::detail::CallBase::run")
        self.assertEqual(ibf.shorten("./nptl/pthread_mutex_lock.c:pthread_mutex_lock [/lib/libc]"),
                         "pthread_mutex_lock")

    def test_clones_count_as_their_function(self):
        self.assertEqual(ibf.shorten("???:f(int) [clone .isra.0] [/x]"),
                         ibf.shorten("???:f(int) [clone .cold] [/x]"))

    def test_nested_parentheses_and_shift_operators(self):
        self.assertEqual(ibf.shorten("???:g(h::{lambda()#1}&) const [/x]"), "g const")
        self.assertEqual(ibf.shorten("???:std::ostream& operator<<(std::ostream&, A<int> const&)"),
                         "std::ostream& operator_shl")
        self.assertEqual(ibf.shorten("???:a::{lambda(int)#1}::operator()(int) const [/x]"),
                         "a::{lambda#1}::operator_call const")


class ParseAnnotation(unittest.TestCase):
    def test_functions_are_summed_and_totals_and_calls_skipped(self):
        text = """\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
5,000 (100.0%)  PROGRAM TOTALS

Ir              file:function
--------------------------------------------------------------------------------
3,000 (60.00%)  ???:f(int) [/x]
1,000 (20.00%)  ???:f(int) [clone .cold] [/x]
  900 (18.00%)  ???:g() [/x]
  400 ( 8.00%)  => ???:g() (3x)
"""
        self.assertEqual(ibf.parse_annotation(text), {"f": 4000, "g": 900})


if __name__ == "__main__":
    unittest.main()
