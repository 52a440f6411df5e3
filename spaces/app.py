"""The Space repo's entry point: the `alternet-space` command (alternet_hf/cli/space.py).

`scripts/release.py` uploads this file with requirements.txt (the released alternet-hf, pinned), the stored analysis
results in results/, and space.json: the release's models, results and pending models as defaults of
ALTERNET_SPACE_MODELS, ALTERNET_SPACE_RESULTS and ALTERNET_SPACE_PENDING (a variable set in the Space's settings still
wins). Spaces start it as `python app.py`;
Gradio's GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose where it listens.
"""

import json
import os
from pathlib import Path

from alternet_hf.cli.space import main

HERE = Path(__file__).resolve().parent


def use_release_defaults(folder: Path = HERE) -> None:
    """Set the variables of `folder/space.json` that are not set already; relative results are `folder`'s."""
    config = folder / "space.json"
    if not config.is_file():
        return
    for name, value in json.loads(config.read_text()).items():
        os.environ.setdefault(name, str(folder / value) if name == "ALTERNET_SPACE_RESULTS" else value)


if __name__ == "__main__":
    use_release_defaults()
    main()
