"""The markers mean what pyproject.toml says: `e2e` implies `slow`, so the fast path never runs a script end
to end even where a test forgot the `slow` marker."""

from paths import TESTS


def test_e2e_implies_slow(pytester):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.e2e
        def test_end_to_end():
            pass

        def test_unit():
            pass
        """
    )
    fast = pytester.runpytest("-m", "not slow", "-p", "no:cacheprovider")
    fast.assert_outcomes(passed=1, deselected=1)
    slow = pytester.runpytest("-m", "slow", "-p", "no:cacheprovider", "-v")
    slow.assert_outcomes(passed=1, deselected=1)
    slow.stdout.fnmatch_lines(["*test_end_to_end PASSED*"])
