"""`python -m benchmarks DATASET FILE ...`: the benchmark runner (see `etamem bench --help`)."""
import sys

from etamem.bench.cli import main

sys.exit(main())
