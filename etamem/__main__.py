"""`python -m etamem ...` runs the command line (`etamem.cli`)."""
import sys

from .cli import main

sys.exit(main())
