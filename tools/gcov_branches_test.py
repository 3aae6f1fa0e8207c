#!/usr/bin/env python3
"""Tests of tools/gcov-branches.py's edge classification and .gcov rewriting (CTest:
tools.gcov_branches). The inputs are shaped as gcov 12 writes them."""
import importlib.util
import os
import unittest

_spec = importlib.util.spec_from_file_location(
    "gcov_branches", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcov-branches.py"))
gb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gb)


def edge(count, fallthrough=False, throw=False):
    return {"count": count, "fallthrough": fallthrough, "throw": throw}


class EdgeKinds(unittest.TestCase):
    def test_a_call_that_may_throw_is_its_two_edges(self):
        self.assertEqual(gb.edge_kinds([edge(3, fallthrough=True), edge(0, throw=True)]),
                         ["call", "call"])

    def test_a_condition_stays_a_branch(self):
        self.assertEqual(gb.edge_kinds([edge(2), edge(1, fallthrough=True)]), ["", ""])

    def test_a_condition_after_a_call_stays_a_branch(self):
        kinds = gb.edge_kinds([edge(3, fallthrough=True), edge(0, throw=True),
                               edge(2, fallthrough=True), edge(1)])
        self.assertEqual(kinds, ["call", "call", "", ""])

    def test_an_exception_edge_without_its_return_before_it_is_a_throw(self):
        self.assertEqual(gb.edge_kinds([edge(0, throw=True)]), ["throw"])


TEXT = [
    "        -:    0:Source:/src/a.hpp",
    "        4:   10:  if (f(x)) {",
    "call    0 returned 4",
    "branch  1 taken 4 (fallthrough)",
    "branch  2 taken 0 (throw)",
    "branch  3 taken 3 (fallthrough)",
    "branch  4 taken 1",
    "    #####:   11:    g();",
    "call    0 never executed",
    "branch  1 never executed",
    "branch  2 never executed",
    "branch  3 never executed",
]


class Rewrite(unittest.TestCase):
    def test_calls_go_conditions_stay_and_unrun_exception_edges_are_marked(self):
        per_line = {
            10: [("call", 4), ("call", 0), ("", 3), ("", 1)],
            11: [("call", 0), ("call", 0), ("throw", 0)],
        }
        rewritten, unmatched = gb.rewrite(TEXT, per_line)
        self.assertEqual(unmatched, [])
        self.assertEqual(rewritten, [
            "        -:    0:Source:/src/a.hpp",
            "        4:   10:  if (f(x)) {",
            "call    0 returned 4",
            "branch  3 taken 3 (fallthrough)",
            "branch  4 taken 1",
            "    #####:   11:    g();",
            "call    0 never executed",
            "branch  3 taken 0 (throw)",
        ])

    def test_a_line_whose_counts_differ_is_left_as_it_is(self):
        per_line = {
            10: [("call", 4), ("call", 0), ("", 1), ("", 3)],  # another instantiation's order
            11: [("call", 0), ("call", 0), ("throw", 0)],
        }
        rewritten, unmatched = gb.rewrite(TEXT, per_line)
        self.assertEqual(unmatched, [10])
        self.assertEqual(rewritten[:7], TEXT[:7])
        self.assertNotIn("branch  1 never executed", rewritten)

    def test_a_line_with_more_edges_in_one_output_is_left_as_it_is(self):
        per_line = {10: [("call", 4), ("call", 0), ("", 3)], 11: []}
        rewritten, unmatched = gb.rewrite(TEXT, per_line)
        self.assertEqual(unmatched, [10, 11])
        self.assertEqual(rewritten, TEXT)


if __name__ == "__main__":
    unittest.main()
