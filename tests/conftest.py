"""pytest options shared by the notebook runner and the dense-mechanism tests."""
import pytest


def pytest_addoption(parser):
    parser.addoption("--flags", default="",
                     help='space-separated notebook cell flags to run as well, e.g. --flags "slow bench"')
    parser.addoption("--nb", default="",
                     help="only run notebooks whose file name contains this text")
