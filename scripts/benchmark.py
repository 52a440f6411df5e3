#!/usr/bin/env python
"""The installed `alternet-benchmark` command, runnable from a checkout: see alternet_hf/cli/benchmark.py."""

from alternet_hf.cli.benchmark import main

if __name__ == "__main__":
    main()
