"""`python -m benchmarks DATASET FILE ...`: the benchmark runner (see `etamem bench --help`)."""
import sys

from etamem.cli.bench import main

sys.exit(main())
