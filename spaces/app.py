"""The Space repo's entry point: the `alternet-space` command (alternet_hf/cli/space.py).

scripts/release.sh uploads this file with the alternet_hf/ and analysis/ packages beside it.
"""

from alternet_hf.cli.space import main

if __name__ == "__main__":
    main()
