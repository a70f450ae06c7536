"""Benchmarks for ownership-journal (not tests): `python -m bench <name> [--quick] [--json]`.

`python -m bench --help` lists the benchmarks; `bench/__main__.py` holds the
registry (name -> module). A benchmark module provides

* ``run(args) -> bench.common.Report`` (required), and
* ``add_arguments(parser)`` (optional) for its own options,

and keeps heavy imports (torch, ...) inside ``run`` so that ``--help`` stays fast.
Every figure is printed beside a reference measured in the same run, as a
ratio, with its target and PASS/MISS (see `bench.common`).
"""
