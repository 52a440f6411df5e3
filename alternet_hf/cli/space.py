"""The Gradio Space: frequency and robustness demos over ResNet, ViT and AlterNet, and any Hub model beside them.

    alternet-space                                        # the zoo's Hub models
    alternet-space --models resnet=outputs/resnet-digits,alternet=outputs/alternet-digits
    alternet-space --models AlterNet=outputs/alternet-digits --atlas atlas/   # with alternet-atlas's folder

Models: `--models name=hub_id_or_folder,...` or `ALTERNET_SPACE_MODELS`; stored results for the accuracy curves
(one sub-folder per model name): `--results` or `ALTERNET_SPACE_RESULTS`; models still to be published: `--pending`
or `ALTERNET_SPACE_PENDING`. When no model loads (offline, say), it shows `alternet-reproduce`'s mini-zoo or says
how to make it: it always starts. The Any model tab's limits, for a bigger machine: ALTERNET_MAX_PARAMETERS (100e6),
ALTERNET_MAX_DOWNLOAD_MB (800), ALTERNET_MAX_INPUT_SIZE (448 px, the longer side), ALTERNET_MAX_GFLOPS (100 per
image), ALTERNET_WORKER_MEMORY_GB (6, each analysis's worker), ALTERNET_SPACE_TIME_LIMIT (180 s, then the worker is
killed), ALTERNET_SPACE_MAX_WAITING (8), ALTERNET_SPACE_CACHE and ALTERNET_SPACE_CACHE_MB (64) for its answers
(SECURITY.md).
"""

import os
import threading
from pathlib import Path

from alternet_hf.cli.analyze import comma_list
from alternet_hf.cli.common import command, make_parser

DEFAULT_MODELS = (
    "ResNet-50=alternet-hf/resnet-50-cifar100,ViT-Ti=alternet-hf/vit-ti-cifar100,"
    "AlterNet-50=alternet-hf/alternet-50-cifar100"
)


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("--models", default=os.environ.get("ALTERNET_SPACE_MODELS", DEFAULT_MODELS))
    parser.add_argument("--results", type=Path, default=os.environ.get("ALTERNET_SPACE_RESULTS"))
    parser.add_argument(
        "--pending",
        default=os.environ.get("ALTERNET_SPACE_PENDING", ""),
        help="names of models still to be published, comma-separated (the page says they are coming)",
    )
    parser.add_argument(
        "--atlas",
        default=os.environ.get("ALTERNET_SPACE_ATLAS"),
        help="the Atlas tab's atlas: a folder written by alternet-atlas or a Hub dataset id (or ALTERNET_SPACE_ATLAS)",
    )
    parser.add_argument("--port", type=int, help="default: $GRADIO_SERVER_PORT, else Gradio's 7860")
    parser.add_argument("--host", help="e.g. 0.0.0.0 in a container; default: $GRADIO_SERVER_NAME, else 127.0.0.1")
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from PIL import Image

    from alternet_hf.apps.space import MAX_SIDE, MAX_UPLOAD, build_demo, parse_models, start

    parse_models(args.models)  # a malformed --models is an error before anything loads
    Image.MAX_IMAGE_PIXELS = MAX_SIDE * MAX_SIDE  # a second guard behind the header check of every upload
    space = start(args.models, args.results, pending=comma_list(args.pending), atlas=args.atlas)
    print(space.status())
    threading.Thread(target=space.any_model.warm, daemon=True).start()  # the workers' imports, before a visitor
    demo = build_demo(space)
    # Two requests at a time bound the memory (each holds one image of at most MAX_SIDE² pixels).
    demo.queue(default_concurrency_limit=2, max_size=32).launch(
        server_name=args.host, server_port=args.port, max_file_size=MAX_UPLOAD
    )


if __name__ == "__main__":
    main()
