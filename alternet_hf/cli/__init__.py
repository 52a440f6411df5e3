"""The installed commands, one module each: `alternet-<name>` runs `alternet_hf.cli.<name>.main` (hyphens in the name
become underscores; `setup.cfg`'s console scripts list them all, and each module's docstring is its `--help`).

Each module imports only the standard library at the top, so `--help` answers at once; the heavy
imports happen in `main()`, after the arguments are parsed.
"""
