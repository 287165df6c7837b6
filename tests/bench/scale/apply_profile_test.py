#!/usr/bin/python3
"""apply_profile.py on a made-up pair of runs: samples go to the kind of their ApplyKind frame,
and a call path's microseconds are its share of the kind's samples times the kind's apply."""

import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apply_profile.py")

KIND_FRAME = ("dralens::bench::scale::(anonymous namespace)::Role::ApplyKind<"
              "(dralens::bench::scale::EventKind){}>(dralens::Resource, char const*, json const&)")
WRAPPERS = [
    "dralens::bench::scale::(anonymous namespace)::Role::ApplyEvent(dralens::Resource)",
    "std::_Function_handler<void (json const&), Lambda>::_M_invoke(std::_Any_data const&)",
    "dralens::exporter::cluster::(anonymous namespace)::Apply<dralens::model::ResourceClaim>(x)",
]


def log(release, taint):
    # Round 1 is the warm-up and does not count; rounds 2 and 3 average to `release`.
    rounds = []
    for n, r in ((1, 99.0), (2, release - 1), (3, release + 1)):
        rounds.append("[1000] round %d: 10 mixed events: 1.00 us CPU per event (project 1.00, "
                      "apply 1.00, free 1.00); apply by kind: allocate 1.00 release %.2f "
                      "taint %.2f us; 10 series\n" % (n, r, taint))
    return "".join(rounds)


def sample(kind, *frames_root_first):
    """One sample of `perf script -F ip,sym`: frames leaf first, each after an address."""
    stack = list(reversed(frames_root_first)) + list(reversed(WRAPPERS))
    stack += [KIND_FRAME.format(kind), "main"]
    return "".join("\t%x %s\n" % (0x1000 + i, f) for i, f in enumerate(stack)) + "\n"


UPSERT = "dralens::exporter::cluster::Analyzer::UpsertClaim(dralens::model::ResourceClaim const&)"
FLUSH = "dralens::exporter::cluster::Analyzer::Flush()"
FIND = "dralens::exporter::cluster::ClusterState::FindClaim(std::basic_string_view<char>) const"


class ApplyProfileTest(unittest.TestCase):

    def run_tool(self, small_script, large_script, *args):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, text in (("s.log", log(8.0, 20.0)), ("s.script", small_script),
                               ("l.log", log(20.0, 30.0)), ("l.script", large_script)):
                path = os.path.join(d, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                paths.append(path)
            return subprocess.run([sys.executable, TOOL] + paths + list(args),
                                  capture_output=True, text=True, check=False)

    def test_splits_the_kind_apply_by_share_of_samples(self):
        # Small: release 8 us, half of its samples under Flush, half under FindClaim.
        small = sample(3, UPSERT, FLUSH) + sample(3, UPSERT, FIND)
        # Large: release 20 us, three quarters under Flush; a taint sample apart.
        large = (sample(3, UPSERT, FLUSH) * 3 + sample(3, UPSERT, FIND) +
                 sample(6, "dralens::exporter::cluster::Analyzer::UpsertSlice(x)"))
        out = self.run_tool(small, large, "--kinds=release", "--min-us=0")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertIn("== release: 8.00 us per event small, 20.00 large (2 and 4 samples)", lines)
        self.assertIn("    8.00   20.00  +12.00  Analyzer::UpsertClaim", lines)
        self.assertIn("    4.00   15.00  +11.00    Analyzer::Flush", lines)
        self.assertIn("    4.00    5.00   +1.00    ClusterState::FindClaim", lines)
        # The wrappers above the analyzer are left out, and the taint sample is not a release's.
        self.assertFalse(any("Apply<>" in l or "Role::" in l or "UpsertSlice" in l for l in lines),
                         out.stdout)

    def test_a_kind_without_samples_says_so(self):
        small = sample(3, UPSERT, FLUSH)
        out = self.run_tool(small, small, "--kinds=taint")
        self.assertIn("== taint: no samples or no figure at one of the sizes", out.stdout)
        self.assertNotEqual(out.returncode, 0)

    def test_an_unknown_kind_is_an_error(self):
        out = self.run_tool("", "", "--kinds=reboot")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("unknown kind 'reboot'", out.stderr)


if __name__ == "__main__":
    unittest.main()
