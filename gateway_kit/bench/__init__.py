"""Benchmarks: ``python -m gateway_kit.bench <name>`` (see ``--help``).

Each module here has ``main(argv) -> int`` and prints its figures and ratios. They are
measurements, not tests: the README carries the latest figures and the command that made them.
"""
