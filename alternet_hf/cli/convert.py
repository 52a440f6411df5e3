"""Convert a checkpoint of the reference code (xxxnell/how-do-vits-work) into a zoo model folder.

alternet-convert resnet_50_cifar100_691cc9a9e4.pth.tar resnet-50-cifar100 converted/resnet-50-cifar100
alternet-convert swin_ti_cifar100_ec2894492b.pth.tar swin-ti-cifar100 converted/swin-ti-cifar100
alternet-convert my_alternet.pth.tar alternet-50-cifar100 out/alternet --remote-code

ViT, PiT and Swin files were written by timm 0.5.4; their keys are mapped to today's timm (see alternet_hf.hub.convert).
"""

from pathlib import Path

from alternet_hf.cli.common import command, json_object, make_parser


def build_parser():
    parser = make_parser(__doc__)
    parser.add_argument("checkpoint", type=Path, help="the reference's .pth.tar file")
    parser.add_argument("preset", help="zoo preset with the same architecture, e.g. resnet-50-cifar100")
    parser.add_argument("output", type=Path, help="folder to write (safetensors, config, image processor)")
    parser.add_argument(
        "--config", type=json_object, default={}, help="config overrides as JSON, e.g. '{\"num_labels\": 10}'"
    )
    parser.add_argument(
        "--remote-code",
        action="store_true",
        help="also write the modeling files, for trust_remote_code=True without alternet_hf",
    )
    return parser


@command
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from alternet_hf import convert_original_checkpoint

    model = convert_original_checkpoint(args.checkpoint, args.preset, **args.config)
    save_kwargs = {"remote_code": True} if args.remote_code else {}
    model.save_pretrained(args.output, **save_kwargs)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"converted {args.checkpoint} -> {args.output} ({type(model).__name__}, {parameters:,} parameters)")


if __name__ == "__main__":
    main()
