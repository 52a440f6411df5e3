"""The Gradio Space: frequency and robustness demos over ResNet, ViT and AlterNet.

    alternet-space                                        # the zoo's Hub models
    alternet-space --models resnet=outputs/resnet-digits,alternet=outputs/alternet-digits

Models: `--models name=hub_id_or_folder,...` or `ALTERNET_SPACE_MODELS`; stored analysis results for
the accuracy curves: `--results` or `ALTERNET_SPACE_RESULTS` (one sub-folder per model name).
"""

import os
from pathlib import Path

from alternet_hf.cli._common import command, make_parser

DEFAULT_MODELS = (
    "ResNet-50=alternet-hf/resnet-50-cifar100,ViT-Ti=alternet-hf/vit-ti-cifar100,"
    "AlterNet-50=alternet-hf/alternet-50-cifar100"
)


@command
def main(argv: list[str] | None = None) -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--models", default=os.environ.get("ALTERNET_SPACE_MODELS", DEFAULT_MODELS))
    parser.add_argument("--results", type=Path, default=os.environ.get("ALTERNET_SPACE_RESULTS"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 7860)))
    args = parser.parse_args(argv)
    from alternet_hf.space import Space, build_demo, load_models

    space = Space(load_models(args.models), args.results)
    print(space.status())
    demo = build_demo(space)
    demo.queue(default_concurrency_limit=2, max_size=32).launch(server_port=args.port, max_file_size="10mb")


if __name__ == "__main__":
    main()
