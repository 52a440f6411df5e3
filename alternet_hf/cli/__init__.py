"""The installed commands, one module each (`alternet-<name>` runs `alternet_hf.cli.<name>.main`; its docstring is its
`--help`), importing only the standard library at the top so that `--help` answers at once."""
